"""The healer and maintenance (issue 28 items 2, 3): a mesh in maintenance is observed, reported, not acted on
and nobody paged; a maintenance that runs out is audited and the healer acts again; a page is followed by a
"back to healthy" notice; a controller that cannot see half the mesh does not reboot it; `--once` exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from macfleet.act.maintenance import MaintenanceStore
from macfleet.collect.gather import Gathered
from macfleet.flow import maintenance
from macfleet.flow.reboot import RebootResult
from macfleet.judge import maintenance as judge
from macfleet.watch import loop
from tests.watch.test_healer_hostile import HEALTHY, RUNNER, Harness, report

WEDGED = report({"rdma": {"studio-1": "RDMA wedged"}})


@pytest.fixture
def healer(example_inventory, tmp_path, monkeypatch):
    h = Harness(example_inventory, tmp_path, monkeypatch, ladder={"rdma": ["reboot"]}, reboot_gap_s=0)
    h.notes: list[dict] = []
    h.watcher.notifier.notify = h.notes.append
    h.reboots = []
    monkeypatch.setattr(loop, "reboot_mesh", lambda *a, **k: h.reboots.append(a) or RebootResult(
        mesh=h.mesh.name, result="ok", reason="r"))
    yield h
    h.close()


def test_maintenance_is_observed_not_acted_on_then_runs_out_and_is_audited(healer) -> None:
    h = healer
    maintenance.start(h.fleet, [h.mesh], "2h", "recabling studio-3", check=False)
    for _ in range(3):
        s = h.tick(WEDGED)
        assert s.action == "none" and "observing only" in s.reason and "recabling studio-3" in s.reason
    assert h.reboots == [] and h.notes == []  # nothing done, nobody paged
    assert h.watcher.metrics.maintenance.labels(h.mesh.name)._value.get() == 1
    assert "recabling studio-3" in h.watcher.page() and "observed only" in h.watcher.page()
    assert h.audit()[-1]["finding"] == "rdma" and "observing only" in h.audit()[-1]["decision"]

    store = MaintenanceStore(h.fleet.root)  # time passes: nobody ends it, it runs out
    past = datetime.now(UTC) - timedelta(hours=3)
    store.start(judge.person(h.mesh.name, "recabling studio-3", "ana", 7200, past))
    s = h.tick(WEDGED)
    assert s.action == "reboot" and len(h.reboots) == 1
    ran_out = [e for e in h.audit() if e["action"] == "maintenance-end"]
    assert ran_out and "ran out" in ran_out[0]["decision"]
    assert h.watcher.metrics.maintenance.labels(h.mesh.name)._value.get() == 0


def test_a_commands_maintenance_holds_while_it_runs(healer) -> None:
    h = healer
    with maintenance.during(h.fleet, h.mesh, "reboot", "operator's reboot"):
        assert h.tick(WEDGED).action == "none" and h.reboots == []
    assert MaintenanceStore(h.fleet.root).live(datetime.now(UTC)) == {}  # ended with it
    assert h.tick(WEDGED).action == "reboot"


def test_a_person_s_maintenance_is_kept_by_a_command(healer) -> None:
    h = healer
    maintenance.start(h.fleet, [h.mesh], "2h", "planned", check=False)
    with maintenance.during(h.fleet, h.mesh, "upgrade", "macOS") as what:
        assert what.startswith("kept:")
    assert MaintenanceStore(h.fleet.root).live(datetime.now(UTC))[h.mesh.name].reason == "planned"


def test_every_page_is_followed_by_a_back_to_healthy_notice(healer) -> None:
    h = healer
    h.tick(RUNNER)
    assert [n["page"] for n in h.notes] == [True]
    h.tick(HEALTHY)
    h.tick(HEALTHY)
    assert [n.get("resolved", False) for n in h.notes] == [False, True]
    assert h.notes[-1]["decision"].startswith("back to healthy")


def test_a_controller_that_cannot_see_half_the_mesh_does_not_reboot_it(healer) -> None:
    h = healer
    blind = Gathered(unreachable={"studio-1": "timed out", "studio-2": "timed out"})
    h.watcher.probe = lambda m, now, preflight=False: (WEDGED, blind)
    s = h.watcher.tick()[0]  # debounce 1
    assert s.action == "page" and "only 2 of 4" in s.reason and h.reboots == []
    assert h.watcher.exit_code() == 3


def test_once_exit_codes(healer) -> None:
    h = healer
    h.watcher.probe = lambda m, now, preflight=False: (HEALTHY, Gathered())
    h.watcher.tick()
    assert h.watcher.exit_code() == 0
    h.watcher.probe = lambda m, now, preflight=False: (RUNNER, Gathered())
    h.watcher.tick()
    assert h.watcher.exit_code() == 1


def test_watch_once_with_every_node_unreachable_exits_3(example_inventory, tmp_path) -> None:
    """sysadmin-walk: `macfleet watch --once` returned 0 with every node unreachable."""
    (example_inventory / "hosts.yml").write_text(
        "macfleet:\n  children:\n    mesh1:\n      hosts:\n" + "".join(
            f"        studio-{i}:\n          ansible_host: 127.0.0.{i}\n          ansible_port: 1\n"
            f"          macfleet_model: \"Mac15,14\"\n" for i in (1, 2)))
    env = {**os.environ, "MACFLEET_STATE_DIR": str(tmp_path / "state")}
    p = subprocess.run([sys.executable, "-m", "macfleet", "watch", "--once", "-i", str(example_inventory)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 3, p.stderr
    assert "only 0 of 2 node(s) answered" in p.stderr


def test_watch_check_says_the_decision_and_writes_nothing(example_inventory, tmp_path, monkeypatch) -> None:
    """`watch --check` (issue 30: --check on every command that changes something): one probe, the decision the
    healer would take from the state it remembers; no action, and nothing written anywhere (the shared state
    directory is not even created), whatever the probe saw."""
    from macfleet.flow.checks import CheckRun
    from macfleet.inventory.load import load_inventory
    from macfleet.inventory.model import RemediationSettings

    monkeypatch.setenv("MACFLEET_STATE_DIR", str(tmp_path / "state"))
    cluster = tmp_path / "cluster"
    monkeypatch.setenv("MACFLEET_CLUSTER_STATE_DIR", str(cluster))
    fleet = load_inventory(example_inventory)
    mesh = fleet.meshes[0]
    policy = RemediationSettings(debounce=1, settle_s=0, ladder={"rdma": ["reboot"]})
    mesh = mesh.model_copy(update={"settings": mesh.settings.model_copy(update={"remediation": policy})})
    fleet = fleet.model_copy(update={"meshes": (mesh,)})
    acted: list = []
    monkeypatch.setattr(loop, "reboot_mesh", lambda *a, **k: acted.append(a))
    monkeypatch.setattr(loop.act_reboot, "stop_exo_on", lambda *a: acted.append(a))
    seen = {"studio-4": "no route to host"}
    monkeypatch.setattr(loop, "run_checks", lambda *a, **k: CheckRun(report=WEDGED,
                                                                     gathered=Gathered(unreachable=seen)))
    said: list[str] = []
    decisions, code = loop.preview(fleet, [mesh], said.append)
    assert [d["action"] for d in decisions] == ["reboot"] and said == [f"{mesh.name}: would reboot: "
                                                                       f"{decisions[0]['reason']}"]
    assert code == 3  # as --once: a node could not be reached
    assert acted == [] and not cluster.exists() and not (tmp_path / "state").exists()

    del seen["studio-4"]
    maintenance.start(fleet, [mesh], "2h", "recabling", check=False)  # a person's maintenance: observing only
    before = sorted((p, p.stat().st_mtime_ns) for p in cluster.rglob("*"))
    decisions, code = loop.preview(fleet, [mesh], said.append)
    assert decisions[0]["action"] == "none" and "observing only" in decisions[0]["reason"] and code == 1
    assert sorted((p, p.stat().st_mtime_ns) for p in cluster.rglob("*")) == before and acted == []
