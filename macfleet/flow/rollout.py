"""The rollout flows: an exo build switched on the whole mesh at once, rolled back on failure.

Order (Python orders the mesh-wide phases; each phase runs on every node at once):
lock → repair what a killed rollout left → read every node → build the manifest → stage (controller → seed
over the management network, seed → peers over their cables) and verify → stop exo everywhere → flip
`current` everywhere → start everywhere → health gate → prune old releases → unlock.
Before each mesh-wide step the lock records it (`phase`), so a rollout killed at any moment is repaired by the
next command: every node is put back on the release it ran before (the last known-good one).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from macfleet.act import release as rel
from macfleet.act import transfer
from macfleet.act.lock import Acquired, ClusterLock, lock_path
from macfleet.errors import RolloutFailed, UsageError
from macfleet.flow.meshes import one_mesh
from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge.ipplan import plan_ip
from macfleet.judge.rollout import (
    HealthVerdict,
    Manifest,
    NodeStatus,
    RolloutReport,
    RolloutStatus,
    fanout_direct,
    judge_health,
    release_name,
    releases_to_prune,
)

Say = Callable[[str], None]
DEFAULT_KEEP = 3
DEFAULT_HEALTH_TIMEOUT_S = 90.0
SWITCH_STEPS = ("stop", "flip", "start", "health", "rollback")


def _quiet(_: str) -> None:
    pass


def link_addresses(fleet: Fleet, mesh: Mesh) -> dict[tuple[str, str], str]:
    """(a, b) → b's address on the a–b cable, from the IP plan."""
    out = {}
    for link in plan_ip(fleet, mesh.name).links:
        out[(link.a.node, link.b.node)] = link.b.address
        out[(link.b.node, link.a.node)] = link.a.address
    return out


# ------------------------------------------------------------------------------------------------------
# Source → build directory → release
# ------------------------------------------------------------------------------------------------------


def _safe_extract(archive: Path, into: Path) -> None:
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")  # refuses absolute paths, .., devices and links out of the tree


def resolve_source(source: str, ref: str | None, work: Path) -> Path:
    """A build directory from DIR, a tarball, or a git URL (cloned at --ref)."""
    p = Path(source).expanduser()
    if p.is_dir():
        return p
    if p.is_file():
        if not tarfile.is_tarfile(p):
            raise UsageError(f"--source {source}: not a directory, a tarball or a git URL")
        _safe_extract(p, work / "src")
        entries = [e for e in (work / "src").iterdir()]
        return entries[0] if len(entries) == 1 and entries[0].is_dir() else work / "src"
    if source.startswith(("https://", "ssh://", "git@", "file://")):
        argv = ["git", "clone", "--quiet", "--depth", "1", *(["--branch", ref] if ref else []), "--", source,
                str(work / "src")]
        p2 = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        if p2.returncode != 0:
            raise UsageError(f"git clone {source} failed: {p2.stderr.strip()[-300:]}")
        shutil.rmtree(work / "src" / ".git", ignore_errors=True)
        return work / "src"
    raise UsageError(f"--source {source}: no such directory or file, and not a git URL",
                     hint="give a build directory (e.g. from `macfleet lab exo-build`), a .tar.gz or a git URL")


def read_version(build: Path) -> str:
    meta = build / "BUILD.json"
    if meta.is_file():
        try:
            return str(json.loads(meta.read_text())["version"])
        except (ValueError, KeyError) as exc:
            raise UsageError(f"{meta}: no version ({exc})") from None
    version = build / "VERSION"
    if version.is_file():
        return version.read_text().strip()
    raise UsageError(f"{build}: no BUILD.json or VERSION file saying which exo version this is")


# ------------------------------------------------------------------------------------------------------
# Staging
# ------------------------------------------------------------------------------------------------------


def stage_release(fleet: Fleet, mesh: Mesh, root: str, build: Path, name: str, manifest: Manifest,
                  have: dict[str, rel.NodeRelease], say: Say) -> list[str]:
    """Put releases/NAME on every node lacking it; returns the nodes staged."""
    need = [n for n in mesh.node_names if name not in have[n].releases]
    if not need:
        return []
    releases = f"{root}/releases"
    staging = f"{releases}/.staging-{name}"
    final = f"{releases}/{name}"
    seed = need[0]
    t0 = time.monotonic()
    seed_args = transfer.SshArgs.for_node(fleet, fleet.node(seed))
    transfer.rsync_from_controller(seed_args, build, staging, None)
    _land(fleet, [seed], manifest, staging, final, root, name)
    say(f"staged {name} on {seed} over the management network in {time.monotonic() - t0:.1f} s")
    peers = need[1:]
    if peers:
        t1 = time.monotonic()
        addresses = link_addresses(fleet, mesh)
        transfer.install_mesh_known_hosts(fleet, [seed], transfer.mesh_known_hosts(
            fleet, {k: v for k, v in addresses.items() if k[0] == seed}))
        user = fleet.node(seed).user
        with transfer.transfer_agent(fleet, fleet.node(seed)) as agent:
            hops = fanout_direct(seed, peers, addresses)
            transfer.on_nodes(fleet, [h.dst for h in hops], lambda a: transfer.rsync_node_to_node(
                seed_args, final, user, next(h.dst_address for h in hops if h.dst == a.node), staging, None, agent))
        _land(fleet, peers, manifest, staging, final, root, name)
        say(f"staged {name} on {', '.join(peers)} from {seed} over Thunderbolt in {time.monotonic() - t1:.1f} s")
    return need


def _land(fleet: Fleet, nodes: list[str], manifest: Manifest, staging: str, final: str, root: str,
          name: str) -> None:
    """Verify every digest in staging, then move the whole release into place by one rename."""
    def one(a: transfer.SshArgs) -> None:
        res = transfer.land(a, manifest, staging, staging, check_only=True)
        if res.bad:
            path, why = next(iter(sorted(res.bad.items())))
            raise RolloutFailed(f"{a.node}: staged release {name} is not what was built: {path}: {why}",
                                details={"node": a.node, "bad": res.bad})
        man = manifest.model_dump_json()
        cmd = (f"umask 022 && cat > {final}.manifest.json.tmp && mv {final}.manifest.json.tmp "
               f"{final}.manifest.json && mv {staging} {final}")
        transfer.run_remote(a, cmd, stdin=man, timeout_s=60)
    transfer.on_nodes(fleet, nodes, one)


# ------------------------------------------------------------------------------------------------------
# Switch and health
# ------------------------------------------------------------------------------------------------------


def wait_healthy(fleet: Fleet, mesh: Mesh, timeout_s: float) -> HealthVerdict:
    """Poll every node's /node_id and /state until healthy or the deadline (the last verdict says why)."""
    port = mesh.settings.exo.port
    deadline = time.monotonic() + timeout_s
    while True:
        answers = {n.name: rel.ask_exo(n.address, port) for n in mesh.nodes}
        verdict = judge_health(answers)
        if verdict.healthy or time.monotonic() > deadline:
            return verdict
        time.sleep(1.0)


def switch(fleet: Fleet, mesh: Mesh, lock: ClusterLock, held: Acquired, root: str, frm: str | None, to: str,
           timeout_s: float, say: Say) -> HealthVerdict:
    nodes = list(mesh.node_names)
    phase = {"action": "switch", "from": frm, "to": to, "mesh": mesh.name}
    lock.set_phase(held, {**phase, "step": "stop"}, critical=True)
    t0 = time.monotonic()
    rel.stop_exo(fleet, nodes)
    lock.set_phase(held, {**phase, "step": "flip"}, critical=True)
    rel.flip_current(fleet, nodes, root, to)
    lock.set_phase(held, {**phase, "step": "start"}, critical=True)
    rel.start_exo(fleet, nodes)
    say(f"switched {len(nodes)} nodes to {to} in {time.monotonic() - t0:.1f} s; waiting for health")
    lock.set_phase(held, {**phase, "step": "health"}, critical=True)
    return wait_healthy(fleet, mesh, timeout_s)


def repair(fleet: Fleet, mesh: Mesh, lock: ClusterLock, held: Acquired, root: str, timeout_s: float,
           say: Say) -> str | None:
    """A switch left half-done by a killed command: put every node back on its release from before."""
    old = held.taken_over
    if old is None or old.phase.get("action") != "switch" or old.phase.get("step") not in SWITCH_STEPS:
        return None
    back = old.phase.get("from")
    if not back or old.phase.get("mesh") != mesh.name:
        return None
    say(f"repairing: a switch to {old.phase.get('to')} was interrupted at '{old.phase.get('step')}'; "
        f"putting every node back on {back}")
    verdict = switch(fleet, mesh, lock, held, root, old.phase.get("to"), back, timeout_s, say)
    lock.set_phase(held, {"action": "repaired", "to": back})
    _history(fleet, {"action": "repair", "to": back, "healthy": verdict.healthy, "reasons": list(verdict.reasons)})
    return back


# ------------------------------------------------------------------------------------------------------
# History (controller side)
# ------------------------------------------------------------------------------------------------------


def _history_path(fleet: Fleet) -> Path:
    return lock_path(fleet.root).with_name(lock_path(fleet.root).name.replace(".lock.json", ".history.jsonl"))


def _history(fleet: Fleet, entry: dict) -> None:
    path = _history_path(fleet)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fh.write(json.dumps({"time": datetime.now(UTC).isoformat(), **entry}) + "\n")


def read_history(fleet: Fleet) -> list[dict]:
    path = _history_path(fleet)
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines()[-1000:]:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


# ------------------------------------------------------------------------------------------------------
# The commands' flows
# ------------------------------------------------------------------------------------------------------


def _status_of(have: dict[str, rel.NodeRelease]) -> RolloutStatus:
    versions = {h.current for h in have.values()}
    return RolloutStatus(current=next(iter(versions)) if len(versions) == 1 else None,
                         nodes={n: NodeStatus(version=h.current, running=h.running) for n, h in sorted(have.items())})


def rollout_status(fleet: Fleet, mesh: str | None = None) -> RolloutStatus:
    m = one_mesh(fleet, mesh)
    return _status_of(rel.read_nodes(fleet, list(m.node_names), m.settings.exo.install_root))


def _finish(fleet: Fleet, m: Mesh, lock: ClusterLock, held: Acquired, root: str, frm: str | None, to: str,
            keep: int, timeout_s: float, say: Say, action: str) -> RolloutReport:
    t0 = time.monotonic()
    verdict = switch(fleet, m, lock, held, root, frm, to, timeout_s, say)
    if verdict.healthy:
        lock.set_phase(held, {"action": "prune", "to": to})
        have = rel.read_nodes(fleet, list(m.node_names), root)
        for n, h in have.items():
            rel.remove_releases(fleet, n, root, releases_to_prune(h.releases, {to, *([frm] if frm else [])}, keep))
        _history(fleet, {"action": action, "from": frm, "to": to, "healthy": True})
        return RolloutReport(result="switched", release=to, previous=frm, took_s=round(time.monotonic() - t0, 2),
                             status=_status_of(rel.read_nodes(fleet, list(m.node_names), root)))
    why = "; ".join(verdict.reasons[:6])
    say(f"health gate failed: {why}")
    if not frm:
        lock.set_phase(held, {"action": "failed", "to": to})
        _history(fleet, {"action": action, "from": frm, "to": to, "healthy": False, "reasons": list(verdict.reasons)})
        raise RolloutFailed(f"{to} did not become healthy and there is no previous release to go back to: {why}")
    back = switch(fleet, m, lock, held, root, to, frm, timeout_s, say)
    lock.set_phase(held, {"action": "rolled back", "to": frm})
    _history(fleet, {"action": action, "from": frm, "to": to, "healthy": False, "reasons": list(verdict.reasons),
                     "rolled_back_healthy": back.healthy})
    after = "healthy again" if back.healthy else "NOT healthy either: " + "; ".join(back.reasons[:3])
    raise RolloutFailed(
        f"{to} failed its health gate within {timeout_s:g} s and was rolled back to {frm} ({after}): {why}",
        details={"release": to, "rolled_back_to": frm, "reasons": list(verdict.reasons),
                 "rolled_back_healthy": back.healthy})


def rollout_exo(fleet: Fleet, source: str, *, ref: str | None = None, mesh: str | None = None,
                keep: int = DEFAULT_KEEP, timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S,
                say: Say = _quiet) -> RolloutReport:
    m = one_mesh(fleet, mesh)
    root = m.settings.exo.install_root
    with tempfile.TemporaryDirectory(prefix="macfleet-build-") as work:
        build = resolve_source(source, ref, Path(work))
        version = read_version(build)
        manifest = transfer.local_manifest(build)
        name = release_name(version, manifest)
        lock = ClusterLock(lock_path(fleet.root))
        with lock.hold("rollout exo", f"switch {m.name} to {name}") as held:
            if held.taken_over is not None:
                say(held.explain() or "")
            repair(fleet, m, lock, held, root, timeout_s, say)
            have = rel.read_nodes(fleet, list(m.node_names), root)
            currents = {h.current for h in have.values()}
            if currents == {name} and all(h.running for h in have.values()):
                verdict = wait_healthy(fleet, m, min(timeout_s, 10))
                if verdict.healthy:
                    return RolloutReport(result="already", release=name, previous=None, took_s=0.0,
                                         status=_status_of(have))
            frm = next(iter(currents)) if len(currents) == 1 and None not in currents else None
            if frm == name:
                frm = _previous(fleet, name)
            lock.set_phase(held, {"action": "stage", "to": name})
            staged = stage_release(fleet, m, root, build, name, manifest, have, say)
            report = _finish(fleet, m, lock, held, root, frm, name, keep, timeout_s, say, "rollout")
            return report.model_copy(update={"staged": staged})


def _previous(fleet: Fleet, current: str) -> str | None:
    for e in reversed(read_history(fleet)):
        if e.get("to") == current and e.get("healthy") and e.get("from") and e.get("action") in ("rollout",
                                                                                                "rollback"):
            return e["from"]
    return None


def rollback_exo(fleet: Fleet, *, mesh: str | None = None, keep: int = DEFAULT_KEEP,
                 timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S, say: Say = _quiet) -> RolloutReport:
    m = one_mesh(fleet, mesh)
    root = m.settings.exo.install_root
    lock = ClusterLock(lock_path(fleet.root))
    with lock.hold("rollout rollback", f"roll {m.name} back") as held:
        if held.taken_over is not None:
            say(held.explain() or "")
        if repair(fleet, m, lock, held, root, timeout_s, say):
            return RolloutReport(result="repaired", release=held.taken_over.phase.get("from"), previous=None,
                                 took_s=0.0, status=rollout_status(fleet, m.name))
        have = rel.read_nodes(fleet, list(m.node_names), root)
        currents = {h.current for h in have.values()}
        if len(currents) != 1 or None in currents:
            raise RolloutFailed(f"nodes are on different releases ({', '.join(sorted(map(str, currents)))}); "
                                "run `macfleet rollout exo` to put them on one")
        current = next(iter(currents))
        target = _previous(fleet, current)
        if target is None:
            common = set.intersection(*(set(h.releases) for h in have.values())) - {current}
            order = [r for r in have[m.node_names[0]].releases if r in common]
            target = order[-1] if order else None
        if target is None:
            raise RolloutFailed(f"no release to roll back to from {current} on every node")
        return _finish(fleet, m, lock, held, root, current, target, keep, timeout_s, say, "rollback")
