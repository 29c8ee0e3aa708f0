"""The watch loop: jittered tick → probe → judge → step → act → audit, metrics, page. Thin on purpose: what
to do is decided by `judge.remediation.step`; how to reboot by `flow.reboot`, and what a restart of exo waits for
(exo's `/state` verified as the reboot verifies it, then the models placed again and answering: `flow.placed`).

The healer does not die of its own files or of what it reads: a state file it cannot read or write, an audit
log it cannot append to, a tick that raises, are reported (log, status page, `macfleet_watch_errors_total`)
and the loop goes on with what it knows in memory. A damaged state file opens the breaker (it may have held
an open breaker and the reboots that count toward it). Everything it prints is data (the caller's `say` shows
text, never markup)."""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from macfleet.act import reboot as act_reboot
from macfleet.act.lock import ClusterLock, lock_path, stale_reason
from macfleet.act.maintenance import MaintenanceStore, command_alive
from macfleet.act.statedir import ensure, replace_shared, verify
from macfleet.collect.gather import Gathered
from macfleet.errors import (
    AT_UNLOCK_SCREEN,
    EXIT_OK,
    EXIT_PROBLEMS,
    EXIT_UNREACHABLE,
    LockHeld,
    MacfleetError,
    UsageError,
    most_severe_exit,
)
from macfleet.flow.checks import run_checks
from macfleet.flow.placed import MODELS_PHASE, models_answer
from macfleet.flow.reboot import (
    VERIFY_DEADLINE_S,
    VERIFY_EXO,
    RebootResult,
    Verifier,
    interrupted_reboot,
    reboot_mesh,
    unlocker,
)
from macfleet.inventory.model import Fleet, Mesh, RemediationSettings
from macfleet.judge import maintenance as maint
from macfleet.judge.health import CHECK_CODES, HealthReport
from macfleet.judge.remediation import Observation, Outcome, State, Step, after, damaged, describe_policy, step
from macfleet.paths import audit_file, cluster_dir, watch_state_file
from macfleet.render.watch import render_status_page
from macfleet.watch.audit import AuditLog
from macfleet.watch.metrics import RESULT_VALUE, Metrics, serve
from macfleet.watch.notify import Notifier
from macfleet.watch.notify import target as webhook_target
from macfleet.watch.probe import Prober


def watch_paths(fleet: Fleet) -> tuple[Path, Path]:
    """(state file, audit log) for this inventory, in its shared state directory (every user's, the healer's)."""
    return watch_state_file(fleet.root), audit_file(fleet.root)


def validate_policy(mesh: Mesh) -> None:
    """What pydantic cannot know: the check codes must be doctor's, and a laddered check must be probed."""
    policy = mesh.settings.remediation
    unknown = [c for c in [*policy.checks, *policy.ladder] if c not in CHECK_CODES]
    if unknown:
        raise UsageError(f"mesh {mesh.name}: macfleet_remediation names unknown check(s) {', '.join(unknown)}",
                         hint="checks: " + ", ".join(CHECK_CODES))
    if policy.webhook:
        try:
            webhook_target(policy.webhook)
        except ValueError as exc:
            raise UsageError(f"mesh {mesh.name}: macfleet_remediation.webhook: {exc}",
                             hint="a user:password@ in the URL is sent as basic authentication") from None
    unprobed = [c for c in policy.ladder if c not in policy.checks]
    if unprobed:
        raise UsageError(f"mesh {mesh.name}: macfleet_remediation.ladder has {', '.join(unprobed)}, which "
                         "macfleet_remediation.checks does not probe", hint="add them to checks, or drop them")


MAX_STATE_BYTES = 1 << 20


def parse_states(raw: bytes) -> dict[str, State]:
    """The state file's meshes; ValueError naming what is wrong (truncated, not JSON, a wrong type)."""
    if len(raw) > MAX_STATE_BYTES:
        raise ValueError(f"over {MAX_STATE_BYTES} bytes")
    data = json.loads(raw.decode("utf-8"))
    if not isinstance(data, dict) or set(data) != {"meshes"} or not isinstance(data["meshes"], dict):
        raise ValueError('expected {"meshes": {mesh: state}}')
    out = {}
    for m, st in data["meshes"].items():
        try:
            out[str(m)] = State.from_json(st)
        except ValueError as exc:
            raise ValueError(f"mesh {m}: {exc}") from None
    return out


def dump_states(states: dict[str, State]) -> bytes:
    return json.dumps({"meshes": {m: s.to_json() for m, s in states.items()}}, indent=2).encode()


def load_states(path: Path) -> dict[str, State]:
    """For `--reset` and tests: the file's states ({} when there is none); ValueError/OSError as they come."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    return parse_states(raw)


def save_states(path: Path, states: dict[str, State]) -> None:
    """Written whole (a temporary file renamed over it), group-writable: `watch --reset` may be anyone's."""
    replace_shared(path, dump_states(states))


class Troubles:
    """The healer's own troubles (its files, its ticks, its webhook): each kind said once when it starts or
    changes and once when it ends, counted in `macfleet_watch_errors_total{kind}`, shown on the page."""

    def __init__(self, say: Callable[[str], None], metrics: Metrics):
        self.say = say
        self.metrics = metrics
        self.current: dict[str, str] = {}
        self._lock = threading.Lock()

    def report(self, kind: str, message: str) -> None:
        self.metrics.errors.labels(kind).inc()
        with self._lock:
            changed = self.current.get(kind) != message
            self.current[kind] = message
        if changed:
            self.say(f"watch: {kind}: {message}")

    def clear(self, kind: str) -> None:
        with self._lock:
            was = self.current.pop(kind, None)
        if was is not None:
            self.say(f"watch: {kind}: recovered")


class StateStore:
    """The state file, with memory as the authority. Each tick re-reads the file only to see `watch --reset`
    (or an operator's edit): when it holds what this process last wrote, or cannot be written, memory wins.
    A file that cannot be read or parsed is damaged: it is kept aside (`.damaged-TIME`) and every mesh goes on
    with what memory knows and the breaker open, until `macfleet watch --reset`."""

    def __init__(self, path: Path, troubles: Troubles):
        self.path = path
        self.troubles = troubles
        self.memory: dict[str, State] | None = None
        self.written: bytes | None = None

    def load(self, meshes: list[str], now: datetime) -> dict[str, State]:
        try:
            raw: bytes | None = _read_bounded(self.path)
        except OSError as exc:
            return self._damaged(meshes, f"the state file {self.path} cannot be read ({exc.strerror or exc})", now)
        if raw is None or raw == self.written:
            if raw is None and self.memory is None:
                self.memory = {}
            self.troubles.clear("state-read")
            return dict(self.memory or {})
        try:
            states = parse_states(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            kept = self._keep_aside(raw, now)
            return self._damaged(meshes, f"the state file {self.path} was damaged ({exc}){kept}", now)
        self.troubles.clear("state-read")
        self.memory, self.written = states, raw
        return dict(states)

    def _damaged(self, meshes: list[str], why: str, now: datetime) -> dict[str, State]:
        self.troubles.report("state-read", f"{why}: the breaker is open on every mesh until `macfleet watch "
                                           "--reset`")
        known = dict(self.memory or {})
        for m in meshes:
            known[m] = damaged(known.get(m, State()), f"{why}; run `macfleet watch --reset` once you have looked",
                               now)
        self.memory = known
        return dict(known)

    def _keep_aside(self, raw: bytes, now: datetime) -> str:
        aside = self.path.with_name(f"{self.path.name}.damaged-{now.strftime('%Y%m%dT%H%M%SZ')}")
        try:
            if not aside.exists():
                aside.write_bytes(raw[:MAX_STATE_BYTES])
            return f"; kept as {aside}"
        except OSError:
            return ""

    def save(self, states: dict[str, State]) -> bool:
        self.memory = dict(states)
        data = dump_states(states)
        try:
            save_states(self.path, states)
        except OSError as exc:
            self.troubles.report("state-write", f"cannot write the state file {self.path} ({exc.strerror or exc}); "
                                                "going on with the state held in memory")
            return False
        self.written = data
        self.troubles.clear("state-write")
        return True


def _read_bounded(path: Path) -> bytes | None:
    try:
        with path.open("rb") as fh:
            return fh.read(MAX_STATE_BYTES + 1)
    except FileNotFoundError:
        return None


@dataclass
class Watcher:
    fleet: Fleet
    meshes: list[Mesh]
    interval_s: float
    say: Callable[[str], None]
    rng: random.Random = field(default_factory=random.Random)
    listen: str | None = None

    listen_token: str | None = None

    def __post_init__(self) -> None:
        for m in self.meshes:
            validate_policy(m)
        self.state_path, audit_path = watch_paths(self.fleet)
        ensure(self.state_path.parent)
        self.metrics = Metrics()
        self.troubles = Troubles(self.say, self.metrics)
        self.store = StateStore(self.state_path, self.troubles)
        self.audit = AuditLog(audit_path, on_error=lambda m: self.troubles.report("audit-write", m),
                              on_ok=lambda: self.troubles.clear("audit-write"))
        self.snapshot: dict = {"updated": None, "meshes": {}, "audit": []}
        self._refused: dict[str, tuple | None] = {}
        self.probers = {m.name: Prober(self.fleet, list(m.node_names)) for m in self.meshes}
        hooks = {m.settings.remediation.webhook for m in self.meshes} - {None}
        self.notifier = Notifier(next(iter(hooks), None), on_error=lambda m: self.troubles.report("webhook", m),
                                 count=lambda r: self.metrics.webhook.labels(r).inc(),
                                 on_ok=lambda: self.troubles.clear("webhook"))
        self.server = serve(self.listen, self.metrics, self.page, token=self.listen_token,
                            on_refused=lambda why: self.metrics.http_refused.labels(why).inc()) \
            if self.listen else None
        self.unlock_refused: set[str] = set()  # nodes whose unlock failed: not tried again until seen up
        self.maintenance = MaintenanceStore(self.fleet.root)
        self.in_maintenance: dict[str, maint.Maintenance] = {}  # as last read: to audit one that ran out
        self.last: dict[str, tuple[HealthReport, Gathered | None]] = {}  # each mesh's last probe (exit codes)

    def page(self) -> str:
        return render_status_page({**self.snapshot, "audit": list(self.audit.recent),
                                   "errors": dict(self.troubles.current)})

    def policy_lines(self) -> list[str]:
        lines = [f"state {self.state_path}, audit log {self.audit.path}"]
        for m in self.meshes:
            lines += [f"mesh {m.name}: {line}" for line in describe_policy(m.settings.remediation, self.interval_s)]
        return lines

    def close(self) -> None:
        for p in self.probers.values():
            p.close()
        self.notifier.close()
        self.audit.flush()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    # ------------------------------------------------------------------------------------------ a tick

    def probe(self, mesh: Mesh, now: datetime, *, preflight: bool = False) -> tuple[HealthReport, Gathered]:
        """One probe; with `preflight`, it also reads what a reboot must read first (this probe may decide one)."""
        extra = act_reboot.PREFLIGHT_SPECS if preflight else ()
        run = run_checks(self.fleet, [mesh], mesh.settings.remediation.checks, sessions=self.probers[mesh.name],
                         extra=extra, now=now)
        self._links(mesh, run.facts)
        return run.report, run.gathered

    def _links(self, mesh: Mesh, facts: dict) -> None:
        for n, f in facts.items():
            self.metrics.reachable.labels(mesh.name, n).set(1 if f.reachable else 0)
            for d in (f.ibv_devinfo.devices if f.ibv_devinfo else []):
                self.metrics.link.labels(mesh.name, n, d.name).set(1 if d.state == "PORT_ACTIVE" else 0)

    def tick(self) -> list[Step]:
        # re-read: `watch --reset` may have closed the breaker, `macfleet maintenance` started or ended
        states = self.store.load([m.name for m in self.meshes], datetime.now(UTC))
        planned = self.planned_work(datetime.now(UTC))
        steps = []
        for mesh in self.meshes:
            t0 = time.monotonic()
            policy = mesh.settings.remediation
            was = states.get(mesh.name, State())
            work = planned.get(mesh.name) if planned is not None else UNREADABLE_MAINTENANCE
            report, gathered = self.probe(mesh, datetime.now(UTC),
                                          preflight=work is None and reboot_may_follow(policy, was))
            self.last[mesh.name] = (report, gathered)
            if work is None:
                self.unlock_waiting(mesh, gathered)
            problems = _problems(report, mesh)
            now = datetime.now(UTC)
            s = step(policy, was, self.observation(mesh, problems, gathered, work), now)
            result, outcome, seen = self.act(mesh, s, gathered)
            states[mesh.name] = after(policy, s, outcome, datetime.now(UTC))
            self.store.save(states)
            self.record(mesh, report, s, states[mesh.name], result, problems, now, time.monotonic() - t0)
            if seen is not None:
                # the reboot verified the mesh over the same sessions a probe would use: that is this
                # probe, judged as one (no second look at a mesh just read clean); it waited for every node
                # first, so it is the settled look
                problems, now = _problems(seen, mesh), datetime.now(UTC)
                settled = replace(states[mesh.name], settle_until=None)
                s = step(policy, settled, self.observation(mesh, problems, None, None), now)
                states[mesh.name] = after(policy, s, "refused", now)  # no action follows this one
                self.store.save(states)
                self.record(mesh, seen, s, states[mesh.name], "read by the reboot's verification", problems, now,
                            0.0)
            steps.append(s)
        return steps

    def unlock_waiting(self, mesh: Mesh, gathered: Gathered | None) -> None:
        """A node found waiting at its FileVault unlock screen (a power cut or a power cycle: no authrestart was
        possible) is unlocked over SSH with the mesh's FileVault credential when one is stored, strictly against
        its recorded unlock-screen key (apple_ssh_and_filevault(7)); audited and paged. The next probe sees it
        back. Without a credential it stays there, and the `reachable` check says where it waits."""
        if gathered is None:  # a probe that gathered nothing (no node read): nobody to unlock
            return
        self.unlock_refused -= {n for n in mesh.node_names if n not in gathered.unreachable}
        waiting = [n for n in mesh.node_names if AT_UNLOCK_SCREEN in gathered.unreachable.get(n, "")
                   and n not in self.unlock_refused]
        unlock = unlocker(self.fleet, mesh) if waiting else None
        if unlock is None:
            return
        for n in waiting:
            sent, what = unlock(n)
            if not sent:
                self.unlock_refused.add(n)
            self.probers[mesh.name].sessions[n].retry_now()
            entry = {"time": datetime.now(UTC).isoformat(), "mesh": mesh.name, "node": n, "finding": "reachable",
                     "decision": f"{n} is {AT_UNLOCK_SCREEN}", "action": "unlock",
                     "result": ("password sent: " if sent else "not unlocked: ") + what}
            self.audit.append(entry)
            self.say(f"{mesh.name}: unlock: {entry['decision']} → {entry['result']}")
            self.notifier.notify({**entry, "page": not sent, "breaker_open": False})

    def observation(self, mesh: Mesh, problems: dict, gathered: Gathered | None, work: str | None) -> Observation:
        return observation(self.fleet, mesh, problems, gathered, work)

    def planned_work(self, now: datetime) -> dict[str, str] | None:
        """mesh -> the maintenance in force on it, in words; None when the file cannot be read (every mesh is
        then left alone: "could not read" is never "no maintenance"). One that ran out is audited once."""
        try:
            records = self.maintenance.read()
        except (OSError, MacfleetError) as exc:
            self.troubles.report("maintenance", f"{getattr(exc, 'message', None) or exc}: every mesh is left alone "
                                                "until it can be read")
            return None
        self.troubles.clear("maintenance")
        live = {m: r for m, r in records.items() if maint.in_force(r, now, command_alive=command_alive(r))}
        for mesh in set(self.in_maintenance) - set(live):
            was = records.get(mesh)
            if was is not None:  # still recorded, no longer in force: it ran out (`maintenance end` audits itself)
                why = (f"ran out at {was.until}" if maint.expired(was, now)
                       else f"its command {was.command} (pid {was.pid}) is gone")
                entry = {"time": now.isoformat(), "mesh": mesh, "node": None, "finding": None,
                         "decision": f"maintenance by {was.by} {why}: {was.reason}",
                         "action": "maintenance-end", "result": "over; the healer acts by its policy again"}
                self.audit.append(entry)
                self.say(f"{mesh}: maintenance: {entry['decision']} → {entry['result']}")
        self.in_maintenance = dict(live)
        return {m: maint.describe(r, now) for m, r in live.items()}

    def exit_code(self) -> int:
        """`watch --once`: 3 when a node could not be reached, 1 when a check found a problem or could not tell,
        0 healthy (docs/cli.md)."""
        codes = [EXIT_OK]
        for mesh in self.meshes:
            report, gathered = self.last.get(mesh.name, (None, None))
            if gathered is None or any(n in gathered.unreachable for n in mesh.node_names):
                codes.append(EXIT_UNREACHABLE)
            if report is None or report.findings or _unjudged(report, mesh):
                codes.append(EXIT_PROBLEMS)
        return most_severe_exit(codes)

    def act(self, mesh: Mesh, s: Step, gathered: Gathered | None = None
            ) -> tuple[str, Outcome, HealthReport | None]:
        """Carry out the step's action: (what happened, whether it was carried out, the verification a reboot
        ended on when it covers every check of the policy, else None). Both actions run under the cluster lock
        (a rollout or an operator's reboot holds it: the action is refused, and uses no rung). A reboot takes
        its preflight reads from the probe that decided it when that probe made them (`reboot_may_follow`),
        else reads them itself."""
        nodes = list(mesh.node_names)
        sessions = self.probers[mesh.name]
        if s.action == "restart-exo":
            return self._restart_exo(mesh, s, nodes)
        if s.action == "reboot":
            try:
                r = reboot_mesh(self.fleet, mesh, nodes, f"watch: {s.reason}", respect_windows=True, say=self.say,
                                sessions=sessions, before=_preflight_read(gathered, nodes))
            except LockHeld as exc:
                return f"refused: {exc.message}", "refused", None
            except MacfleetError as exc:
                self.metrics.reboots.labels(mesh.name).inc()
                return f"failed: {exc.message}", "failed", None
            except OSError as exc:  # its lock or its record could not be written: counted, it may have begun
                self.metrics.reboots.labels(mesh.name).inc()
                return f"failed: {exc.strerror or exc} ({getattr(exc, 'filename', None) or 'a file'})", "failed", None
            sessions.retry_now()
            last = r.phases[-1].detail if r.phases else (r.refusal or "")
            text = f"reboot {r.result}: {last}" + "".join(f"; {p.name} {p.took_s:g} s" for p in r.phases)
            if r.result == "refused":
                return text, "refused", None
            self.metrics.reboots.labels(mesh.name).inc()
            return text, ("done" if r.result == "ok" else "failed"), _covering(r, mesh.settings.remediation.checks)
        return ("paged" if s.action == "page" else "nothing done"), "refused", None

    def _restart_exo(self, mesh: Mesh, s: Step, nodes: list[str]) -> tuple[str, Outcome, None]:
        """Stop and start exo on every node of the mesh, then wait until exo's /state verifies and every model
        answers (`exo_answering`), all holding the cluster lock: a rollout in the middle of a switch (or one
        that died there and awaits its repair) is never raced, nor its release started, and nobody places a
        model between the restart and its placing again."""
        lock = ClusterLock(lock_path(self.fleet.root))
        sessions = self.probers[mesh.name]
        try:
            prior = lock.read()
            if prior is not None and prior.phase and stale_reason(prior, datetime.now(UTC),
                                                                  this_host=socket.gethostname()) is not None:
                # a dead holder's unfinished step: taking its lock over would throw its repair record away
                step_name = prior.phase.get("phase") or "a recorded phase"
                return (f"refused: the cluster lock holds the unfinished step ({step_name}) of {prior.owner}, "
                        "which died; its own rerun repairs it first", "refused", None)
            with lock.hold("watch", f"restarting exo on mesh {mesh.name}: {s.reason}"[:500]):
                try:
                    stops = act_reboot.stop_exo_on(sessions, nodes)
                    # exo still there would keep what it had (its instances): not a restart, and said so
                    stuck = {n: st for n, st in stops.items() if not st.stopped}
                    act_reboot.start_exo_on(sessions, [n for n in nodes if n not in stuck])
                except MacfleetError as exc:
                    return f"failed: {exc.message}", "failed", None
                if stuck:
                    said = "; ".join(f"{n}: {'; '.join(st.holdouts())}" for n, st in stuck.items())
                    return f"failed: exo did not stop on {said}; started again on the others", "failed", None
                answering, detail = self.exo_answering(mesh)
        except LockHeld as exc:
            return f"refused: {exc.message}", "refused", None
        except OSError as exc:  # the lock cannot be written (a full disk): nothing was done
            return f"refused: cannot take the cluster lock ({exc.strerror or exc})", "refused", None
        if not answering:
            return f"failed: exo restarted on every node, but {detail}", "failed", None
        return f"exo restarted on every node (under the cluster lock); {detail}", "done", None

    def exo_answering(self, mesh: Mesh) -> tuple[bool, str]:
        """After exo's restart, as after a reboot's start of exo: its /state verified (the reboot's `verify exo
        /state` over the healer's sessions), then the declared models placed again (exo lost every instance) and
        a token through every placed model. (all well, what was found)."""
        try:
            back, detail, _report = Verifier(self.fleet, mesh, self.probers[mesh.name], VERIFY_EXO).verify(
                VERIFY_DEADLINE_S)
        except MacfleetError as exc:
            back, detail = False, exc.message
        if not back:
            return False, f"exo's /state was not verified within {VERIFY_DEADLINE_S:g} s: {detail}"
        answering, detail = models_answer(self.fleet, mesh, lambda line: self.say(f"{mesh.name}: restart-exo: {line}"))
        return answering, detail if answering else f"{MODELS_PHASE}: {detail}"

    def record(self, mesh: Mesh, report: HealthReport, s: Step, state: State, result: str, problems: dict,
               now: datetime, took_s: float) -> None:
        """The decision and what came of it, in the audit log, on stderr, to the webhook, in the metrics and on
        the page. `state` is the state after the action (a refused one used no rung)."""
        lines = problems.get(s.check, []) if s.check else [x for v in problems.values() for x in v]
        nodes = sorted({line.split(":", 1)[0] for line in lines})
        entry = {"time": now.isoformat(), "mesh": mesh.name, "node": ",".join(nodes) or None,
                 "finding": s.check or (", ".join(problems) or None), "decision": s.reason, "action": s.action,
                 "result": result}
        self.audit.append(entry)
        self.say(f"{mesh.name}: {s.action}: {s.reason} → {result}")
        refused = result.startswith(("refused", "reboot refused"))
        again = refused and self._refused.get(mesh.name) == (s.action, s.check)
        self._refused[mesh.name] = (s.action, s.check) if refused else None
        # an action refused probe after probe (the lock held for an hour) is paged once, not at every probe
        if (s.page or s.action in ("restart-exo", "reboot")) and not again:
            self.notifier.notify({**entry, "page": s.page, "breaker_open": state.breaker_open_since is not None})
        if s.resolved:  # every page is followed by this notice, planned work or not
            self.notifier.notify({**entry, "decision": f"back to healthy: {s.reason}", "page": False,
                                  "resolved": True, "breaker_open": state.breaker_open_since is not None})
        m = self.metrics
        for c in report.checks:
            m.check.labels(mesh.name, c.node, c.check).set(RESULT_VALUE[c.result])
        if s.action != "none" and not result.startswith(("refused", "reboot refused")):
            m.actions.labels(mesh.name, s.action).inc()
        m.breaker.labels(mesh.name).set(1 if state.breaker_open_since else 0)
        m.paused.labels(mesh.name).set(1 if "paused" in s.reason else 0)
        m.maintenance.labels(mesh.name).set(1 if mesh.name in self.in_maintenance else 0)
        for check in mesh.settings.remediation.checks:
            m.streak.labels(mesh.name, check).set(state.streak.get(check, 0))
        m.last_probe.labels(mesh.name).set(time.time())
        m.probe_seconds.labels(mesh.name).set(round(took_s, 3))
        by_node: dict[str, list[str]] = {n: [] for n in mesh.node_names}
        for f in report.findings:
            by_node.setdefault(f.node, []).append(f"{f.check}: {f.message}")
        unknown: dict[str, list[str]] = {}
        for c in _unjudged(report, mesh):
            unknown.setdefault(c.node, []).append(f"{c.check}: could not tell ({c.reason})")
        self.snapshot["updated"] = now.isoformat()
        self.snapshot["meshes"][mesh.name] = {"nodes": by_node, "unknown": unknown,
                                              "breaker": state.breaker_open_since,
                                              "breaker_reason": state.breaker_reason,
                                              "paused": "paused" in s.reason, "decision": s.reason,
                                              "maintenance": (maint.describe(self.in_maintenance[mesh.name], now)
                                                              if mesh.name in self.in_maintenance else None)}

    # ------------------------------------------------------------------------------------------- the loop

    def resume_interrupted(self) -> None:
        """A mesh reboot (watch's own or an operator's) that died once its reboots were issued is finished
        before the first probe: wait for every node, verify the mesh, start exo where it ran (the lock it left
        says where). Audited and paged like any action. Not on a mesh in maintenance."""
        lock = ClusterLock(lock_path(self.fleet.root))
        planned = self.planned_work(datetime.now(UTC))
        for mesh in self.meshes:
            if planned is None or mesh.name in planned:  # a person is at it: theirs to finish (`macfleet reboot`)
                continue
            try:
                if interrupted_reboot(lock, mesh, datetime.now(UTC)) is None:
                    continue
            except MacfleetError as exc:  # an unreadable lock: said, and the reboot that needs it will refuse
                self.troubles.report("lock", exc.message)
                continue
            r = reboot_mesh(self.fleet, mesh, list(mesh.node_names), "watch: finishing an interrupted reboot",
                            say=self.say, sessions=self.probers[mesh.name])
            last = r.phases[-1].detail if r.phases else (r.refusal or "")
            entry = {"time": datetime.now(UTC).isoformat(), "mesh": mesh.name, "node": None, "finding": None,
                     "decision": r.resumed or "an interrupted reboot was found", "action": "resume",
                     "result": f"reboot {r.result}: {last}"}
            self.audit.append(entry)
            self.say(f"{mesh.name}: resume: {entry['decision']} → {entry['result']}")
            self.notifier.notify({**entry, "page": r.result != "ok", "breaker_open": False})

    def run(self, *, once: bool, stop: threading.Event) -> None:
        for line in self.policy_lines():
            self.say(line)
        self.resume_interrupted()
        if once:
            self.tick()
            return
        # kured's jitter: the first tick falls somewhere in d/2..3d/2, so many controllers do not align
        delay = self.rng.uniform(self.interval_s / 2, self.interval_s * 1.5)
        while not stop.wait(delay):
            try:
                acted = any(s.action in ("restart-exo", "reboot") for s in self.tick())
                self.troubles.clear("tick")
            except Exception as exc:
                self.troubles.report("tick", f"internal error in a tick: {type(exc).__name__}: {exc}")
                acted = False
            # after an action, look again at once: the audit log should say as soon as possible whether it helped
            delay = 0.0 if acted else self.interval_s * self.rng.uniform(0.9, 1.1)


UNREADABLE_MAINTENANCE = "the maintenance file cannot be read (treated as maintenance)"


def preview(fleet: Fleet, meshes: list[Mesh], say: Callable[[str], None]) -> tuple[list[dict], int]:
    """`watch --check`: one probe of each mesh and the decision the healer would take on it now, from the state it
    remembers; nothing is done, written or sent (no action, unlock, state, audit line or notice). Returns the
    decisions and `watch --once`'s exit code for what the probes saw."""
    now = datetime.now(UTC)
    verify(cluster_dir(fleet.root))  # unsafe is refused (exit 2) as every other command does, nothing made
    states, why = _remembered(fleet, now)
    work = _maintenance_now(fleet, now)
    decisions, codes = [], [EXIT_OK]
    for mesh in meshes:
        validate_policy(mesh)
        sessions = Prober(fleet, list(mesh.node_names))
        try:
            run = run_checks(fleet, [mesh], mesh.settings.remediation.checks, sessions=sessions, now=now)
        finally:
            sessions.close()
        problems = _problems(run.report, mesh)
        in_force = work.get(mesh.name) if work is not None else UNREADABLE_MAINTENANCE
        obs = observation(fleet, mesh, problems, run.gathered, in_force)
        s = step(mesh.settings.remediation, states.get(mesh.name, State()), obs, now)
        decisions.append({"mesh": mesh.name, "action": s.action, "reason": s.reason, "check": s.check,
                          "page": s.page, "problems": problems, "state": why})
        say(f"{mesh.name}: would {s.action}: {s.reason}" if s.action != "none" else f"{mesh.name}: {s.reason}")
        if obs.observed is not None and obs.total is not None and obs.observed < obs.total:
            codes.append(EXIT_UNREACHABLE)
        if run.report.findings or _unjudged(run.report, mesh):
            codes.append(EXIT_PROBLEMS)
    return decisions, most_severe_exit(codes)


def observation(fleet: Fleet, mesh: Mesh, problems: dict, gathered: Gathered | None, work: str | None
                ) -> Observation:
    """What one probe of `mesh` tells the ladder: its problems, the pause file, the maintenance in force, and how
    many of its nodes answered (None: not counted, as after a reboot's own verification)."""
    nodes = list(mesh.node_names)
    observed = None if gathered is None else sum(n not in gathered.unreachable for n in nodes)
    pause = fleet.path(mesh.settings.remediation.pause_file)
    return Observation(problems=problems, paused=bool(pause and pause.exists()), maintenance=work,
                       observed=observed, total=len(nodes))


def _remembered(fleet: Fleet, now: datetime) -> tuple[dict[str, State], str]:
    """The healer's state as its file holds it, read only; a damaged one is judged as the healer would (breaker
    open), nothing kept aside."""
    path = watch_paths(fleet)[0]
    try:
        raw = _read_bounded(path)
        if raw is None:
            return {}, f"no state yet ({path})"
        return parse_states(raw), f"as remembered in {path}"
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        why = f"the state file {path} cannot be used ({exc}): the healer keeps its breaker open"
        return {m.name: damaged(State(), why, now) for m in fleet.meshes}, why


def _maintenance_now(fleet: Fleet, now: datetime) -> dict[str, str] | None:
    """mesh -> the maintenance in force, in words; None when it cannot be read. Nothing created to read it."""
    store = MaintenanceStore(fleet.root)
    if not store.path.parent.is_dir():
        return {}
    try:
        records = store.read()
    except (OSError, MacfleetError):
        return None
    return {m: maint.describe(r, now) for m, r in records.items()
            if maint.in_force(r, now, command_alive=command_alive(r))}


def reboot_may_follow(policy: RemediationSettings, state: State) -> bool:
    """Whether this probe may decide a reboot: a laddered check one bad probe short of its debounce, whose next
    rung is the reboot. Only then does the probe also read the reboot's preflight (FileVault, boot time, exo)."""
    return state.breaker_open_since is None and any(
        state.rung.get(c, 0) < len(rungs) and rungs[state.rung.get(c, 0)] == "reboot"
        and state.streak.get(c, 0) >= policy.debounce - 1 for c, rungs in policy.ladder.items())


def _preflight_read(gathered: Gathered | None, nodes: list[str]) -> act_reboot.BeforeReboot | None:
    """The probe's preflight reads, when it made them on every node; else None (the reboot reads them)."""
    keys = {s.key for s in act_reboot.PREFLIGHT_SPECS}
    if gathered is None or any(not keys <= set(gathered.outputs.get(n, {})) for n in nodes):
        return None
    return act_reboot.before_from(gathered, nodes)


def _unjudged(report: HealthReport, mesh: Mesh) -> list:
    """The checks the probe could not judge on a node of `mesh`, other than those not judged because a
    check they depend on found a problem (that problem is the one to act on)."""
    return [c for c in report.checks if c.result == "unknown" and c.node in mesh.node_names
            and not (c.reason or "").startswith("not judged:")]


def _problems(report: HealthReport, mesh: Mesh) -> dict[str, list[str]]:
    """check -> "node: message" lines: the findings, and every check that could not be judged on a node the
    healer is responsible for (a hung exo, an answer that cannot be read), as "could not tell (why)"."""
    problems: dict[str, list[str]] = {}
    for f in report.findings:
        problems.setdefault(f.check, []).append(f"{f.node}: {f.message}")
    for c in _unjudged(report, mesh):
        problems.setdefault(c.check, []).append(f"{c.node}: could not tell ({c.reason})")
    return problems


def _covering(r: RebootResult, checks: list[str]) -> HealthReport | None:
    """The reboot's clean verification as one report, when it read every check the policy probes."""
    if r.result != "ok" or not r.verification:
        return None
    seen = [c for rep in r.verification for c in rep.checks if c.check in checks]
    if not set(checks) <= {c.check for c in seen}:
        return None
    findings = [f for rep in r.verification for f in rep.findings if f.check in checks]
    return r.verification[-1].model_copy(update={"checks": seen, "findings": findings})


def reset(fleet: Fleet, meshes: list[Mesh], say: Callable[[str], None]) -> None:
    """Close the breaker and forget every streak and rung (the next probe starts a new episode)."""
    state_path, audit_path = watch_paths(fleet)
    ensure(state_path.parent)
    note = ""
    try:
        states = load_states(state_path)
    except (OSError, ValueError) as exc:
        # a damaged file: the meshes not reset here keep an open breaker (what watch itself would do)
        note = f"; the state file was damaged ({exc})"
        now = datetime.now(UTC)
        states = {m.name: damaged(State(), f"the state file was damaged ({exc}) when another mesh was reset", now)
                  for m in fleet.meshes}
    was = {m.name: states.pop(m.name, None) for m in meshes}
    try:
        save_states(state_path, states)
    except OSError as exc:
        raise MacfleetError(f"cannot write the state file {state_path} ({exc.strerror or exc}): nothing was reset",
                            hint="free space on its disk or fix its directory, then run --reset again") from None
    audit = AuditLog(audit_path, on_error=lambda msg: say(f"warning: {msg}"))
    for m in meshes:
        old = was[m.name]
        audit.append({"time": datetime.now(UTC).isoformat(), "mesh": m.name, "node": None, "finding": None,
                      "decision": "reset by the operator (`macfleet watch --reset`)"
                      + (f"; the breaker was open since {old.breaker_open_since}"
                         if old and old.breaker_open_since else "") + note,
                      "action": "reset", "result": "breaker closed, state cleared"})
        say(f"mesh {m.name}: breaker closed, state cleared")
