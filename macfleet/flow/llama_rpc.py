"""`macfleet rollout llama-rpc`: a llama.cpp build staged through rollout's release path, and rpc-server run
on every node of the mesh as LaunchDaemons bound to that node's Thunderbolt addresses only.

Order: read the plan (live cables) and every node → manifest and release name → (under --check: say it and
stop) → lock → stage (controller → seed, seed → peers over their cables, digests verified) → install the jobs'
plists (playbooks/llama-rpc.yml) → unload every rpc-server job → flip `current` → load the jobs → health gate:
each job accepts a connection from the peer at the other end of its cable → prune old releases → unlock. A gate
that fails puts the previous release back (or unloads the jobs when there was none) and says why (exit 1).
Every node runs rpc-server, so any node can be the head (`macfleet export llama-rpc --head NODE`).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from macfleet.act import llama_rpc as act
from macfleet.act import release as rel
from macfleet.act import transfer
from macfleet.act.ansible import PlaybookRun, run_playbook
from macfleet.act.lock import ClusterLock, append_history, lock_path
from macfleet.errors import Refused, RolloutFailed, UnreachableError, UsageError
from macfleet.flow import Say, quiet
from macfleet.flow.defaults import LLAMA_HEALTH_TIMEOUT_S
from macfleet.flow.meshes import one_mesh
from macfleet.flow.rollout import DEFAULT_KEEP, resolve_source, stage_release
from macfleet.flow.topology import plan_live
from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge.llama_rpc import (
    LlamaRolloutReport,
    RpcBinding,
    jobs_in_place,
    knock_targets,
    rpc_bindings,
    rpc_health,
)
from macfleet.judge.rollout import VERSION_RE, release_name, releases_to_prune

DEFAULT_HEALTH_TIMEOUT_S = LLAMA_HEALTH_TIMEOUT_S
RPC_SERVER = "bin/rpc-server"


def llama_version(build: Path) -> str:
    """The build's VERSION line (e.g. llama.cpp's build number "b6100") when it has one, else "llama.cpp"."""
    f = build / "VERSION"
    if f.is_file():
        line = (f.read_text(errors="replace").strip().splitlines() or [""])[0].strip()
        if not VERSION_RE.match(line):
            raise UsageError(f"{f}: {line[:40]!r} is not a version (letters, digits and . _ + -)")
        return line
    return "llama.cpp"


def _check_build(build: Path) -> None:
    entry = build / RPC_SERVER
    if not entry.is_file():
        raise UsageError(f"{build} has no {RPC_SERVER}: not a llama.cpp build",
                         hint="give the build directory (cmake's build/, holding bin/rpc-server; configure "
                              "with -DGGML_RPC=ON), or its tarball")


def _bindings(fleet: Fleet, m: Mesh) -> dict[str, list[RpcBinding]]:
    live = plan_live(fleet, [m])
    if live.gathered.unreachable:
        raise UnreachableError(live.unreachable, hint="nothing was changed")
    out = {n: rpc_bindings(live.plan, m.name, n) for n in m.node_names}
    lonely = [n for n, b in out.items() if not b]
    if lonely:
        raise Refused(f"{', '.join(lonely)} has no live Thunderbolt link with its planned address: no address for "
                      "rpc-server to listen on (it never listens on every address)",
                      hint="`macfleet topology check`, then `macfleet topology apply`", details={"nodes": lonely})
    return out


def _wait_healthy(fleet: Fleet, bindings: dict[str, list[RpcBinding]], port: int, timeout_s: float) -> list[str]:
    targets, by_key = knock_targets(bindings, port)
    deadline = time.monotonic() + timeout_s
    while True:
        reasons = rpc_health(act.knock(fleet, targets), by_key)
        if not reasons or time.monotonic() > deadline:
            return reasons
        time.sleep(1.0)


def _switch(fleet: Fleet, m: Mesh, root: str, to: str, bindings: dict[str, list[RpcBinding]],
            loaded: dict[str, list[int]], timeout_s: float) -> list[str]:
    """Unload the jobs loaded (or that may be), flip `current`, load the wanted jobs, wait for each to answer."""
    nodes = list(m.node_names)
    act.switch_jobs(fleet, {n: sorted({*loaded.get(n, []), *(b.index for b in bindings[n])}) for n in nodes},
                    rel.flip_command(root, to), {n: [b.index for b in bindings[n]] for n in nodes})
    return _wait_healthy(fleet, bindings, m.settings.llama.rpc_port, timeout_s)


def _program(root: str, home: str) -> str:
    return f"{root if root.startswith('/') else f'{home}/{root}'}/current/bin/rpc-server"


def _install_jobs(fleet: Fleet, m: Mesh, root: str, have: dict[str, act.LlamaNode],
                  bindings: dict[str, list[RpcBinding]]) -> bool:
    """Write the jobs' plists where they are not exactly the wanted ones (playbooks/llama-rpc.yml); False
    when every node already had them."""
    port = m.settings.llama.rpc_port
    if all(jobs_in_place(have[n].plists, bindings[n], _program(root, have[n].home), port, fleet.node(n).user or "")
           for n in m.node_names):
        return False
    homes = {have[n].home for n in m.node_names}
    extravars = {"llama_rpc_install_root": root, "llama_rpc_port": m.settings.llama.rpc_port,
                 "llama_rpc_jobs_by_host": {n: [{"index": b.index, "address": b.address} for b in bindings[n]]
                                            for n in m.node_names}}
    if len(homes) == 1:
        extravars["llama_rpc_home"] = homes.pop()
    run_playbook(PlaybookRun(playbook="llama-rpc", inventory=fleet.root, limit=tuple(m.node_names),
                             extravars=extravars))
    return True


def rollout_llama_rpc(fleet: Fleet, source: str, *, mesh: str | None = None, keep: int = DEFAULT_KEEP,
                      timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S, check: bool = False,
                      say: Say = quiet, force: bool = False) -> LlamaRolloutReport:
    """`force`: take the cluster lock even from a command that died in a critical step (its record is lost)."""
    m = one_mesh(fleet, mesh)
    if not m.settings.llama.enabled:
        raise UsageError(f"llama-rpc is not enabled for mesh {m.name}",
                         hint="set `macfleet_llama: {enabled: true}` in the inventory's group_vars, so doctor's "
                              "llama-rpc check watches what this starts")
    root = m.settings.llama.install_root
    port = m.settings.llama.rpc_port
    with tempfile.TemporaryDirectory(prefix="macfleet-llama-") as work:
        build = resolve_source(source, None, Path(work))
        _check_build(build)
        manifest = transfer.local_manifest(build)
        try:
            name = release_name(llama_version(build), manifest)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        lock = ClusterLock(lock_path(fleet.root))
        if not check:
            lock.check("rollout llama-rpc", force=force)  # refuse before any SSH
        bindings = _bindings(fleet, m)
        have = act.read_nodes(fleet, list(m.node_names), root)
        currents = {h.current for h in have.values()}
        frm = next(iter(currents)) if len(currents) == 1 and None not in currents else None
        need = [n for n in m.node_names if name not in have[n].releases]
        if check:
            return _plan_report(m, name, frm, bindings, need, have)
        with lock.hold("rollout llama-rpc", f"switch {m.name}'s rpc-server to {name}", force=force) as held:
            if held.taken_over is not None:
                say(held.explain() or "")
            t0 = time.monotonic()
            lock.set_phase(held, {"action": "llama-stage", "to": name})
            act.make_dirs(fleet, list(m.node_names), root)
            staged = stage_release(fleet, m, root, build, name, manifest,
                                   {n: rel.NodeRelease(current=h.current, releases=h.releases, running=False)
                                    for n, h in have.items()}, say)
            t1 = time.monotonic()
            if _install_jobs(fleet, m, root, have, bindings):
                say(f"installed {sum(map(len, bindings.values()))} rpc-server jobs in {time.monotonic() - t1:.1f} s")
            lock.set_phase(held, {"action": "llama-switch", "from": frm, "to": name})
            t1 = time.monotonic()
            loaded = {n: list(h.loaded) for n, h in have.items()}
            reasons = _switch(fleet, m, root, name, bindings, loaded, timeout_s)
            say(f"switched; every job answered its peer in {time.monotonic() - t1:.1f} s" if not reasons else
                f"switched; the health gate gave up after {time.monotonic() - t1:.1f} s")
            if reasons:
                _fail(fleet, m, root, name, frm if frm != name else None, bindings, reasons, timeout_s, say)
            for n, h in act.read_nodes(fleet, list(m.node_names), root).items():
                rel.remove_releases(fleet, n, root, releases_to_prune(h.releases, {name, *([frm] if frm else [])},
                                                                      keep))
            append_history(fleet.root, {"action": "rollout llama-rpc", "from": frm, "to": name, "healthy": True})
            return LlamaRolloutReport(result="switched", release=name, previous=frm, rpc_port=port, jobs=bindings,
                                      staged=staged, took_s=round(time.monotonic() - t0, 2))


def _fail(fleet: Fleet, m: Mesh, root: str, name: str, frm: str | None, bindings: dict[str, list[RpcBinding]],
          reasons: list[str], timeout_s: float, say: Say) -> None:
    why = "; ".join(reasons[:6])
    say(f"health gate failed: {why}")
    append_history(fleet.root, {"action": "rollout llama-rpc", "from": frm, "to": name, "healthy": False,
                                "reasons": reasons})
    if frm is None:
        act.stop_jobs(fleet, {n: [b.index for b in bindings[n]] for n in m.node_names})
        raise RolloutFailed(f"rpc-server of {name} did not accept connections within {timeout_s:g} s, and there is "
                            f"no previous release to go back to: its jobs were unloaded: {why}",
                            details={"release": name, "reasons": reasons})
    back = _switch(fleet, m, root, frm, bindings, {}, timeout_s)
    after = "which answers again" if not back else "which does NOT answer either: " + "; ".join(back[:3])
    raise RolloutFailed(f"rpc-server of {name} did not accept connections within {timeout_s:g} s and was rolled back "
                        f"to {frm} ({after}): {why}",
                        details={"release": name, "rolled_back_to": frm, "reasons": reasons,
                                 "rolled_back_healthy": not back})


def _plan_report(m: Mesh, name: str, frm: str | None, bindings: dict[str, list[RpcBinding]], need: list[str],
                 have: dict[str, act.LlamaNode]) -> LlamaRolloutReport:
    port = m.settings.llama.rpc_port
    would = [f"stage {name} on {', '.join(need)}" if need else f"stage nothing: every node has {name}",
             "install the rpc-server LaunchDaemons (playbooks/llama-rpc.yml): "
             + "; ".join(f"{n}: " + ", ".join(f"{b.label} -H {b.address} -p {port}" for b in bindings[n])
                         for n in m.node_names),
             f"unload every rpc-server job, point `current` at {name} (was {frm or 'nothing'}), load the jobs",
             "check that each job accepts a connection from the peer at the other end of its cable; "
             + (f"roll back to {frm} if not" if frm else "unload the jobs if not")]
    loaded = {n: sorted(h.loaded) for n, h in have.items() if h.loaded}
    if loaded:
        would.append("now loaded: " + "; ".join(f"{n}: jobs {', '.join(map(str, js))}" for n, js in loaded.items()))
    return LlamaRolloutReport(result="check", release=name, previous=frm, rpc_port=port, jobs=bindings,
                              staged=need, would=would)
