"""llama.cpp's rpc-server on the nodes: read each node's releases and jobs, load and unload the jobs through
launchd, and knock on each job's Thunderbolt address from the peer at the other end of that cable.

Layout under the install root (`macfleet_llama.install_root`, relative to the admin's home, so no sudo is
needed to stage): `releases/<name>/` (a llama.cpp build: bin/rpc-server…), `releases/<name>.manifest.json`,
`current -> releases/<name>` (flipped by rename, as exo's), `logs/rpc-server.N.log`. Job N is the LaunchDaemon
`LABEL_PREFIX.N` (playbooks/llama-rpc.yml writes it); bootstrap's sudoers drop-in lets the admin
`launchctl bootout` and `bootstrap` those labels, and nothing else, without a password.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from macfleet.act.transfer import REMOTE_PYTHON, SshTarget, on_nodes, run_remote
from macfleet.errors import RemoteCommandError
from macfleet.inventory.model import Fleet
from macfleet.judge.llama_rpc import LABEL_PREFIX, MAX_JOBS
from macfleet.node import program

# Node programs (files in macfleet/node): home, `current`, the releases and the jobs loaded (argv: ROOT PREFIX
# JOBS); from a peer, connect to each (address, port) given as JSON on argv.
_READ_PROGRAM = program("llama_read")
_KNOCK_PROGRAM = program("llama_knock")


@dataclass
class LlamaNode:
    home: str
    current: str | None
    releases: list[str]
    loaded: dict[int, bool]  # job index -> running (a job is only loaded from its plist)
    plists: dict[int, dict]  # job index -> {"args": ProgramArguments, "user": UserName} of its plist


def read_nodes(fleet: Fleet, nodes: list[str], root: str) -> dict[str, LlamaNode]:
    cmd = shlex.join([REMOTE_PYTHON, "-c", _READ_PROGRAM, root, LABEL_PREFIX, str(MAX_JOBS)])

    def one(a: SshTarget) -> LlamaNode:
        out = run_remote(a, cmd, timeout_s=30)
        try:
            d = json.loads(out.strip().splitlines()[-1])
            return LlamaNode(home=str(d["home"]), current=d["current"], releases=[str(r) for r in d["releases"]],
                             loaded={int(k): bool(v) for k, v in d["loaded"].items()},
                             plists={int(k): dict(v) for k, v in d["plists"].items()})
        except (ValueError, KeyError, IndexError, AttributeError):
            raise RemoteCommandError(a.node, "read llama.cpp releases", 0, f"unexpected answer {out[-200:]!r}") \
                from None

    return on_nodes(fleet, nodes, one)  # type: ignore[return-value]


def make_dirs(fleet: Fleet, nodes: list[str], root: str) -> None:
    cmd = shlex.join(["mkdir", "-p", "--", f"{root}/releases", f"{root}/logs"])
    on_nodes(fleet, nodes, lambda a: run_remote(a, cmd, timeout_s=30))


def stop_jobs(fleet: Fleet, jobs: dict[str, list[int]]) -> None:
    """Unload the given rpc-server jobs of each node (those loaded, or that may be): launchd ends the process
    and forgets the job; one still loaded afterwards is an error."""
    def one(a: SshTarget) -> None:
        idx = sorted({int(i) for i in jobs[a.node] if 0 <= int(i) < MAX_JOBS})
        run_remote(a, "; ".join([*_stop_words(idx), "exit 0"]), timeout_s=60)
    on_nodes(fleet, [n for n in jobs if jobs[n]], one)


def _stop_words(idx: list[int]) -> list[str]:
    words = [f"sudo -n launchctl bootout system/{LABEL_PREFIX}.{i} 2>/dev/null" for i in idx]
    checks = [f"if launchctl print system/{LABEL_PREFIX}.{i} >/dev/null 2>&1; then echo job {i} still loaded >&2; "
              "exit 1; fi" for i in idx]
    return [*words, *checks]


def switch_jobs(fleet: Fleet, stop: dict[str, list[int]], flip: str, start: dict[str, list[int]]) -> None:
    """On each node in one SSH round trip: unload `stop`'s jobs (and check they are gone), run `flip` (the
    command that points `current` at the release), load `start`'s jobs from their plists."""
    def one(a: SshTarget) -> None:
        idx = sorted({int(i) for i in stop.get(a.node, []) if 0 <= int(i) < MAX_JOBS})
        loads = [f"sudo -n launchctl bootstrap system /Library/LaunchDaemons/{LABEL_PREFIX}.{int(i)}.plist"
                 for i in start.get(a.node, [])]
        run_remote(a, " && ".join(["{ " + "; ".join([*_stop_words(idx), "true"]) + "; }", flip, *loads]),
                   timeout_s=120)
    on_nodes(fleet, sorted({*stop, *start}), one)


def knock(fleet: Fleet, targets: dict[str, list[tuple[str, int]]]) -> dict[str, str | None]:
    """From each prober node, connect to its targets; "address:port" -> None (accepted) or why not."""
    out: dict[str, str | None] = {}

    def one(a: SshTarget) -> dict:
        cmd = shlex.join([REMOTE_PYTHON, "-c", _KNOCK_PROGRAM, json.dumps(targets[a.node])])
        text = run_remote(a, cmd, timeout_s=30)
        try:
            return dict(json.loads(text.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            raise RemoteCommandError(a.node, "connect to rpc-server", 0, f"unexpected answer {text[-200:]!r}") \
                from None

    for answers in on_nodes(fleet, [n for n in targets if targets[n]], one).values():
        out.update(answers)  # type: ignore[arg-type]
    return out
