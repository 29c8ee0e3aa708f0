"""What a rerun of `macfleet reboot` makes of a lock left behind, and when watch may take a reboot's own
verification as its next probe: plain data, a lock file in a temporary directory, no node."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from dataclasses import asdict
from datetime import UTC, datetime

import pytest

from macfleet.act.lock import ClusterLock, LockRecord
from macfleet.flow.reboot import RebootResult, interrupted_reboot
from macfleet.judge.health import CheckResult, HealthFinding, HealthReport, HealthSummary
from macfleet.watch.loop import _covering

from ..judge.builders import mesh


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _lock(tmp_path, *, pid: int, owner: str = "reboot", phase: str = "waiting for nodes", mesh_name: str = "mesh1"):
    path = tmp_path / "c.lock.json"
    rec = LockRecord(owner=owner, pid=pid, host=socket.gethostname(), created=datetime.now(UTC).isoformat(),
                     ttl_s=3600, reason="r", phase={"phase": phase, "mesh": mesh_name, "exo_running": ["a"],
                                                    "boottime": {"a": "{ sec = 1, usec = 0 }"}})
    path.write_text(json.dumps(asdict(rec)))
    return ClusterLock(path)


@pytest.mark.parametrize("phase", ["waiting for nodes", "verifying", "starting exo", "verifying exo"])
def test_a_dead_reboot_past_issuing_its_reboots_is_resumed(tmp_path, phase) -> None:
    got = interrupted_reboot(_lock(tmp_path, pid=_dead_pid(), phase=phase), mesh("a", "b"), datetime.now(UTC))
    assert got is not None and got.phase["phase"] == phase and got.phase["exo_running"] == ["a"]


@pytest.mark.parametrize(("kw", "why"), [
    ({"phase": "stopping exo"}, "no reboot was issued yet: a full reboot is still to do"),
    ({"phase": "rebooting"}, "perhaps not every node got its reboot"),
    ({"owner": "rollout exo"}, "not a reboot"),
    ({"mesh_name": "mesh2"}, "another mesh"),
])
def test_anything_else_is_not_resumed(tmp_path, kw, why) -> None:
    assert interrupted_reboot(_lock(tmp_path, pid=_dead_pid(), **kw), mesh("a", "b"), datetime.now(UTC)) is None, why


def test_a_live_reboot_is_not_resumed(tmp_path) -> None:
    import os

    assert interrupted_reboot(_lock(tmp_path, pid=os.getpid()), mesh("a", "b"), datetime.now(UTC)) is None


def _report(checks: dict[str, str], findings: list[tuple[str, str]] = ()) -> HealthReport:
    return HealthReport(
        findings=[HealthFinding(node=n, check=c, severity="error", message="m", fix="f") for n, c in findings],
        checks=[CheckResult(check=c, node="a", result=r) for c, r in checks.items()],
        summary=HealthSummary(nodes=1, checks=len(checks), ok=len(checks), findings=0, unknown=0, errors=0,
                              warnings=0, unreachable=[], healthy=True, checked_at="t"))


def test_watch_takes_a_verification_as_its_probe_only_when_it_covers_every_check() -> None:
    network = _report({"reachable": "ok", "cabling": "ok", "rdma": "ok"})
    exo = _report({"reachable": "ok", "exo-running": "ok"})
    ok = RebootResult(mesh="mesh1", result="ok", reason="r", verification=[network, exo])
    seen = _covering(ok, ["reachable", "rdma", "exo-running"])
    assert seen is not None and {c.check for c in seen.checks} == {"reachable", "rdma", "exo-running"}
    assert _covering(ok, ["reachable", "rdma", "exo-runners"]) is None  # not read by the reboot: probe again
    failed = RebootResult(mesh="mesh1", result="failed", reason="r", verification=[network])
    assert _covering(failed, ["reachable", "rdma"]) is None
    assert "verification" not in ok.payload()  # the reports stay out of --json


def test_the_probe_reads_the_preflight_only_when_it_may_decide_a_reboot() -> None:
    from macfleet.inventory.model import RemediationSettings
    from macfleet.judge.remediation import State
    from macfleet.watch.loop import reboot_may_follow

    policy = RemediationSettings(checks=["reachable", "rdma", "exo-running"], debounce=3,
                                 ladder={"rdma": ["restart-exo", "reboot"], "exo-running": ["restart-exo"]})
    assert not reboot_may_follow(policy, State())
    assert not reboot_may_follow(policy, State(streak={"rdma": 2}))  # its next rung restarts exo
    assert reboot_may_follow(policy, State(streak={"rdma": 2}, rung={"rdma": 1}))
    assert not reboot_may_follow(policy, State(streak={"rdma": 1}, rung={"rdma": 1}))  # two probes short
    assert not reboot_may_follow(policy, State(streak={"exo-running": 5}))
    assert not reboot_may_follow(policy, State(streak={"rdma": 2}, rung={"rdma": 1}, breaker_open_since="t"))


def test_a_reboot_uses_the_probe_s_preflight_reads_only_when_every_node_gave_them() -> None:
    from macfleet.act.reboot import BOOTTIME, EXO_JOB
    from macfleet.collect.gather import Gathered
    from macfleet.collect.ssh import Raw
    from macfleet.watch.loop import _preflight_read

    def raw(out: str, rc: int = 0) -> Raw:
        return Raw(stdout=out, stderr="", rc=rc, took_s=0.1)

    fde = raw("FileVault is Off.\n")
    full = {"fdesetup": fde, BOOTTIME.key: raw("{ sec = 5, usec = 0 }\n"), EXO_JOB.key: raw("", 113)}
    got = Gathered(outputs={"a": dict(full), "b": {**full, EXO_JOB.key: raw("\tstate = running\n")}})
    before = _preflight_read(got, ["a", "b"])
    assert before is not None and before.exo_running == {"a": False, "b": True}
    assert before.boottime == {"a": "{ sec = 5, usec = 0 }", "b": "{ sec = 5, usec = 0 }"}
    del got.outputs["b"][BOOTTIME.key]  # timed out on b: the reboot reads everything again itself
    assert _preflight_read(got, ["a", "b"]) is None and _preflight_read(None, ["a"]) is None


def test_watch_finishes_an_interrupted_reboot_before_its_first_probe(example_inventory, tmp_path, monkeypatch):
    from macfleet.act.lock import lock_path
    from macfleet.inventory.load import load_inventory
    from macfleet.watch import loop

    monkeypatch.setenv("MACFLEET_STATE_DIR", str(tmp_path / "state"))
    fleet = load_inventory(example_inventory)
    calls = []

    def recorder(fleet, mesh, nodes, reason, **kw):
        calls.append((mesh.name, reason))
        return RebootResult(mesh=mesh.name, result="ok", reason=reason, resumed="resuming the reboot of …")

    monkeypatch.setattr(loop, "reboot_mesh", recorder)
    watcher = loop.Watcher(fleet=fleet, meshes=list(fleet.meshes), interval_s=1, say=lambda line: None)
    try:
        watcher.resume_interrupted()
        assert calls == []  # no lock: nothing to finish, and above all no reboot
        mesh = fleet.meshes[0]
        path = lock_path(fleet.root)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_lock(tmp_path, pid=_dead_pid(), mesh_name=mesh.name).path.read_text())
        watcher.resume_interrupted()
        assert calls == [(mesh.name, "watch: finishing an interrupted reboot")]
        entry = json.loads(watcher.audit.path.read_text().splitlines()[-1])
        assert entry["action"] == "resume" and entry["result"].startswith("reboot ok")
    finally:
        watcher.close()
