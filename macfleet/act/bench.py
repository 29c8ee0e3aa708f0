"""Measuring Thunderbolt links: ping, then iperf3, between the two ends' link addresses, over SSH.

Per link: `ping` from a to b's link address (sourced from a's), then an iperf3 server on b bound to b's link
address (one test, then it exits) and a `--bidir` client on a bound to a's, so the traffic can only take that
cable and both directions are measured at once. Links of one round run in parallel (they share no node).
The raw outputs are returned as text: facts/bench.py parses them.

iperf3 is Homebrew's on a Mac (`brew install iperf3`, in Homebrew's bin directory, which a non-interactive SSH
session does not have on its PATH); the lab's nodes run Debian's.
"""

from __future__ import annotations

import contextlib
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from macfleet.collect.ssh import CommandTimeout, SshSession, SshTarget, Unreachable
from macfleet.constants import HOMEBREW_BIN
from macfleet.errors import UnreachableError
from macfleet.inventory.model import Fleet
from macfleet.judge.links_bench import BenchLink

PATH_PREFIX = f"PATH={HOMEBREW_BIN}:/usr/local/bin:$PATH "
PING_COUNT = 3
CONNECT_RETRY_S = 10.0  # the server binds a moment after its SSH channel opens: the client tries again


@dataclass
class LinkRaw:
    """What one link's commands printed (None: not run or no answer), and what went wrong running them."""

    ping: str | None = None
    iperf: str | None = None
    problems: list[str] = field(default_factory=list)


def ping_line(link: BenchLink) -> str:
    return shlex.join(["ping", "-q", "-c", str(PING_COUNT), "-t", "5", "-S", link.a_address, link.b_address])


def server_line(link: BenchLink, port: int, duration_s: int) -> str:
    # one test and exit; --idle-timeout ends a server whose client never came
    return PATH_PREFIX + shlex.join(["iperf3", "-s", "-1", "-B", link.b_address, "-p", str(port),
                                     "--idle-timeout", str(duration_s + 20)]) + " >/dev/null 2>&1"


def client_line(link: BenchLink, port: int, duration_s: int) -> str:
    return PATH_PREFIX + shlex.join(["iperf3", "-c", link.b_address, "-B", link.a_address, "-p", str(port),
                                     "-t", str(duration_s), "--bidir", "-J", "--connect-timeout", "3000"])


def _refused(stdout: str) -> bool:
    return "Connection refused" in stdout or "unable to connect" in stdout


def measure_link(sessions: dict[str, SshSession], link: BenchLink, port: int, duration_s: int,
                 sleep: Callable[[float], None] = time.sleep) -> LinkRaw:
    raw = LinkRaw()
    a, b = sessions[link.a], sessions[link.b]
    try:
        raw.ping = a.run_line(ping_line(link), timeout_s=15).stdout
    except (CommandTimeout, Unreachable) as exc:
        raw.problems.append(f"ping: {exc}")
    server_done = threading.Event()

    def serve() -> None:
        with contextlib.suppress(CommandTimeout, Unreachable):
            b.run_line(server_line(link, port, duration_s), timeout_s=duration_s + 40)
        server_done.set()

    threading.Thread(target=serve, daemon=True, name=f"iperf3-server-{link.b}").start()
    deadline = time.monotonic() + CONNECT_RETRY_S
    while True:
        try:
            out = a.run_line(client_line(link, port, duration_s), timeout_s=duration_s + 30)
        except (CommandTimeout, Unreachable) as exc:
            raw.problems.append(f"iperf3: {exc}")
            break
        if out.rc == 127 or "command not found" in out.stderr:
            raw.problems.append(f"iperf3 is not installed on {link.a} (`brew install iperf3`)")
            break
        if _refused(out.stdout) and time.monotonic() < deadline and not server_done.is_set():
            sleep(0.2)
            continue
        raw.iperf = out.stdout
        if server_done.is_set() and _refused(out.stdout):
            raw.problems.append(f"the iperf3 server on {link.b} did not start (is iperf3 installed there?)")
        break
    server_done.wait(duration_s + 45)
    return raw


def measure_rounds(fleet: Fleet, rounds: Sequence[Sequence[BenchLink]], port: int, duration_s: int,
                   on_round: Callable[[int, Sequence[BenchLink]], None] = lambda i, r: None) -> dict[str, LinkRaw]:
    """Every link, round after round, the links of a round at once; raw outputs by link key."""
    names = list(dict.fromkeys(n for r in rounds for lk in r for n in (lk.a, lk.b)))
    sessions: dict[str, SshSession] = {}
    unreachable: dict[str, str] = {}
    try:
        for n in names:
            s = SshSession(SshTarget.for_node(fleet, fleet.node(n)))
            try:
                s.connect()
                sessions[n] = s
            except Unreachable as exc:
                unreachable[n] = str(exc)
        if unreachable:
            raise UnreachableError(unreachable, hint="no link was measured")
        out: dict[str, LinkRaw] = {}
        for i, rnd in enumerate(rounds):
            on_round(i, rnd)
            with ThreadPoolExecutor(max_workers=max(1, len(rnd))) as pool:
                for lk, raw in zip(rnd, pool.map(lambda lk: measure_link(sessions, lk, port, duration_s), rnd),
                                   strict=True):
                    out[lk.key] = raw
        return out
    finally:
        for s in sessions.values():
            s.close()
