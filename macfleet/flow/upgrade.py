"""`macfleet upgrade`: the mesh to the inventory's macOS build (macfleet_macos.build), one node at a time (or
together), exo kept stopped until every node runs it.

read (sw_vers, `softwareupdate --list`, FileVault, boot time, exo's job) -> plan (judge/upgrade.py: refused when the
target is not offered to a node) -> lock -> stop exo on the mesh -> per node: `softwareupdate --install LABEL
--restart --user ADMIN --stdinpass` under `sudo -S` (the admin's password twice on stdin: once for sudo, once for
softwareupdate's owner authentication, which Apple silicon requires: softwareupdate(8) on macOS 11 and later,
"--user: Local username to authenticate as an owner. Apple Silicon only", "--stdinpass: Password to authenticate
as an owner. Apple Silicon only"), wait for it to come back (the reboot's wait; a node at its FileVault unlock
screen is unlocked over SSH as the reboot does), verify its build and that RDMA is still enabled -> verify the
mesh (RDMA ports, IP plan, cabling, wired-memory limit) -> start exo where it ran, once every node runs the target.

The cluster lock is held throughout (there is no maintenance mode yet: the lock is what keeps `reboot`, `rollout`
and the healer's actions off the mesh meanwhile). From the moment exo is stopped the lock's phase is critical and
records which nodes are done and where exo ran: an upgrade that dies or fails is resumed by the next
`macfleet upgrade` (the nodes on the target are not installed again; exo is started where it ran before). The
password never goes into argv, a log, the lock or an error message.
"""

from __future__ import annotations

import shlex
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from macfleet.act import reboot as act
from macfleet.act import unlock as act_unlock
from macfleet.act.lock import ClusterLock, LockRecord, lock_path, stale_reason
from macfleet.act.release import LABEL as EXO_LABEL
from macfleet.collect.commands import CommandSpec, spec_for
from macfleet.collect.gather import Gathered
from macfleet.collect.kept import NodeSessions
from macfleet.collect.ssh import SshTarget
from macfleet.errors import FactsParseError, MacfleetError
from macfleet.facts.probes import parse_softwareupdate_list
from macfleet.facts.rdma import RdmaCtlFacts
from macfleet.facts.registry import parse
from macfleet.facts.system import SwVersFacts
from macfleet.flow.bootstrap import read_secret_file
from macfleet.flow.reboot import VERIFY_DEADLINE_S, VERIFY_EXO, VERIFY_NETWORK, Verifier, unlocker
from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge.upgrade import NodeStanding, UpgradePlan, plan_upgrade, standing

OWNER = "upgrade"
# `softwareupdate --list` asks Apple's catalogue (slow, see flow/doctor.py); the install downloads and prepares
# the update before it restarts (minutes to an hour on a real Mac: no Apple figure, so a generous bound).
LIST_SPEC = CommandSpec("softwareupdate", ("softwareupdate", "--list"), timeout_s=180)
INSTALL_TIMEOUT_S = 3 * 3600.0
# A restart into a new build installs its second half first: longer than a plain reboot (no Apple figure).
RESTART_TIMEOUT_S = 3600.0
VERIFY_AFTER = [*VERIFY_NETWORK, "wired-limit", "macos-build"]


@dataclass
class UpgradeResult:
    mesh: str
    target: str
    result: str  # "ok", "nothing to do", "check", "refused", "failed"
    together: bool = False
    nodes: list[dict] = field(default_factory=list)  # where each node stood before: {node, build, standing, ...}
    steps: list[str] = field(default_factory=list)  # what it does (or would do), in order
    done: list[str] = field(default_factory=list)  # nodes on the target by this run or the interrupted one
    refusals: list[str] = field(default_factory=list)
    failure: str | None = None
    lock: str | None = None
    resumed: str | None = None
    exo_started: list[str] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)

    def payload(self) -> dict:
        return asdict(self)


def _install_line(label: str, user: str) -> str:
    """The install command: sudo reads the first line of stdin, softwareupdate (--stdinpass) the second. exo's
    LaunchDaemon is disabled first (launchctl(1) disable: not loaded at the restart), so exo does not start on a
    node that runs the new build while another runs the old one; `_enable_exo` undoes it at the end. The label
    and the user come from the Mac and the inventory: quoted, never a bare shell word."""
    inner = (f"launchctl disable system/{EXO_LABEL} && exec softwareupdate --install {shlex.quote(label)} --restart "
             f"--user {shlex.quote(user)} --stdinpass")
    return f"sudo -S -p '' /bin/sh -c {shlex.quote(inner)}"


ENABLE_EXO_LINE = f"sudo -S -p '' launchctl enable system/{EXO_LABEL}"


def _parsed(got: Gathered, node: str, kind: str, key: str | None = None) -> object | str:
    """A fact, or why it could not be read."""
    if node in got.unreachable:
        return f"unreachable: {got.unreachable[node]}"
    raw = got.outputs.get(node, {}).get(key or kind)
    if raw is None:
        return got.failed.get(node, {}).get(key or kind, "no answer")
    try:
        if kind == "softwareupdate":
            return parse_softwareupdate_list(f"{raw.stdout}\n{raw.stderr}")
        if raw.rc != 0 and not raw.stdout.strip():
            return f"exit {raw.rc}: {raw.stderr.strip()[-200:]}"
        return parse(kind, raw.stdout)
    except FactsParseError as exc:
        return exc.message


def read_standings(sessions: NodeSessions, nodes: list[str], target: str, *, with_list: bool = True
                   ) -> tuple[list[NodeStanding], act.BeforeReboot, list[str]]:
    """Each node's build and whether the target is offered there; FileVault, boot time and exo's job (the
    reboot's preflight reads); the unreachable nodes."""
    specs = (spec_for("sw-vers"), *act.PREFLIGHT_SPECS, *((LIST_SPEC,) if with_list else ()))
    got = sessions.gather(specs, deadline_s=LIST_SPEC.timeout_s + 30, nodes=nodes)
    out = []
    for n in nodes:
        sw = _parsed(got, n, "sw-vers")
        build = sw.build_version if isinstance(sw, SwVersFacts) else None
        ups = _parsed(got, n, "softwareupdate") if with_list else None
        out.append(standing(n, build, ups if not isinstance(ups, str) else None, target,
                            why=ups if isinstance(ups, str) else (sw if isinstance(sw, str) else "")))
    return out, act.before_from(got, nodes), sorted(got.unreachable)


def interrupted(lock: ClusterLock, mesh: Mesh, now: datetime) -> LockRecord | None:
    """The lock of an upgrade of `mesh` that died or failed after it stopped exo, if that is what is there."""
    record = lock.read()
    if record is None or record.owner != OWNER or record.phase.get("mesh") != mesh.name:
        return None
    return record if stale_reason(record, now, this_host=socket.gethostname()) is not None else None


def _steps(plan: UpgradePlan) -> list[str]:
    names = [n.node for n in plan.todo]
    how = "all at once" if plan.together else "one at a time, in this order"
    steps = ["take the cluster lock (no maintenance mode exists yet: the lock keeps reboot, rollout and the "
             "healer's actions off the mesh)",
             f"stop exo on every node of {plan.mesh}"]
    if names:
        steps.append(f"install {plan.target} on {', '.join(names)} {how}: softwareupdate --install LABEL "
                     "--restart --user ADMIN --stdinpass (the password on stdin), wait for the node to come back "
                     "(FileVault: unlocked over SSH as `macfleet reboot` does), check its build and that RDMA is "
                     "still enabled")
    steps += ["verify RDMA ports, the IP plan, the cabling, the wired-memory limit and one build on every node",
              f"start exo where it ran, only once every node of {plan.mesh} runs {plan.target}",
              "release the lock"]
    return steps


def upgrade_mesh(fleet: Fleet, mesh: Mesh, password_file: Path | None, *, check: bool = False,
                 together: bool = False, say: Callable[[str], None] | None = None,
                 progress: act.Progress | None = None) -> UpgradeResult:
    """The whole upgrade; never raises for a node's sake: the result says what happened."""
    say = say or (lambda line: None)
    progress = progress or (lambda n, s, d: None)
    target = mesh.settings.macos.build or ""
    nodes = list(mesh.node_names)
    lock = ClusterLock(lock_path(fleet.root))
    prior = interrupted(lock, mesh, datetime.now(UTC))
    if prior is None:
        lock.check(OWNER)  # a live holder, or a dead one's repair pending: refuse before dialling a node
    password = read_secret_file(password_file) if password_file is not None else None
    if not check and password is None:
        from macfleet.errors import UsageError

        raise UsageError("upgrade needs the admin's password: --password-file FILE (first line; only you may read "
                         "the file)", hint="softwareupdate asks an owner's password on Apple silicon; "
                         "`macfleet upgrade --check` shows the plan without it")
    sessions = NodeSessions(fleet, nodes)
    try:
        return _upgrade(fleet, mesh, nodes, target, password, check, together, prior, lock, sessions, say, progress)
    finally:
        sessions.close()


def _upgrade(fleet, mesh, nodes, target, password, check, together, prior, lock, sessions, say, progress
             ) -> UpgradeResult:
    result = UpgradeResult(mesh=mesh.name, target=target, result="refused", together=together)
    done_before = [str(n) for n in (prior.phase.get("done") or [])] if prior else []
    ran_before = [str(n) for n in (prior.phase.get("exo_running") or [])] if prior else []
    if prior is not None:
        now = datetime.now(UTC)
        result.resumed = (f"resuming the upgrade of {prior.describe(now)}, interrupted while "
                          f"{prior.phase.get('phase')} ({stale_reason(prior, now, this_host=socket.gethostname())}): "
                          f"done before: {', '.join(done_before) or 'none'}; exo ran on "
                          f"{', '.join(ran_before) or 'no node'}")
        say(result.resumed)
    standings, before, lost = read_standings(sessions, nodes, target) if target else ([], act.BeforeReboot(), [])
    result.nodes = [asdict(s) for s in standings]
    if lost:
        result.unreachable = lost
        result.refusals = [f"{n} is unreachable: nothing was changed" for n in lost]
        return result
    plan = plan_upgrade(mesh.name, target, standings, together=together, done=done_before)
    result.refusals = plan.refusals
    result.steps = _steps(plan)
    if plan.refusals:
        return result
    if check:
        result.result = "check"
        return result
    if plan.nothing_to_do and prior is None:
        result.result = "nothing to do"
        return result
    unread = [n for n in nodes if n not in before.exo_running or n not in before.boottime]
    if unread:
        result.refusals = [f"could not read whether exo runs, or the boot time, on {', '.join(unread)}: nothing "
                           "was changed"]
        return result
    held = lock.acquire(OWNER, f"macOS {target} on {mesh.name}", ttl_s=mesh.settings.reboot.lock_ttl_s,
                        phase=dict(prior.phase) if prior else None)
    result.lock = held.explain()
    running = sorted(set(ran_before) | {n for n, r in before.exo_running.items() if r})
    done = list(dict.fromkeys([*done_before, *(s.node for s in standings if s.standing == "on-target")]))
    result.result = "failed"

    def phase(name: str, node: str | None = None) -> None:
        lock.set_phase(held, {"phase": name, "mesh": mesh.name, "target": target, "node": node, "done": done,
                              "exo_running": running}, critical=True, repair_by=[OWNER],
                       repair="`macfleet upgrade` (it resumes)")

    try:
        phase("stopping exo")
        say(f"stopping exo on {', '.join(running) or 'no node (it ran nowhere)'}")
        act.stop_exo_on(sessions, running)
        todo = plan.todo
        groups = [todo] if together else [[n] for n in todo]
        for group in groups:
            failure = _install_group(fleet, mesh, sessions, group, target, password, before, phase, say, progress)
            if failure:
                result.failure = failure
                result.done = done
                lock.leave(held, failure)
                return result
            done.extend(n.node for n in group)
            phase("installed", group[-1].node)
        phase("verifying")
        say("verifying RDMA ports, the IP plan, the cabling, the wired-memory limit and the builds")
        ok, detail, _ = Verifier(fleet, mesh, sessions, VERIFY_AFTER).verify(VERIFY_DEADLINE_S)
        if not ok:
            result.failure = f"after the upgrade: {detail}"
            result.done = done
            lock.leave(held, result.failure)
            return result
        after, _, lost = read_standings(sessions, nodes, target, with_list=False)
        off = [s.words(target) for s in after if s.standing != "on-target"]
        if off or lost:
            result.failure = "not every node runs the target, exo left stopped: " + "; ".join(off + lost)
            result.done = done
            lock.leave(held, result.failure)
            return result
        phase("starting exo")
        for n in nodes:  # every node: one a former run installed may hold exo disabled (see _install_line)
            why = act.run_with_secret(sessions, n, ENABLE_EXO_LINE, f"{password}\n", 60)
            if why is not None:
                raise MacfleetError(f"{n}: could not enable exo's LaunchDaemon again: {why}")
        act.start_exo_on(sessions, running)
        result.exo_started = running
        if running:
            ok, detail, _ = Verifier(fleet, mesh, sessions, VERIFY_EXO).verify(VERIFY_DEADLINE_S)
            if not ok:
                say(f"exo started, but its /state is not clean yet: {detail}")
        result.result, result.done = "ok", done
        lock.release(held)
        return result
    except MacfleetError as exc:
        result.failure = exc.message
        result.done = done
        lock.leave(held, exc.message)
        return result
    except BaseException as exc:
        lock.leave(held, f"{type(exc).__name__}: {str(exc)[:200]}")
        raise


def _install_group(fleet: Fleet, mesh: Mesh, sessions: NodeSessions, group: list[NodeStanding], target: str,
                   password: str | None, before: act.BeforeReboot, phase, say, progress) -> str | None:
    """Install the target on each node of `group` at once and wait for every one to come back on it with RDMA
    enabled: None, or what went wrong (naming the node and what to do)."""
    for s in group:
        phase("installing", s.node)
        user = fleet.node(s.node).user or ""
        say(f"{s.node}: installing {s.label} (it restarts into {target})")
        progress(s.node, "installing", s.label or "")
        why = act.run_with_secret(sessions, s.node, _install_line(s.label or "", user), f"{password}\n{password}\n",
                                  INSTALL_TIMEOUT_S)
        if why is not None:
            return (f"{s.node}: the install of {s.label} failed ({why}); it still runs {s.build}. Nothing else was "
                    "installed after it; exo stays stopped. See docs/runbooks/macos-upgrade.md (install by hand "
                    "over Screen Sharing), then run `macfleet upgrade` again: it resumes")
    names = [s.node for s in group]
    phase("waiting for", ",".join(names))
    unlock = unlocker(fleet, mesh)
    if unlock is None and password is not None:  # the admin is a FileVault user on a Mac set up by hand
        unlock = lambda node: act_unlock.send_password(SshTarget.for_node(fleet, fleet.node(node)), password)  # noqa: E731
    waits = act.wait_for_nodes(sessions, names, {n: before.boottime[n] for n in names},
                               max(RESTART_TIMEOUT_S, mesh.settings.reboot.timeout_s), progress, unlock=unlock)
    gone = [f"{n} (last seen: {w.last_seen})" for n, w in waits.items() if not w.back]
    if gone:
        return f"not back from the update's restart: {'; '.join(gone)}; exo stays stopped"
    got = sessions.gather((spec_for("sw-vers"), spec_for("rdma-ctl")), deadline_s=60, nodes=names)
    for n in names:
        sw = _parsed(got, n, "sw-vers")
        if not isinstance(sw, SwVersFacts):
            return f"{n}: back, but its build could not be read ({sw}); exo stays stopped"
        if sw.build_version != target:
            return (f"{n}: back on build {sw.build_version}, not {target}: the update did not install; exo stays "
                    "stopped (docs/runbooks/macos-upgrade.md)")
        rdma = _parsed(got, n, "rdma-ctl")
        if not isinstance(rdma, RdmaCtlFacts):
            return f"{n}: on {target}, but whether RDMA is enabled could not be read ({rdma}); exo stays stopped"
        if not rdma.enabled:
            return (f"{n}: on {target}, but the update switched RDMA off: `macfleet rdma enable {n}` walks you "
                    "through Recovery (rdma_ctl enable), then run `macfleet upgrade` again to finish")
        say(f"{n}: on {target}, RDMA enabled")
        progress(n, "done", f"on {target}")
    return None
