"""The rollout flows: an exo build switched on the whole mesh at once, rolled back on failure.

Order (Python orders the mesh-wide phases; each phase runs on every node at once):
lock → repair what a killed rollout left → read every node → build the manifest → stage (controller → seed
over the management network, seed → peers over their cables) and verify → stop exo everywhere → flip
`current` everywhere → start everywhere → health gate → prune old releases → unlock.
Before each mesh-wide step the lock records it (`phase`), so a rollout killed at any moment is repaired by the
next command: every node is put back on the release it ran before (the last known-good one).
With a builder node (`--build-on`), the release is built there instead, at its final path, and seeds the
fan-out (`rollout_exo_build`): source → builder → build → manifest on the builder → Thunderbolt → switch.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from macfleet.act import build as act_build
from macfleet.act import release as rel
from macfleet.act import transfer
from macfleet.act.lock import Acquired, ClusterLock, LockRecord, append_history, lock_path
from macfleet.act.lock import read_history as lock_history
from macfleet.collect.kept import NodeSessions
from macfleet.errors import RolloutFailed, UsageError
from macfleet.flow import Say, quiet
from macfleet.flow.checks import run_checks
from macfleet.flow.defaults import EXO_HEALTH_TIMEOUT_S, ROLLOUT_KEEP
from macfleet.flow.meshes import one_mesh
from macfleet.flow.placed import MODELS_PHASE, models_answer
from macfleet.inventory.model import ExoBuildSettings, Fleet, Mesh
from macfleet.judge.build import (
    BuildStep,
    RolloutPlan,
    build_release_name,
    explain_missing,
    outside_references,
    toolchain_refusal,
)
from macfleet.judge.ipplan import plan_ip
from macfleet.judge.rollout import (
    HEALTH_GATE,
    MAX_FILES,
    VERSION_RE,
    HealthVerdict,
    Manifest,
    NodeStatus,
    RolloutReport,
    RolloutStatus,
    check_release_name,
    fanout_direct,
    gate_verdict,
    release_name,
    releases_to_prune,
)

DEFAULT_KEEP = ROLLOUT_KEEP
DEFAULT_HEALTH_TIMEOUT_S = EXO_HEALTH_TIMEOUT_S
SWITCH_STEPS = ("stop", "flip", "start", "health", "rollback")


GIT_URL_PREFIXES = ("https://", "ssh://", "git@", "file://")  # a --source that is cloned, not read


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
    """Unpack a tarball into `into` (a temporary directory): a member that would leave it is bad input."""
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(into, filter="data")  # refuses absolute paths, .., devices and links out of the tree
    except tarfile.FilterError as exc:  # the member's name comes from the file: shown as data, bounded
        raise UsageError(f"--source {archive}: refused, a member would land outside the build: "
                         f"{str(exc)[:300]!r}",
                         hint="a build tarball holds relative paths, and links that stay inside it") from None
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise UsageError(f"--source {archive}: not a readable tarball ({str(exc)[:200]!r})") from None


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
    if source.startswith(GIT_URL_PREFIXES):
        argv = ["git", "clone", "--quiet", "--depth", "1", *(["--branch", ref] if ref else []), "--", source,
                str(work / "src")]
        p2 = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        if p2.returncode != 0:
            raise UsageError(f"git clone {source} failed: {p2.stderr.strip()[-300:]}")
        shutil.rmtree(work / "src" / ".git", ignore_errors=True)
        return work / "src"
    check_source(source)
    raise AssertionError("check_source refuses what is none of the above")


def check_source(source: str) -> None:
    """Refuse a --source that is no directory, no file and no git URL: before anything is taken or written."""
    p = Path(source).expanduser()
    if not (p.is_dir() or p.is_file() or source.startswith(GIT_URL_PREFIXES)):
        raise UsageError(f"--source {source[:300]}: no such directory or file, and not a git URL",
                         hint="give an exo checkout (a directory, built or to build with --build-on), a .tar.gz of "
                              "one, or a git URL such as https://github.com/exo-explore/exo")


def read_version(build: Path) -> str:
    meta = build / "BUILD.json"
    if meta.is_file():
        try:
            return _checked_version(meta, str(json.loads(meta.read_text())["version"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"{meta}: no version ({exc})") from None
    version = build / "VERSION"
    if version.is_file():
        return _checked_version(version, version.read_text(errors="replace").strip())
    raise UsageError(f"{build}: no BUILD.json or VERSION file saying which exo version this is")


def _checked_version(where: Path, version: str) -> str:
    if not VERSION_RE.match(version):
        raise UsageError(f"{where}: {version[:40]!r} is not a version",
                         hint="expected letters, digits and . _ + - (e.g. 1.0.71), at most 64")
    return version


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
    seed_args = transfer.ssh_target(fleet, seed)
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
    def one(a: transfer.SshTarget) -> None:
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
    """Judge the gate's checks (exo's, read over SSH as doctor reads them) until the mesh passes them or the
    deadline (the last verdict says why)."""
    deadline = time.monotonic() + timeout_s
    sessions = NodeSessions(fleet, list(mesh.node_names))
    try:
        while True:
            verdict = gate_verdict(run_checks(fleet, [mesh], HEALTH_GATE, sessions=sessions).report)
            if verdict.healthy or time.monotonic() > deadline:
                return verdict
            time.sleep(1.0)
    finally:
        sessions.close()


# A switch killed half-way is repaired by these commands only (`repair`); any other lock-taker refuses.
REPAIRED_BY = ["rollout exo", "rollout rollback"]
REPAIR = ("`macfleet rollout rollback` (it puts every node back on the release it ran before), or "
          "`macfleet rollout exo` again with the same source (it repairs first)")


def _repairs(mesh: Mesh) -> Callable[[LockRecord], bool]:
    """A rollout may take over a switch left half-done on its own mesh only (it repairs that one)."""
    return lambda record: record.phase.get("mesh") == mesh.name


def switch_step(lock: ClusterLock, held: Acquired, phase: dict) -> None:
    """Record a step of a switch in the lock, before it starts: critical, repaired by REPAIRED_BY only."""
    lock.set_phase(held, phase, critical=True, repair_by=REPAIRED_BY, repair=REPAIR)


def switch(fleet: Fleet, mesh: Mesh, lock: ClusterLock, held: Acquired, root: str, frm: str | None, to: str,
           timeout_s: float, say: Say) -> HealthVerdict:
    nodes = list(mesh.node_names)
    phase = {"action": "switch", "from": frm, "to": to, "mesh": mesh.name}
    follow_ports(fleet, mesh, root, frm, to, say)  # before anything stops: a failure here leaves exo running

    def step(name: str) -> None:
        switch_step(lock, held, {**phase, "step": name})

    step("stop")
    t0 = time.monotonic()
    rel.stop_exo(fleet, nodes)
    step("flip")
    rel.flip_current(fleet, nodes, root, to)
    step("start")
    rel.start_exo(fleet, nodes)
    say(f"switched {len(nodes)} nodes to {to} in {time.monotonic() - t0:.1f} s; waiting for health")
    step("health")
    verdict = wait_healthy(fleet, mesh, timeout_s)
    if not verdict.healthy:
        return verdict
    answering, detail = models_answer(fleet, mesh, say)  # exo restarted: no instance survived it
    say(f"{MODELS_PHASE}: {detail}")
    return verdict if answering else HealthVerdict(healthy=False, reasons=(detail,))


def follow_ports(fleet: Fleet, mesh: Mesh, root: str, frm: str | None, to: str, say: Say) -> None:
    """exo's peer ports change between releases (playbooks/roles/pf): where release `to` says other ports than
    `frm` (their act/build.PORTS_FILE, read on the first node: every node holds both), the packet-filter anchor
    is rendered from `to`'s on every node (playbooks/pf.yml) before the switch stops anything. The ports `to`
    drops were `frm`'s, whose exo is about to stop; bootstrap later renders the same anchor from `current`."""
    from macfleet.act.ansible import PlaybookRun, run_playbook

    names = [n for n in (frm, to) if n]
    first = mesh.node_names[0]
    ports = act_build.release_ports(transfer.ssh_target(fleet, first), root, names)
    if (ports.get(frm) if frm else None) == ports.get(to):
        return
    say(f"exo's peer ports differ in {to}: loading the packet-filter anchor for them on every node")
    run_playbook(PlaybookRun(playbook="pf", inventory=fleet.root, limit=tuple(mesh.node_names),
                             extravars={"pf_release_ports_file": f"{root}/releases/{to}/{act_build.PORTS_FILE}"}))


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


def _history(fleet: Fleet, entry: dict) -> None:
    append_history(fleet.root, entry)


def read_history(fleet: Fleet) -> list[dict]:
    return lock_history(fleet.root)


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


def exo_source(fleet: Fleet, m: Mesh, source: str | None, ref: str | None) -> tuple[str, str | None]:
    """--source and --ref, else the inventory's macfleet_exo.source (a path relative to the inventory directory,
    or a git URL) and macfleet_exo.version (the git ref)."""
    exo = m.settings.exo
    if source is None:
        if not exo.source:
            raise UsageError("no exo source: --source not given and macfleet_exo.source not set",
                             hint="give --source DIR|TARBALL|GIT-URL, or set macfleet_exo.source in the inventory's "
                                  "group_vars")
        source = exo.source if exo.source.startswith(GIT_URL_PREFIXES) else str(fleet.path(exo.source))
    return source, ref if ref is not None else exo.version


def rollout_exo(fleet: Fleet, source: str | None, *, ref: str | None = None, mesh: str | None = None,
                keep: int = DEFAULT_KEEP, timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S,
                say: Say = quiet, build_on: str | None = None, no_build: bool = False,
                check: bool = False) -> RolloutReport | RolloutPlan:
    m = one_mesh(fleet, mesh)
    source, ref = exo_source(fleet, m, source, ref)
    builder = build_node(m, build_on, no_build)
    if builder is not None or check:
        return rollout_exo_build(fleet, m, source, ref=ref, builder=builder, keep=keep, timeout_s=timeout_s,
                                 check=check, say=say)
    root = m.settings.exo.install_root
    with tempfile.TemporaryDirectory(prefix="macfleet-build-") as work:
        build = resolve_source(source, ref, Path(work))
        version = read_version(build)
        manifest = transfer.local_manifest(build)
        name = release_name(version, manifest)
        lock = ClusterLock(lock_path(fleet.root))
        with lock.hold("rollout exo", f"switch {m.name} to {name}", may_repair=_repairs(m)) as held:
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


# ------------------------------------------------------------------------------------------------------
# Building on a builder node (act/build.py, judge/build.py)
# ------------------------------------------------------------------------------------------------------


def build_node(m: Mesh, build_on: str | None, no_build: bool) -> str | None:
    """The node that builds the source (`--build-on`, else `macfleet_exo.build.node`), None for a built source."""
    node = None if no_build else (build_on or m.settings.exo.build.node)
    if node is not None and node not in m.node_names:
        raise UsageError(f"build node {node!r} is not a node of mesh {m.name}",
                         hint=f"one of: {', '.join(m.node_names)} (it also seeds the Thunderbolt fan-out)")
    return node


def read_source_version(tree: Path) -> str:
    """The version of a source tree: VERSION or BUILD.json as for a build, else pyproject.toml's
    [project] version (exo's own checkout)."""
    try:
        return read_version(tree)
    except UsageError:
        pyproject = tree / "pyproject.toml"
        if not pyproject.is_file():
            raise
    import tomllib

    try:
        return str(tomllib.loads(pyproject.read_text())["project"]["version"])
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{pyproject}: no [project] version ({exc})") from None


def _name_source(tree: Path, work: Path, builder: str | None, settings: ExoBuildSettings
                 ) -> tuple[Path, str, int, Manifest | None]:
    """(the tree to send, the release name, its file count, the manifest when the tree is the release)."""
    try:
        if builder is None:
            manifest = transfer.local_manifest(tree)
            return tree, release_name(read_version(tree), manifest), len(manifest.files), manifest
        snap = act_build.snapshot_source(tree, work / "snapshot")
        source = transfer.local_manifest(snap)
        return snap, build_release_name(read_source_version(snap), source, settings.command), len(source.files), None
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _landed(fleet: Fleet, nodes: list[str], root: str, name: str, have: dict[str, rel.NodeRelease]
            ) -> dict[str, Manifest]:
    """The nodes on which releases/NAME has landed (its manifest beside it), with that manifest."""
    holders = [n for n in nodes if name in have[n].releases]
    found = transfer.on_nodes(fleet, holders, lambda a: act_build.read_landed_manifest(a, root, name))
    return {n: found[n] for n in holders if found.get(n) is not None}  # type: ignore[misc]


def plan_rollout(fleet: Fleet, m: Mesh, root: str, name: str, files: int, builder: str | None) -> RolloutPlan:
    """What `rollout exo --check` says; reads the nodes, changes nothing anywhere (no lock either)."""
    nodes = list(m.node_names)
    have = rel.read_nodes(fleet, nodes, root)
    currents = {h.current for h in have.values()}
    frm = next(iter(currents)) if len(currents) == 1 and None not in currents else None
    already = currents == {name} and all(h.running for h in have.values())
    if builder is None:
        return RolloutPlan(release=name, source_files=files, build=None, switch_from=frm, already=already,
                           stage_on=[n for n in nodes if name not in have[n].releases])
    landed = _landed(fleet, [builder, *(n for n in nodes if n != builder)], root, name, have)
    seed = next(iter(landed), None)
    settings = m.settings.exo.build
    step = None if seed else BuildStep(node=builder, directory=f"{root}/releases/{name}", command=settings.command,
                                       timeout_s=settings.timeout_s)
    return RolloutPlan(release=name, source_files=files, build=step, reuse_from=seed, switch_from=frm,
                       already=already, stage_on=[n for n in nodes if n not in landed and n != (seed or builder)])


def _clear_interrupted_build(fleet: Fleet, m: Mesh, held: Acquired, root: str, say: Say) -> None:
    """A build killed with its command: its unfinished directory on the builder goes."""
    old = held.taken_over
    if old is None or old.phase.get("action") != "build" or old.phase.get("mesh") != m.name:
        return
    node, name = old.phase.get("node"), str(old.phase.get("to"))
    try:
        check_release_name(name)
    except ValueError:
        return
    if node in m.node_names:
        say(f"removing the unfinished build of {name} on {node}")
        act_build.clear_unfinished(transfer.ssh_target(fleet, str(node)), root, name)


def _tail_lines(text: str, lines: int = 15) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def build_release(fleet: Fleet, m: Mesh, lock: ClusterLock, held: Acquired, root: str, name: str, builder: str,
                  tree: Path, say: Say) -> Manifest:
    """Send the source into releases/NAME on the builder, build it there, compute its manifest there, check it
    needs nothing missing on another node, and mark it landed. A failed build is removed (its log stays)."""
    settings = m.settings.exo.build
    args = transfer.ssh_target(fleet, builder)
    final = f"{root}/releases/{name}"
    lock.set_phase(held, {"action": "build", "to": name, "node": builder, "mesh": m.name})
    act_build.clear_unfinished(args, root, name)
    t0 = time.monotonic()
    transfer.rsync_from_controller(args, tree, final, None)
    say(f"sent the source to {builder} in {time.monotonic() - t0:.1f} s; building {name} there "
        f"(timeout {settings.timeout_s:g} s)")
    res = act_build.run_build(args, root, name, settings.command, settings.timeout_s)
    if res.refused is not None:  # the builder lacks what the checkout needs: nothing was built
        act_build.remove_build(args, root, name)
        lock.set_phase(held, {"action": "build failed", "to": name, "node": builder})
        raise RolloutFailed(toolchain_refusal(builder, name, res.refused),
                            details={"node": builder, "release": name, "toolchain": res.refused})
    if not res.ok:
        act_build.remove_build(args, root, name)
        how = f"timed out after {settings.timeout_s:g} s" if res.timed_out else f"exited {res.rc}"
        lock.set_phase(held, {"action": "build failed", "to": name, "node": builder})
        _history(fleet, {"action": "build", "to": name, "node": builder, "healthy": False, "reasons": [how]})
        raise RolloutFailed(f"the build of {name} on {builder} {how}; nothing was switched (full log: "
                            f"{builder}:{res.log}). Its last lines:\n{_tail_lines(res.tail)}",
                            details={"node": builder, "release": name, "rc": res.rc, "timed_out": res.timed_out,
                                     "log": res.log, "tail": res.tail})
    manifest, homes = act_build.remote_manifest(args, root, name, max_files=MAX_FILES)
    refs = outside_references(manifest, final, homes)
    if refs:
        targets = sorted(set(refs.values()))
        absent = transfer.on_nodes(fleet, list(m.node_names), lambda a: act_build.missing_paths(a, targets))
        missing = {p: [n for n, miss in absent.items() if t in miss] for p, t in refs.items()}  # type: ignore
        missing = {p: ns for p, ns in missing.items() if ns}
        if missing:
            act_build.remove_build(args, root, name)
            raise RolloutFailed(explain_missing(missing, refs, name), details={"missing": missing})
    act_build.write_landed_manifest(args, root, name, manifest)
    extras = f" (with {', '.join(f'--extra {e}' for e in res.extras)})" if res.extras else ""
    say(f"built {name} on {builder}{extras} in {res.took_s:g} s: {len(manifest.files)} files, "
        f"{manifest.total_bytes / 1e6:.1f} MB")
    return manifest


def fan_out_release(fleet: Fleet, m: Mesh, root: str, seed: str, need: list[str], name: str, manifest: Manifest,
                    say: Say) -> None:
    """releases/NAME from the seed (which holds it, landed) to every node of `need` at once over their cables;
    each verifies every digest and link in staging before the rename into place."""
    if not need:
        return
    staging, final = f"{root}/releases/.staging-{name}", f"{root}/releases/{name}"
    transfer.on_nodes(fleet, need, lambda a: act_build.clear_unfinished(a, root, name))
    t0 = time.monotonic()
    addresses = link_addresses(fleet, m)
    transfer.install_mesh_known_hosts(fleet, [seed], transfer.mesh_known_hosts(
        fleet, {k: v for k, v in addresses.items() if k[0] == seed}))
    seed_args = transfer.ssh_target(fleet, seed)
    user = fleet.node(seed).user
    hops = {h.dst: h for h in fanout_direct(seed, need, addresses)}
    with transfer.transfer_agent(fleet, fleet.node(seed)) as agent:
        transfer.on_nodes(fleet, need, lambda a: transfer.rsync_node_to_node(
            seed_args, final, user, hops[a.node].dst_address, staging, None, agent))
    bad = transfer.on_nodes(fleet, need, lambda a: act_build.bad_links(a, staging, manifest))
    for node, links in sorted(bad.items()):
        if links:
            path, why = next(iter(sorted(links.items())))  # type: ignore[attr-defined]
            raise RolloutFailed(f"{node}: staged release {name} is not what was built: {path}: {why}")
    _land(fleet, need, manifest, staging, final, root, name)
    say(f"staged {name} on {', '.join(need)} from {seed} over Thunderbolt in {time.monotonic() - t0:.1f} s")


def _verified_seeds(fleet: Fleet, root: str, name: str, landed: dict[str, Manifest],
                    have: dict[str, rel.NodeRelease], say: Say) -> dict[str, Manifest]:
    """The landed copies that still match their manifest, first one first: a copy that differs is removed
    (unless exo runs from it: then that is an error to look into) and the next is tried."""
    final = f"{root}/releases/{name}"
    out = dict(landed)
    for node, manifest in landed.items():
        a = transfer.ssh_target(fleet, node)
        bad = transfer.land(a, manifest, final, final, check_only=True).bad or act_build.bad_links(a, final, manifest)
        if not bad:
            return out
        path, why = next(iter(sorted(bad.items())))
        if have[node].current == name:
            raise RolloutFailed(f"{node}: release {name}, which exo runs from, differs from its manifest: "
                                f"{path}: {why}", hint=f"look into it, then remove {final} on {node} to rebuild it")
        say(f"{node}: {name} differs from its manifest; removing it")
        act_build.remove_build(a, root, name)
        del out[node]
    return out


def rollout_exo_build(fleet: Fleet, m: Mesh, source: str, *, ref: str | None, builder: str | None, keep: int,
                      timeout_s: float, check: bool, say: Say) -> RolloutReport | RolloutPlan:
    """`rollout exo` with a builder node (the source is built there, at the release's final path, and fanned
    out from there), or `--check` of either kind."""
    root = m.settings.exo.install_root
    with tempfile.TemporaryDirectory(prefix="macfleet-source-") as work:
        tree, name, files, manifest = _name_source(resolve_source(source, ref, Path(work)), Path(work), builder,
                                                   m.settings.exo.build)
        if check:
            return plan_rollout(fleet, m, root, name, files, builder)
        assert builder is not None
        lock = ClusterLock(lock_path(fleet.root))
        with lock.hold("rollout exo", f"build {name} on {builder} and switch {m.name} to it",
                       may_repair=_repairs(m)) as held:
            if held.taken_over is not None:
                say(held.explain() or "")
            _clear_interrupted_build(fleet, m, held, root, say)
            repair(fleet, m, lock, held, root, timeout_s, say)
            nodes = list(m.node_names)
            have = rel.read_nodes(fleet, nodes, root)
            currents = {h.current for h in have.values()}
            if (currents == {name} and all(h.running for h in have.values())
                    and wait_healthy(fleet, m, min(timeout_s, 10)).healthy):
                return RolloutReport(result="already", release=name, previous=None, took_s=0.0,
                                     status=_status_of(have))
            frm = next(iter(currents)) if len(currents) == 1 and None not in currents else None
            if frm == name:
                frm = _previous(fleet, name)
            landed = _landed(fleet, [builder, *(n for n in nodes if n != builder)], root, name, have)
            landed = _verified_seeds(fleet, root, name, landed, have, say)
            if landed:
                seed = next(iter(landed))
                manifest = landed[seed]
                say(f"{name} is already built on {seed}: reusing it")
            else:
                seed = builder
                manifest = build_release(fleet, m, lock, held, root, name, builder, tree, say)
            need = [n for n in nodes if n not in landed and n != seed]
            lock.set_phase(held, {"action": "stage", "to": name})
            fan_out_release(fleet, m, root, seed, need, name, manifest, say)
            report = _finish(fleet, m, lock, held, root, frm, name, keep, timeout_s, say, "rollout")
            return report.model_copy(update={"staged": need, "built_on": None if landed else builder})


def _previous(fleet: Fleet, current: str) -> str | None:
    for e in reversed(read_history(fleet)):
        if e.get("to") == current and e.get("healthy") and e.get("from") and e.get("action") in ("rollout",
                                                                                                "rollback"):
            return e["from"]
    return None


def rollback_exo(fleet: Fleet, *, mesh: str | None = None, keep: int = DEFAULT_KEEP,
                 timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S, say: Say = quiet, check: bool = False) -> RolloutReport:
    """`check`: read each node's releases and say what the rollback would switch to; take no lock, change nothing."""
    m = one_mesh(fleet, mesh)
    root = m.settings.exo.install_root
    lock = ClusterLock(lock_path(fleet.root))
    if check:
        held = lock.read()
        if held is not None:
            say(f"the cluster lock is held by {held.owner}: a rollback now would "
                + ("repair its unfinished step first" if held.phase else "be refused until it is released"))
        current, target = _rollback_target(fleet, m, root)
        return RolloutReport(result="check", release=target, previous=current, took_s=0.0,
                             status=rollout_status(fleet, m.name))
    with lock.hold("rollout rollback", f"roll {m.name} back", may_repair=_repairs(m)) as held:
        if held.taken_over is not None:
            say(held.explain() or "")
        if repair(fleet, m, lock, held, root, timeout_s, say):
            return RolloutReport(result="repaired", release=held.taken_over.phase.get("from"), previous=None,
                                 took_s=0.0, status=rollout_status(fleet, m.name))
        current, target = _rollback_target(fleet, m, root)
        return _finish(fleet, m, lock, held, root, current, target, keep, timeout_s, say, "rollback")


def _rollback_target(fleet: Fleet, m: Mesh, root: str) -> tuple[str, str]:
    """(the release every node runs, the one a rollback switches to): the one before it in the history, else
    the newest other release every node still holds."""
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
    return current, target
