"""The coordinated mesh reboot: lock → preflight → stop exo → reboot all at once → wait → verify → start exo
→ verify /state. Each phase is timed; the lock holder finishes the job and releases the lock with the
outcome recorded (in the lock history beside it). Used by `macfleet reboot` and by `watch`'s reboot rung."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from macfleet.act import reboot as act
from macfleet.act.lock import ClusterLock, lock_path, stale_reason
from macfleet.errors import MacfleetError, UsageError
from macfleet.flow.doctor import run_doctor
from macfleet.flow.meshes import one_mesh
from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge.model import Refusal
from macfleet.judge.reboot import RebootPlan, preflight

VERIFY_NETWORK = ["reachable", "cabling", "bridge", "ip-plan", "rdma"]
VERIFY_EXO = ["reachable", "exo-running", "exo-version", "exo-peers", "exo-rdma"]
VERIFY_DEADLINE_S = 120.0


@dataclass
class Phase:
    name: str
    took_s: float
    ok: bool
    detail: str = ""
    at: str = ""  # when it started (ISO 8601, UTC)


@dataclass
class RebootResult:
    mesh: str
    result: str  # "ok", "failed", "refused", "dry-run"
    reason: str
    plan: list[dict] = field(default_factory=list)  # [{node, method, why}]
    steps: list[str] = field(default_factory=list)  # the phases, in order
    phases: list[Phase] = field(default_factory=list)
    nodes: dict[str, dict] = field(default_factory=dict)  # node -> {back, took_s, last_seen}
    refusal: str | None = None
    lock: str | None = None  # what happened to the lock (taken over from whom, released why)

    def payload(self) -> dict:
        return asdict(self)


def select(fleet: Fleet, mesh: str | None, nodes: list[str]) -> tuple[Mesh, list[str]]:
    """The mesh to reboot: --mesh, the mesh of NODES (they must be one whole mesh), or the only mesh."""
    if mesh is not None:
        m = one_mesh(fleet, mesh)
    elif nodes:
        unknown = [n for n in nodes if n not in {x.name for x in fleet.nodes}]
        if unknown:
            raise UsageError(f"unknown node(s): {', '.join(unknown)}", hint=f"nodes are listed in {fleet.root}")
        m = fleet.mesh(fleet.node(nodes[0]).mesh)
    elif len(fleet.meshes) == 1:
        m = fleet.meshes[0]
    else:
        raise UsageError("several meshes: say which with --mesh",
                         hint="meshes: " + ", ".join(x.name for x in fleet.meshes))
    if nodes and sorted(nodes) != sorted(m.node_names):
        raise UsageError(f"a mesh reboots whole: {', '.join(nodes)} is not every node of {m.name}",
                         hint=f"name all of {', '.join(m.node_names)}, or use --mesh {m.name}: RDMA state held "
                              "by peers is released only when the whole mesh reboots together")
    return m, list(m.node_names)


def _lock_holder(lock: ClusterLock, now: datetime) -> str | None:
    import socket

    record = lock.read()
    if record is None or stale_reason(record, now, this_host=socket.gethostname()) is not None:
        return None
    return record.describe(now)


def _record(path: Path, entry: dict) -> None:
    history = path.with_name(path.name.replace(".lock.json", ".history.jsonl"))
    history.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with history.open("a") as fh:
        fh.write(json.dumps(entry) + "\n")


def plan_reboot(fleet: Fleet, mesh: Mesh, nodes: list[str], reason: str, *, respect_windows: bool = False,
                now: datetime | None = None) -> tuple[RebootPlan | Refusal, act.BeforeReboot]:
    """Read every node (FileVault, boot time) and the lock, and judge whether the reboot may go ahead."""
    now = now or datetime.now(UTC)
    before = act.read_before(fleet, mesh, nodes)
    cred = fleet.path(mesh.settings.reboot.filevault_credential_file)
    verdict = preflight(mesh, nodes, before.filevault, credential=act.credential_problem(cred),
                        lock_holder=_lock_holder(ClusterLock(lock_path(fleet.root)), now), now=now,
                        reason=reason, respect_windows=respect_windows)
    return verdict, before


def _verify(fleet: Fleet, mesh: Mesh, checks: list[str], deadline_s: float) -> tuple[bool, str]:
    """Doctor's checks until clean or the deadline (ports come ACTIVE only once every peer is back)."""
    end = time.monotonic() + deadline_s
    while True:
        report = run_doctor(fleet, [mesh], only=checks, deadline_s=30).report
        if not report.findings and not report.summary.unknown:
            return True, "clean"
        if time.monotonic() > end:
            problems = [f"{f.node}: {f.message}" for f in report.findings]
            problems += [f"{c.node} {c.check}: could not tell ({c.reason})" for c in report.checks
                         if c.result == "unknown"]
            return False, "; ".join(problems[:6])
        time.sleep(2.0)


def reboot_mesh(fleet: Fleet, mesh: Mesh, nodes: list[str], reason: str, *, dry_run: bool = False,
                respect_windows: bool = False, progress: act.Progress | None = None,
                say: Callable[[str], None] | None = None) -> RebootResult:
    """The whole coordinated reboot. Never raises for a node's sake: the result says what happened."""
    progress = progress or (lambda n, s, d: None)
    say = say or (lambda line: None)
    started = datetime.now(UTC).isoformat()
    verdict, before = plan_reboot(fleet, mesh, nodes, reason, respect_windows=respect_windows)
    if isinstance(verdict, Refusal):
        return RebootResult(mesh=mesh.name, result="refused", reason=reason, refusal=verdict.reason)
    plan = [{"node": n.node, "method": n.method, "why": n.why} for n in verdict.nodes]
    if dry_run:
        return RebootResult(mesh=mesh.name, result="dry-run", reason=reason, plan=plan, steps=verdict.phases)
    lock = ClusterLock(lock_path(fleet.root))
    held = lock.acquire("reboot", reason, ttl_s=mesh.settings.reboot.lock_ttl_s)
    result = RebootResult(mesh=mesh.name, result="failed", reason=reason, plan=plan, lock=held.explain())
    if result.lock:
        say(result.lock)
    try:
        _run_phases(fleet, mesh, verdict, before, lock, held, result, progress, say)
    finally:
        lock.release(held)
        note = f"released ({result.result}: {result.phases[-1].detail if result.phases else reason})"
        result.lock = f"{result.lock}; {note}" if result.lock else note
        _record(held.path, {"time": datetime.now(UTC).isoformat(), "owner": "reboot", "mesh": mesh.name,
                            "started": started, "reason": reason, "result": result.result,
                            "phases": [asdict(p) for p in result.phases]})
    return result


def _timed(result: RebootResult, name: str, say: Callable[[str], None], fn: Callable[[], tuple[bool, str]]) -> bool:
    t0 = time.monotonic()
    at = datetime.now(UTC).isoformat()
    say(f"{name}…")
    try:
        ok, detail = fn()
    except MacfleetError as exc:
        ok, detail = False, exc.message
    result.phases.append(Phase(name=name, took_s=round(time.monotonic() - t0, 1), ok=ok, detail=detail, at=at))
    say(f"{name}: {'done' if ok else 'FAILED'} in {result.phases[-1].took_s:g} s{': ' + detail if detail else ''}")
    return ok


def _run_phases(fleet, mesh, plan: RebootPlan, before, lock, held, result: RebootResult, progress, say) -> None:
    nodes = [n.node for n in plan.nodes]
    running: dict[str, bool] = {}

    def stop() -> tuple[bool, str]:
        running.update(act.exo_running(fleet, nodes))
        prior = held.taken_over
        if prior is not None and prior.owner == "reboot" and prior.phase.get("exo_running"):
            # a reboot died after stopping exo: finish its job too, so exo comes back where it ran before
            running.update({n: True for n in prior.phase["exo_running"] if n in running})
            say(f"the interrupted reboot had stopped exo on {', '.join(prior.phase['exo_running'])}: "
                "it will be started there again")
        lock.set_phase(held, {"phase": "stopping exo", "exo_running": sorted(n for n, r in running.items() if r)})
        act.stop_exo_on(fleet, [n for n, r in running.items() if r])
        return True, f"exo was running on {sum(running.values())} of {len(nodes)} node(s)"

    def reboot() -> tuple[bool, str]:
        lock.set_phase(held, {"phase": "rebooting", "exo_running": sorted(n for n, r in running.items() if r)},
                       critical=True)
        cred = fleet.path(mesh.settings.reboot.filevault_credential_file)
        failed = act.issue_reboots(fleet, {n.node: n.method for n in plan.nodes}, cred)
        bad = {n: why for n, why in failed.items() if why}
        for n in nodes:
            progress(n, "failed" if n in bad else "rebooting", bad.get(n, "reboot issued"))
        return not bad, "; ".join(f"{n}: {w}" for n, w in bad.items()) or f"issued on {len(nodes)} node(s) at once"

    def wait() -> tuple[bool, str]:
        waits = act.wait_for_nodes(fleet, nodes, before.boottime, plan.timeout_s, progress)
        result.nodes = {n: asdict(w) for n, w in waits.items()}
        lost = {n: w.last_seen for n, w in waits.items() if not w.back}
        if lost:
            return False, "not back within {:g} s: {}".format(
                plan.timeout_s, "; ".join(f"{n} (last seen: {s})" for n, s in lost.items()))
        return True, f"every node back (slowest {max(w.took_s or 0 for w in waits.values()):g} s)"

    def start() -> tuple[bool, str]:
        lock.set_phase(held, {"phase": "starting exo"})
        again = [n for n, r in running.items() if r]
        act.start_exo_on(fleet, again)
        return True, f"started on {len(again)} node(s)" if again else "exo ran nowhere before: left stopped"

    steps = [("stop exo", stop), ("reboot", reboot), ("wait for nodes", wait),
             ("verify RDMA, IP plan, cabling", lambda: _verify(fleet, mesh, VERIFY_NETWORK, VERIFY_DEADLINE_S)),
             ("start exo", start)]
    for name, fn in steps:
        if not _timed(result, name, say, fn):
            return
    if any(running.values()) and not _timed(result, "verify exo /state", say,
                                            lambda: _verify(fleet, mesh, VERIFY_EXO, VERIFY_DEADLINE_S)):
        return
    held.critical = False
    result.result = "ok"
