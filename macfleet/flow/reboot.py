"""The coordinated mesh reboot: lock → preflight → stop exo → reboot all at once → wait → verify → start exo
→ verify /state. Each phase is timed; the lock holder finishes the job and releases the lock with the
outcome recorded (in the lock history beside it). Used by `macfleet reboot` and by `watch`'s reboot rung.

Every step runs over one kept-open session per node (watch's own, when watch reboots). A node's facts are
read as soon as it is back, while the others still boot; they are read again only if the mesh is not clean
yet and they predate the last node's return. The lock records each phase with what a successor needs: a
reboot that dies once its reboots were issued is resumed by the next `macfleet reboot` (wait, verify the
mesh, start exo where it ran, verify /state) instead of rebooting the mesh a second time."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from macfleet.act import reboot as act
from macfleet.act import unlock as act_unlock
from macfleet.act.lock import Acquired, ClusterLock, LockRecord, append_history, lock_path, stale_reason
from macfleet.collect.commands import CommandSpec
from macfleet.collect.gather import Gathered
from macfleet.collect.kept import NodeSessions
from macfleet.collect.ssh import SshTarget, unlock_key_recorded
from macfleet.errors import LockHeld, MacfleetError, UsageError
from macfleet.flow.bootstrap import read_secret_file
from macfleet.flow.checks import CheckPlan
from macfleet.flow.meshes import one_mesh
from macfleet.flow.placed import MODELS_PHASE, models_answer
from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge.health import HealthReport, NodeFacts
from macfleet.judge.model import Refusal
from macfleet.judge.reboot import ISSUED, PHASES, RebootPlan, preflight, sketch

# The checks a reboot verifies (their probes, and no other, read from the catalogue: a node that just booted
# is read in one round of commands).
VERIFY_NETWORK = ["reachable", "cabling", "bridge", "ip-plan", "rdma"]
# Not exo-version: a reboot changes no installed release, the version of an exo installed without macfleet cannot
# be known (doctor says "could not tell"), and a version split would show as exo-peers (nodes of different
# versions do not connect).
VERIFY_EXO = ["reachable", "exo-running", "exo-peers", "exo-rdma"]
VERIFY_DEADLINE_S = 120.0
READ_DEADLINE_S = 30.0  # one read of one node's facts
# The lock's phases once every reboot command was accepted: a successor resumes from there.
AFTER_ISSUE = ("waiting for nodes", "verifying", "starting exo", "verifying exo", "placing models")


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
    resumed: str | None = None  # the interrupted reboot this run finished, when it did
    # the clean reports the verification phases ended on (watch takes them as its next probe); not in --json
    verification: list[HealthReport] = field(default_factory=list, repr=False, compare=False)

    def payload(self) -> dict:
        data = asdict(replace(self, verification=[]))
        del data["verification"]
        return data


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
    record = lock.read()
    if record is None or stale_reason(record, now, this_host=socket.gethostname()) is not None:
        return None
    return record.describe(now)


def plan_reboot(fleet: Fleet, mesh: Mesh, nodes: list[str], reason: str, sessions: NodeSessions, *,
                respect_windows: bool = False, now: datetime | None = None, before: act.BeforeReboot | None = None,
                ) -> tuple[RebootPlan | Refusal, act.BeforeReboot]:
    """Read every node (FileVault, boot time, exo), unless `before` was read just now, and the lock, and judge
    whether the reboot may go ahead."""
    now = now or datetime.now(UTC)
    before = before if before is not None else act.read_before(sessions, nodes)
    cred = fleet.path(mesh.settings.reboot.filevault_credential_file)
    verdict = preflight(mesh, nodes, before.filevault, credential=act.credential_problem(cred),
                        lock_holder=_lock_holder(ClusterLock(lock_path(fleet.root)), now), now=now,
                        reason=reason, respect_windows=respect_windows)
    return verdict, before


def unlocker(fleet: Fleet, mesh: Mesh) -> Callable[[str], tuple[bool, str]] | None:
    """What the wait calls for a node found at its FileVault unlock screen (authrestart was not possible, or did
    not hold): the SSH unlock with the mesh's FileVault credential, when one is stored and usable; else None
    (the node is left there, and the wait names it)."""
    cred = fleet.path(mesh.settings.reboot.filevault_credential_file)
    if cred is None or act.credential_problem(cred) is not None:
        return None
    try:
        password = read_secret_file(cred)
    except MacfleetError:
        return None
    return lambda node: act_unlock.send_password(SshTarget.for_node(fleet, fleet.node(node)), password)


def interrupted_reboot(lock: ClusterLock, mesh: Mesh, now: datetime) -> LockRecord | None:
    """The stale lock of a reboot of `mesh` that died after its reboots were issued, if that is what is there."""
    record = lock.read()
    if record is None or record.owner != "reboot" or record.phase.get("mesh") != mesh.name:
        return None
    if record.phase.get("phase") not in AFTER_ISSUE:
        return None
    return record if stale_reason(record, now, this_host=socket.gethostname()) is not None else None


# ------------------------------------------------------------------------------------------- verification


class Verifier:
    """Doctor's `checks` on the mesh over the kept sessions, until clean or a deadline. `read_soon(node)`
    starts reading a node's facts at once (as it comes back); `verify` reads what is missing, judges, and
    reads again only what may have changed."""

    def __init__(self, fleet: Fleet, mesh: Mesh, sessions: NodeSessions, checks: list[str]):
        self.fleet, self.mesh, self.sessions = fleet, mesh, sessions
        self.plan = CheckPlan.of(fleet, [mesh], checks)
        self.specs: dict[str, tuple[CommandSpec, ...]] = {n: self.plan.specs(n) for n in mesh.node_names}
        self.facts: dict[str, NodeFacts] = {}
        self.read_at: dict[str, float] = {}
        self.reads = 0
        self.pending: dict[str, Future] = {}
        self.pool = ThreadPoolExecutor(max_workers=max(1, len(self.specs)))

    def _read(self, node: str) -> None:
        started = time.monotonic()
        got = Gathered()
        self.sessions.gather_node(node, self.specs[node], started + READ_DEADLINE_S, got)
        self.facts[node], self.read_at[node] = self.plan.facts(got, node), started
        self.reads += 1

    def read_soon(self, node: str) -> None:
        self.pending[node] = self.pool.submit(self._read, node)

    def _read_all(self, nodes: list[str]) -> None:
        for n in nodes:
            self.read_soon(n)
        for n in nodes:
            self.pending.pop(n).result()

    def verify(self, deadline_s: float, all_back_at: float = 0.0) -> tuple[bool, str, HealthReport]:
        end = time.monotonic() + deadline_s
        try:
            for f in list(self.pending.values()):
                f.result()
            self._read_all([n for n in self.specs if n not in self.facts])
            pause, first = 0.2, True
            while True:
                report = self.plan.judge(self.facts)
                if not report.findings and not report.summary.unknown:
                    again = self.reads - len(self.specs)
                    return True, "clean" + (f" (after {again} more read(s) of a node)" if again else ""), report
                if time.monotonic() > end:
                    return False, "; ".join(report.problems()[:6]), report
                # facts read before the last node was back may show its links down: read those again at once;
                # after that, every node again, a little later each time (ports come ACTIVE as peers settle)
                stale = [n for n, at in self.read_at.items() if at < all_back_at] if first else []
                if not stale:
                    time.sleep(pause)
                    pause = min(2.0, pause * 2)
                    stale = list(self.specs)
                first = False
                self._read_all(stale)
        finally:
            self.pool.shutdown(wait=False)


# ---------------------------------------------------------------------------------------------- the flow


def _rows(plan: RebootPlan) -> list[dict]:
    return [{"node": n.node, "method": n.method, "why": n.why} for n in plan.nodes]


def reboot_mesh(fleet: Fleet, mesh: Mesh, nodes: list[str], reason: str, *, dry_run: bool = False,
                respect_windows: bool = False, progress: act.Progress | None = None,
                say: Callable[[str], None] | None = None, sessions: NodeSessions | None = None,
                before: act.BeforeReboot | None = None) -> RebootResult:
    """The whole coordinated reboot. Never raises for a node's sake: the result says what happened.
    `sessions`: the nodes' kept sessions to use (watch's); without it, its own, closed at the end. `before`:
    the preflight's reads, when the caller has just made them (watch's last probe)."""
    own = sessions is None
    sessions = sessions if sessions is not None else NodeSessions(fleet, nodes)
    try:
        return _reboot(fleet, mesh, nodes, reason, dry_run, respect_windows, progress or (lambda n, s, d: None),
                       say or (lambda line: None), sessions, before)
    finally:
        if own:
            sessions.close()


def _reboot(fleet, mesh, nodes, reason, dry_run, respect_windows, progress, say, sessions, before) -> RebootResult:
    started = datetime.now(UTC).isoformat()
    lock = ClusterLock(lock_path(fleet.root))
    prior = interrupted_reboot(lock, mesh, datetime.now(UTC))
    if prior is not None:
        return _resume(fleet, mesh, nodes, reason, prior, lock, dry_run, progress, say, sessions, started)
    if not dry_run:
        try:  # a rollout, the healer or another user's reboot holds it: refused before any dial
            lock.check("reboot")
        except LockHeld as exc:
            return RebootResult(mesh=mesh.name, result="refused", reason=reason, refusal=exc.message)
    verdict, before = plan_reboot(fleet, mesh, nodes, reason, sessions, respect_windows=respect_windows,
                                  before=before)
    if isinstance(verdict, Refusal):
        # under --check the plan is shown beside the refusal, as far as it can be told
        would = sketch(mesh, nodes, before.filevault, reason) if dry_run else None
        return RebootResult(mesh=mesh.name, result="refused", reason=reason, refusal=verdict.reason,
                            plan=_rows(would) if would else [], steps=would.phases if would else [])
    plan = _rows(verdict)
    if dry_run:
        return RebootResult(mesh=mesh.name, result="dry-run", reason=reason, plan=plan, steps=verdict.phases)
    held = lock.acquire("reboot", reason, ttl_s=mesh.settings.reboot.lock_ttl_s)
    result = RebootResult(mesh=mesh.name, result="failed", reason=reason, plan=plan, lock=held.explain())
    if result.lock:
        say(result.lock)
    run = Run(fleet, mesh, nodes, lock, held, result, progress, say, sessions, before.boottime)
    try:
        run.full(verdict, before)
    finally:
        _finish(fleet.root, lock, held, result, mesh, reason, started)
    return result


def _resume(fleet, mesh, nodes, reason, prior: LockRecord, lock, dry_run, progress, say, sessions,
            started) -> RebootResult:
    now = datetime.now(UTC)
    why = stale_reason(prior, now, this_host=socket.gethostname())
    resumed = (f"resuming the reboot of {prior.describe(now)}, interrupted while {prior.phase['phase']} "
               f"({why}): its reboots were issued, so this run waits for every node, verifies the mesh and "
               "starts exo where it ran, rather than rebooting the mesh again")
    steps = list(PHASES[ISSUED:])
    if dry_run:
        return RebootResult(mesh=mesh.name, result="dry-run", reason=reason, steps=steps, resumed=resumed)
    held = lock.acquire("reboot", f"resuming: {prior.reason}", ttl_s=mesh.settings.reboot.lock_ttl_s,
                        phase=prior.phase)
    held.critical = True
    result = RebootResult(mesh=mesh.name, result="failed", reason=reason, lock=held.explain(), resumed=resumed)
    say(resumed)
    run = Run(fleet, mesh, nodes, lock, held, result, progress, say, sessions,
              {str(k): str(v) for k, v in dict(prior.phase.get("boottime") or {}).items()})
    run.running = {n: n in (prior.phase.get("exo_running") or []) for n in nodes}
    try:
        run.after_issue(mesh.settings.reboot.timeout_s)
    finally:
        _finish(fleet.root, lock, held, result, mesh, reason, started)
    return result


def _finish(root: Path, lock: ClusterLock, held: Acquired, result: RebootResult, mesh: Mesh, reason: str,
            started: str) -> None:
    lock.release(held)
    note = f"released ({result.result}: {result.phases[-1].detail if result.phases else reason})"
    result.lock = f"{result.lock}; {note}" if result.lock else note
    append_history(root, {"action": "reboot", "healthy": result.result == "ok", "owner": "reboot", "mesh": mesh.name,
                          "started": started, "reason": reason, "result": result.result, "resumed": result.resumed,
                          "phases": [asdict(p) for p in result.phases], "nodes": result.nodes})


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


@dataclass
class Run:
    """One reboot's phases, sharing what they learn (where exo ran, when each node came back)."""

    fleet: Fleet
    mesh: Mesh
    nodes: list[str]
    lock: ClusterLock
    held: Acquired
    result: RebootResult
    progress: act.Progress
    say: Callable[[str], None]
    sessions: NodeSessions
    boottime: dict[str, str]  # before the reboot: a node is back once it reports another
    running: dict[str, bool] = field(default_factory=dict)  # exo ran there before
    methods: dict[str, str] = field(default_factory=dict)

    def phase(self, name: str, *, critical: bool = False) -> None:
        """Record `name` in the lock with all a successor needs to finish the job."""
        self.lock.set_phase(self.held, {"phase": name, "mesh": self.mesh.name, "boottime": self.boottime,
                                        "methods": self.methods,
                                        "exo_running": sorted(n for n, r in self.running.items() if r)},
                            critical=critical)

    def full(self, plan: RebootPlan, before: act.BeforeReboot) -> None:
        self.running = dict(before.exo_running)
        self.methods = {n.node: n.method for n in plan.nodes}
        prior = self.held.taken_over
        if prior is not None and prior.owner == "reboot" and prior.phase.get("exo_running"):
            # a reboot died after stopping exo: finish its job too, so exo comes back where it ran before
            self.running.update({n: True for n in prior.phase["exo_running"] if n in self.running})
            self.say(f"the interrupted reboot had stopped exo on {', '.join(prior.phase['exo_running'])}: "
                     "it will be started there again")

        def stop() -> tuple[bool, str]:
            unread = [n for n in self.nodes if n not in self.running or n not in self.boottime]
            if unread:
                return False, (f"could not read whether exo runs, or the boot time, on {', '.join(unread)}: "
                               "nothing was changed")
            self.phase("stopping exo")
            stops = act.stop_exo_on(self.sessions, [n for n, r in self.running.items() if r])
            held = [f"{n}: {h}" for n, st in stops.items() for h in st.holdouts()]
            for line in held:
                self.say(f"exo did not stop cleanly on {line}")
            return True, (f"exo was running on {sum(self.running.values())} of {len(self.nodes)} node(s)"
                          + (f"; did not exit when asked: {'; '.join(held)}" if held else ""))

        def reboot() -> tuple[bool, str]:
            self.phase("rebooting", critical=True)
            cred = self.fleet.path(self.mesh.settings.reboot.filevault_credential_file)
            failed = act.issue_reboots(self.sessions, self.methods, cred)
            # authrestart refused (it exited non-zero: not supported, the password refused) on a node whose
            # unlock-screen key is recorded: a plain restart, then the SSH unlock at that screen with the same
            # password (apple_ssh_and_filevault(7), macOS 26). A node that did not answer is left alone.
            plain = {n: "shutdown" for n, why in failed.items()
                     if why and self.methods[n] == "authrestart" and "` exited " in why
                     and unlock_key_recorded(SshTarget.for_node(self.fleet, self.fleet.node(n)))}
            if plain:
                for n in plain:
                    self.say(f"{n}: authrestart was not possible ({failed[n]}): restarting it plainly; it will be "
                             "unlocked over SSH at its FileVault unlock screen")
                self.methods.update(plain)
                self.phase("rebooting", critical=True)
                failed.update(act.issue_reboots(self.sessions, plain, None))
            bad = {n: why for n, why in failed.items() if why}
            for n in self.nodes:
                self.progress(n, "failed" if n in bad else "rebooting", bad.get(n, "reboot issued"))
            if bad:
                return False, "; ".join(f"{n}: {w}" for n, w in bad.items())
            self.phase("waiting for nodes", critical=True)
            return True, f"issued on {len(self.nodes)} node(s) at once"

        if _timed(self.result, "stop exo", self.say, stop) and _timed(self.result, "reboot", self.say, reboot):
            self.after_issue(plan.timeout_s)

    def after_issue(self, timeout_s: float) -> None:
        """Wait (reading each node's facts as it returns), verify, start exo, verify /state."""
        network = Verifier(self.fleet, self.mesh, self.sessions, VERIFY_NETWORK)
        back_at: list[float] = []
        lock = threading.Lock()

        def came_back(node: str) -> None:
            with lock:
                back_at.append(time.monotonic())
            network.read_soon(node)

        def wait() -> tuple[bool, str]:
            waits = act.wait_for_nodes(self.sessions, self.nodes, self.boottime, timeout_s, self.progress,
                                       on_back=came_back, unlock=unlocker(self.fleet, self.mesh))
            self.result.nodes = {n: asdict(w) for n, w in waits.items()}
            lost = [w.verdict(n) for n, w in waits.items() if not w.back]
            if lost:
                return False, "not back within {:g} s: {}".format(timeout_s, "; ".join(lost))
            return True, f"every node back (slowest {max(w.took_s or 0 for w in waits.values()):g} s)"

        def verify(v: Verifier, all_back_at: float = 0.0) -> tuple[bool, str]:
            ok, detail, report = v.verify(VERIFY_DEADLINE_S, all_back_at)
            if ok:
                self.result.verification.append(report)
            return ok, detail

        def start() -> tuple[bool, str]:
            self.phase("starting exo", critical=True)
            again = [n for n, r in self.running.items() if r]
            act.start_exo_on(self.sessions, again)
            return True, f"started on {len(again)} node(s)" if again else "exo ran nowhere before: left stopped"

        if not _timed(self.result, "wait for nodes", self.say, wait):
            return
        self.phase("verifying", critical=True)
        if not _timed(self.result, "verify RDMA, IP plan, cabling", self.say,
                      lambda: verify(network, max(back_at, default=0.0))):
            return
        if not _timed(self.result, "start exo", self.say, start):
            return
        if any(self.running.values()):
            self.phase("verifying exo", critical=True)
            exo = Verifier(self.fleet, self.mesh, self.sessions, VERIFY_EXO)
            if not _timed(self.result, "verify exo /state", self.say, lambda: verify(exo)):
                return
            self.phase("placing models", critical=True)
            if not _timed(self.result, MODELS_PHASE, self.say, lambda: models_answer(self.fleet, self.mesh, self.say)):
                return
        self.held.critical = False
        self.result.result = "ok"
