"""The watch loop: jittered tick → probe → judge → step → act → audit, metrics, page. Thin on purpose: what
to do is decided by `judge.remediation.step`; how to reboot by `flow.reboot`."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from macfleet.act import reboot as act_reboot
from macfleet.act.lock import ClusterLock, lock_path
from macfleet.collect.commands import DOCTOR_SPECS, exo_specs
from macfleet.collect.gather import Gathered
from macfleet.errors import AT_UNLOCK_SCREEN, MacfleetError, UsageError
from macfleet.flow.doctor import node_facts
from macfleet.flow.reboot import RebootResult, interrupted_reboot, reboot_mesh, unlocker
from macfleet.inventory.model import Fleet, Mesh, RemediationSettings
from macfleet.judge.health import CHECK_CODES, HealthReport, judge_health
from macfleet.judge.remediation import Observation, State, Step, describe_policy, step
from macfleet.paths import inventory_tag, state_dir
from macfleet.render.watch import render_status_page
from macfleet.watch.audit import AuditLog
from macfleet.watch.metrics import RESULT_VALUE, Metrics, serve
from macfleet.watch.notify import Notifier
from macfleet.watch.probe import Prober


def watch_paths(fleet: Fleet) -> tuple[Path, Path]:
    """(state file, audit log) for this inventory, under macfleet's state directory."""
    tag = inventory_tag(fleet.root)
    base = state_dir() / "watch"
    return base / f"{tag}.state.json", base / f"{tag}.audit.jsonl"


def validate_policy(mesh: Mesh) -> None:
    """What pydantic cannot know: the check codes must be doctor's, and a laddered check must be probed."""
    policy = mesh.settings.remediation
    unknown = [c for c in [*policy.checks, *policy.ladder] if c not in CHECK_CODES]
    if unknown:
        raise UsageError(f"mesh {mesh.name}: macfleet_remediation names unknown check(s) {', '.join(unknown)}",
                         hint="checks: " + ", ".join(CHECK_CODES))
    unprobed = [c for c in policy.ladder if c not in policy.checks]
    if unprobed:
        raise UsageError(f"mesh {mesh.name}: macfleet_remediation.ladder has {', '.join(unprobed)}, which "
                         "macfleet_remediation.checks does not probe", hint="add them to checks, or drop them")


def load_states(path: Path) -> dict[str, State]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(m): State.from_json(s) for m, s in dict(data.get("meshes") or {}).items()}


def save_states(path: Path, states: dict[str, State]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"meshes": {m: s.to_json() for m, s in states.items()}}, indent=2))
    os.replace(tmp, path)


@dataclass
class Watcher:
    fleet: Fleet
    meshes: list[Mesh]
    interval_s: float
    say: Callable[[str], None]
    rng: random.Random = field(default_factory=random.Random)
    listen: str | None = None

    def __post_init__(self) -> None:
        for m in self.meshes:
            validate_policy(m)
        self.state_path, audit_path = watch_paths(self.fleet)
        self.audit = AuditLog(audit_path)
        self.metrics = Metrics()
        self.snapshot: dict = {"updated": None, "meshes": {}, "audit": []}
        self.probers = {m.name: Prober(self.fleet, list(m.node_names)) for m in self.meshes}
        hooks = {m.settings.remediation.webhook for m in self.meshes} - {None}
        self.notifier = Notifier(next(iter(hooks), None), on_error=self.say)
        self.server = serve(self.listen, self.metrics, self.page) if self.listen else None
        self.unlock_refused: set[str] = set()  # nodes whose unlock failed: not tried again until seen up

    def page(self) -> str:
        return render_status_page({**self.snapshot, "audit": list(self.audit.recent)})

    def policy_lines(self) -> list[str]:
        lines = [f"state {self.state_path}, audit log {self.audit.path}"]
        for m in self.meshes:
            lines += [f"mesh {m.name}: {line}" for line in describe_policy(m.settings.remediation, self.interval_s)]
        return lines

    def close(self) -> None:
        for p in self.probers.values():
            p.close()
        self.notifier.close()
        if self.server is not None:
            self.server.shutdown()

    # ------------------------------------------------------------------------------------------ a tick

    def probe(self, mesh: Mesh, now: datetime, *, preflight: bool = False) -> tuple[HealthReport, Gathered]:
        """One probe; with `preflight`, it also reads what a reboot must read first (this probe may decide one)."""
        checks = mesh.settings.remediation.checks
        specs = DOCTOR_SPECS + (exo_specs(mesh.settings.exo.port) if any(c.startswith("exo") for c in checks) else ())
        if preflight:
            specs += tuple(s for s in act_reboot.PREFLIGHT_SPECS if s not in specs)
        probes = mesh.settings.probes
        gathered = self.probers[mesh.name].probe(specs, probes.gather_deadline_s, probes.command_timeout_s)
        facts = {n: node_facts(gathered, n) for n in mesh.node_names}
        self._links(mesh, facts)
        return judge_health(self.fleet, [mesh], facts, now, only=checks), gathered

    def _links(self, mesh: Mesh, facts: dict) -> None:
        for n, f in facts.items():
            self.metrics.reachable.labels(mesh.name, n).set(1 if f.reachable else 0)
            for d in (f.ibv_devinfo.devices if f.ibv_devinfo else []):
                self.metrics.link.labels(mesh.name, n, d.name).set(1 if d.state == "PORT_ACTIVE" else 0)

    def tick(self) -> list[Step]:
        states = load_states(self.state_path)  # re-read: `watch --reset` may have closed the breaker
        steps = []
        for mesh in self.meshes:
            t0 = time.monotonic()
            policy = mesh.settings.remediation
            was = states.get(mesh.name, State())
            report, gathered = self.probe(mesh, datetime.now(UTC), preflight=reboot_may_follow(policy, was))
            self.unlock_waiting(mesh, gathered)
            problems = _problems(report)
            now = datetime.now(UTC)
            s = step(policy, was, Observation(problems=problems, paused=self.paused(mesh)), now)
            result, seen = self.act(mesh, s, gathered)
            states[mesh.name] = s.state
            save_states(self.state_path, states)
            self.record(mesh, report, s, result, problems, now, time.monotonic() - t0)
            if seen is not None:
                # the reboot verified the mesh over the same sessions a probe would use: that is this
                # probe, judged as one (no second look at a mesh just read clean)
                problems, now = _problems(seen), datetime.now(UTC)
                s = step(policy, s.state, Observation(problems=problems, paused=self.paused(mesh)), now)
                states[mesh.name] = s.state
                save_states(self.state_path, states)
                self.record(mesh, seen, s, "read by the reboot's verification", problems, now, 0.0)
            steps.append(s)
        return steps

    def unlock_waiting(self, mesh: Mesh, gathered: Gathered) -> None:
        """A node found waiting at its FileVault unlock screen (a power cut or a power cycle: no authrestart was
        possible) is unlocked over SSH with the mesh's FileVault credential when one is stored, strictly against
        its recorded unlock-screen key (apple_ssh_and_filevault(7)); audited and paged. The next probe sees it
        back. Without a credential it stays there, and the `reachable` check says where it waits."""
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

    def paused(self, mesh: Mesh) -> bool:
        pause = self.fleet.path(mesh.settings.remediation.pause_file)
        return bool(pause and pause.exists())

    def act(self, mesh: Mesh, s: Step, gathered: Gathered | None = None) -> tuple[str, HealthReport | None]:
        """Carry out the step's action: (what happened, the verification a reboot ended on when it covers
        every check of the policy, else None). A reboot takes its preflight reads from the probe that decided
        it when that probe made them (`reboot_may_follow`), else reads them itself."""
        nodes = list(mesh.node_names)
        sessions = self.probers[mesh.name]
        try:
            if s.action == "restart-exo":
                act_reboot.stop_exo_on(sessions, nodes)
                act_reboot.start_exo_on(sessions, nodes)
                return "exo restarted on every node", None
            if s.action == "reboot":
                self.metrics.reboots.labels(mesh.name).inc()
                r = reboot_mesh(self.fleet, mesh, nodes, f"watch: {s.reason}", respect_windows=True, say=self.say,
                                sessions=sessions, before=_preflight_read(gathered, nodes))
                sessions.retry_now()
                last = r.phases[-1].detail if r.phases else (r.refusal or "")
                return f"reboot {r.result}: {last}" + "".join(
                    f"; {p.name} {p.took_s:g} s" for p in r.phases), _covering(r, mesh.settings.remediation.checks)
        except MacfleetError as exc:
            return f"failed: {exc.message}", None
        return ("paged" if s.action == "page" else "nothing done"), None

    def record(self, mesh: Mesh, report: HealthReport, s: Step, result: str, problems: dict, now: datetime,
               took_s: float) -> None:
        lines = problems.get(s.check, []) if s.check else [x for v in problems.values() for x in v]
        nodes = sorted({line.split(":", 1)[0] for line in lines})
        entry = {"time": now.isoformat(), "mesh": mesh.name, "node": ",".join(nodes) or None,
                 "finding": s.check or (", ".join(problems) or None), "decision": s.reason, "action": s.action,
                 "result": result}
        self.audit.append(entry)
        self.say(f"{mesh.name}: {s.action}: {s.reason} → {result}")
        if s.page or s.action in ("restart-exo", "reboot"):
            self.notifier.notify({**entry, "page": s.page, "breaker_open": s.state.breaker_open_since is not None})
        m = self.metrics
        for c in report.checks:
            m.check.labels(mesh.name, c.node, c.check).set(RESULT_VALUE[c.result])
        if s.action != "none":
            m.actions.labels(mesh.name, s.action).inc()
        m.breaker.labels(mesh.name).set(1 if s.state.breaker_open_since else 0)
        m.paused.labels(mesh.name).set(1 if "paused" in s.reason else 0)
        for check in mesh.settings.remediation.checks:
            m.streak.labels(mesh.name, check).set(s.state.streak.get(check, 0))
        m.last_probe.labels(mesh.name).set(time.time())
        m.probe_seconds.labels(mesh.name).set(round(took_s, 3))
        by_node: dict[str, list[str]] = {n: [] for n in mesh.node_names}
        for f in report.findings:
            by_node.setdefault(f.node, []).append(f"{f.check}: {f.message}")
        self.snapshot["updated"] = now.isoformat()
        self.snapshot["meshes"][mesh.name] = {"nodes": by_node, "breaker": s.state.breaker_open_since,
                                              "paused": "paused" in s.reason, "decision": s.reason}

    # ------------------------------------------------------------------------------------------- the loop

    def resume_interrupted(self) -> None:
        """A mesh reboot (watch's own or an operator's) that died once its reboots were issued is finished
        before the first probe: wait for every node, verify the mesh, start exo where it ran (the lock it left
        says where). Audited and paged like any action."""
        lock = ClusterLock(lock_path(self.fleet.root))
        for mesh in self.meshes:
            if interrupted_reboot(lock, mesh, datetime.now(UTC)) is None:
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
            acted = any(s.action in ("restart-exo", "reboot") for s in self.tick())
            # after an action, look again at once: the audit log should say as soon as possible whether it helped
            delay = 0.0 if acted else self.interval_s * self.rng.uniform(0.9, 1.1)


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


def _problems(report: HealthReport) -> dict[str, list[str]]:
    problems: dict[str, list[str]] = {}
    for f in report.findings:
        problems.setdefault(f.check, []).append(f"{f.node}: {f.message}")
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
    states = load_states(state_path)
    for m in meshes:
        was = states.pop(m.name, None)
        AuditLog(audit_path).append({"time": datetime.now(UTC).isoformat(), "mesh": m.name, "node": None,
                                     "finding": None, "decision": "reset by the operator (`macfleet watch --reset`)"
                                     + (f"; the breaker was open since {was.breaker_open_since}"
                                        if was and was.breaker_open_since else ""),
                                     "action": "reset", "result": "breaker closed, state cleared"})
        say(f"mesh {m.name}: breaker closed, state cleared")
    save_states(state_path, states)
