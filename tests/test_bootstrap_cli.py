"""`macfleet bootstrap` wiring: exit codes, exact JSON, the PlaybookRun requested and where the become password
goes, with the one SSH pass replaced by outputs of the real shape and the playbook run by a recorder (the only
place tests may replace it). The playbook itself runs against the lab in tests/lab/test_bootstrap_lab.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import macfleet.flow.bootstrap as flow_bootstrap
from macfleet.act.ansible import HostStats, PlaybookResult, ProgressEvent
from macfleet.collect.gather import Gathered
from macfleet.collect.ssh import Raw
from macfleet.flow.topology import PreparedApply

NODES = ["studio-1", "studio-2", "studio-3", "studio-4"]
PASSWORD = "correct horse battery staple"


def _raw(stdout: str, rc: int = 0, stderr: str = "") -> Raw:
    return Raw(stdout=stdout, stderr=stderr, rc=rc, took_s=0.01)


class Rig:
    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.sudo_rc = dict.fromkeys(NODES, 0)
        self.rdma = dict.fromkeys(NODES, "enabled")
        self.unreachable: dict[str, str] = {}
        self.runs: list[dict] = []
        self.prepared: list[bool] = []
        self.inventories: list[Path] = []
        self.generated: list[list[str]] = []
        self.events: dict[str, list[ProgressEvent]] = {}
        self.homes: dict[str, str] = {}
        monkeypatch.setattr(flow_bootstrap, "gather", self.gather)
        monkeypatch.setattr(flow_bootstrap, "prepare_apply", self.prepare_apply)
        monkeypatch.setattr(flow_bootstrap, "run_playbook", self.run_playbook)

    def gather(self, fleet, nodes, specs, **kw) -> Gathered:
        g = Gathered()
        for n in nodes:
            if n.name in self.unreachable:
                g.unreachable[n.name] = self.unreachable[n.name]
                continue
            rc = self.sudo_rc[n.name]
            g.outputs[n.name] = {
                "sudo-become": _raw(f"{flow_bootstrap.BECOME_MARK}\n" if rc == 0
                                    else "", rc, "" if rc == 0 else "sudo: a password is required\n"),
                "rdma-ctl": _raw(self.rdma[n.name] + "\n"),
                "fdesetup": _raw("FileVault is Off.\n"),
                "admin-home": _raw(self.homes.get(n.name, f"/Users/{n.name}") + "\n"),
            }
        return g

    def prepare_apply(self, fleet, meshes, gathered=None) -> PreparedApply:
        assert gathered is not None, "the IP plan is judged on bootstrap's own pass, not a second one"
        self.prepared.append(True)
        nodes = [n for m in meshes for n in m.node_names]
        return PreparedApply(nodes=nodes, hostvars={n: {"ipplan_interfaces": []} for n in nodes},
                             diffs={n: ["set en3 to 10.213.0.1/30"] for n in nodes}, uncabled={})

    def run_playbook(self, run, *, on_event=None, cancel=None, raise_on_failure=True, become_password=None):
        self.runs.append({"playbook": run.playbook, "limit": run.limit, "check": run.check,
                          "extravars": run.extravars, "become_password": become_password})
        self.inventories.append(run.inventory)
        self.generated.append(sorted(p.parent.name for p in run.inventory.rglob("macfleet_generated.yml")))
        hosts = {}
        for n in run.limit:
            for e in self.events.get(n, [ProgressEvent(n, "Install macfleet's sudoers drop-in.", "changed", True,
                                                       role="sudoers")]):
                on_event(e)
            hosts[n] = HostStats(ok=5, changed=sum(e.changed for e in self.events.get(n, [])) if n in self.events
                                 else 1, failed=int(any(e.status == "failed" for e in self.events.get(n, []))))
        return PlaybookResult(playbook=run.playbook, status="successful", rc=0, hosts=hosts, failed_tasks=[],
                              changes={}, unreachable={}, artifact_dir=None)


@pytest.fixture
def rig(monkeypatch: pytest.MonkeyPatch) -> Rig:
    return Rig(monkeypatch)


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    p = tmp_path / "admin-password"
    p.write_text(PASSWORD + "\n")
    os.chmod(p, 0o600)
    return p


def test_ready_mesh_exits_0_with_exact_json(cli, example_inventory: Path, rig: Rig) -> None:
    r = cli("bootstrap", "-i", str(example_inventory), "--json")
    assert r.exit_code == 0, r.output
    assert cli.json(r) == {"changed": 4, "nodes": {n: {"changed": 1, "failed": False, "needs_human": []}
                                                   for n in NODES}}
    assert rig.runs == [{"playbook": "bootstrap", "limit": tuple(NODES), "check": False,
                         "extravars": {"bootstrap_ipplan": True, "bootstrap_homes": {n: f"/Users/{n}" for n in NODES}},
                         "become_password": None}]
    assert rig.prepared == [True] and rig.generated == [NODES]
    record = (example_inventory / "host_vars" / "studio-1" / "macfleet_generated.yml").read_text()
    assert "macfleet_filevault:" in record and "unattended_reboot: true" in record


def test_password_from_a_private_file_reaches_only_the_runner(cli, example_inventory: Path, rig: Rig,
                                                              secret: Path) -> None:
    rig.sudo_rc["studio-2"] = 1
    r = cli("bootstrap", "-i", str(example_inventory), "--non-interactive", "--become-password-file", str(secret))
    assert r.exit_code == 0, r.output
    assert rig.runs[0]["become_password"] == PASSWORD
    assert PASSWORD not in r.output
    assert PASSWORD not in str(rig.runs[0]["extravars"])


def test_no_password_to_ask_leaves_that_node_out_and_says_why(cli, example_inventory: Path, rig: Rig) -> None:
    rig.sudo_rc["studio-3"] = 1
    r = cli("bootstrap", "-i", str(example_inventory), "--non-interactive", "--json")
    assert r.exit_code == 1
    data = cli.json(r)
    assert data["nodes"]["studio-3"]["failed"] is True
    assert "--become-password-file" in data["nodes"]["studio-3"]["needs_human"][0]
    assert rig.runs[0]["limit"] == ("studio-1", "studio-2", "studio-4")
    assert rig.runs[0]["become_password"] is None


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_password_file_others_can_read_is_refused_before_anything_runs(cli, example_inventory: Path, rig: Rig,
                                                                       secret: Path, mode: int) -> None:
    os.chmod(secret, mode)
    r = cli("bootstrap", "-i", str(example_inventory), "--become-password-file", str(secret))
    assert r.exit_code == 2
    assert "refused the password file" in r.stderr and "chmod 600" in r.stderr
    assert rig.runs == [] and rig.prepared == []


def test_unreachable_node_exits_3_and_the_others_still_run(cli, example_inventory: Path, rig: Rig) -> None:
    rig.unreachable["studio-4"] = "cannot connect to 198.18.1.13:22: timed out"
    r = cli("bootstrap", "-i", str(example_inventory), "--json")
    assert r.exit_code == 3
    data = cli.json(r)
    assert data["nodes"]["studio-4"] == {"changed": 0, "failed": True,
                                         "needs_human": ["unreachable: cannot connect to 198.18.1.13:22: timed out"]}
    assert rig.runs[0]["limit"] == ("studio-1", "studio-2", "studio-3")
    assert rig.runs[0]["extravars"]["bootstrap_ipplan"] is False  # the plan waits for every node
    assert rig.prepared == []


def test_check_changes_nothing_on_the_controller_either(cli, example_inventory: Path, rig: Rig) -> None:
    r = cli("bootstrap", "-i", str(example_inventory), "--check", "--json")
    assert r.exit_code == 0, r.output
    assert rig.runs[0]["check"] is True and rig.runs[0]["extravars"]["bootstrap_ipplan"] is True
    # the playbook read the plan from a private copy of the inventory, now gone; the inventory is untouched
    assert rig.inventories[0] != example_inventory and not rig.inventories[0].exists()
    assert rig.generated == [NODES]
    assert not (example_inventory / "host_vars").exists()


def test_rdma_off_is_handed_to_rdma_enable(cli, example_inventory: Path, rig: Rig) -> None:
    rig.rdma["studio-2"] = "disabled"
    r = cli("bootstrap", "-i", str(example_inventory), "--json")
    assert r.exit_code == 1
    needs = cli.json(r)["nodes"]["studio-2"]["needs_human"]
    assert len(needs) == 1 and "`macfleet rdma enable studio-2`" in needs[0] and "rdma_ctl enable" in needs[0]


def test_playbook_failures_and_human_steps_are_reported(cli, example_inventory: Path, rig: Rig) -> None:
    rig.events["studio-1"] = [
        ProgressEvent("studio-1", "Ensure macOS is recent enough for RDMA over Thunderbolt.", "failed", False,
                      "macOS 26.1 is older than 26.2. Fix: update macOS", role="preflight")]
    rig.events["studio-2"] = [
        ProgressEvent("studio-2", "Say how to get Homebrew's rsync on a Mac without Homebrew.", "ok", False,
                      "needs a human: Homebrew is not installed. Fix: install Homebrew", role="rsync"),
        ProgressEvent("studio-2", "Say that exo itself is still to be installed.", "ok", False,
                      "note: exo is not installed yet", role="exo")]
    r = cli("bootstrap", "-i", str(example_inventory), "--json")
    assert r.exit_code == 1
    nodes = cli.json(r)["nodes"]
    assert nodes["studio-1"]["failed"] is True
    assert nodes["studio-1"]["needs_human"] == [
        "macOS 26.1 is older than 26.2. Fix: update macOS (step: Ensure macOS is recent enough for RDMA over "
        "Thunderbolt)"]
    assert nodes["studio-2"] == {"changed": 0, "failed": False,
                                 "needs_human": ["Homebrew is not installed. Fix: install Homebrew"]}


def test_human_output_has_the_step_table_and_a_verdict(cli, example_inventory: Path, rig: Rig) -> None:
    r = cli("bootstrap", "-i", str(example_inventory))
    assert r.exit_code == 0, r.output
    assert "sudo" in r.stderr and "+1" in r.stderr  # the live table, on stderr
    assert "every node ready" in r.stdout


def test_a_settled_mac_shows_every_step_done(example_inventory: Path, rig: Rig) -> None:
    """The playbook leaves a Mac with nothing to change after its first play's one read (no events from the
    plays after): its word "settled" marks those steps done, and the IP plan's column skipped when no plan was
    applied."""
    from macfleet.inventory.load import load_inventory

    for n in NODES:
        rig.events[n] = [ProgressEvent(n, "Report that this Mac has nothing to change.", "ok", False,
                                       "settled: every role found this Mac as it should be.", role=None)]
    steps: dict[tuple[str, str], str] = {}
    fleet = load_inventory(example_inventory)
    report = flow_bootstrap.bootstrap(fleet, fleet.meshes, check=False, become_password=lambda nodes: None,
                                      on_step=lambda node, step, status: steps.__setitem__((node, step), status))
    assert report.changed == 0 and report.exit_code == 0
    for n in NODES:
        assert [steps.get((n, step)) for step in flow_bootstrap.STEPS] == ["ok"] * 11


def test_the_playbook_is_given_each_admin_home_that_is_a_plain_path(example_inventory: Path, rig: Rig) -> None:
    """The first play finds settled Macs in one read, and their paths are made of the admin's home: macfleet's
    own pass reads it, and hands on only what is a plain absolute path (a Mac without one goes the long way)."""
    from macfleet.inventory.load import load_inventory

    rig.homes = {NODES[0]: "/Users/ops admin", NODES[1]: "relative/home", NODES[2]: "/Users/x\x1b[31m"}
    fleet = load_inventory(example_inventory)
    flow_bootstrap.bootstrap(fleet, fleet.meshes, check=False, become_password=lambda nodes: None)
    homes = rig.runs[-1]["extravars"]["bootstrap_homes"]
    assert homes[NODES[0]] == "/Users/ops admin"
    assert NODES[1] not in homes and NODES[2] not in homes
    assert all(homes[n] == f"/Users/{n}" for n in NODES[3:])


def test_unknown_mesh_exits_2(cli, example_inventory: Path, rig: Rig) -> None:
    r = cli("bootstrap", "-i", str(example_inventory), "--mesh", "nope")
    assert r.exit_code == 2 and "no mesh 'nope'" in r.stderr
    assert rig.runs == []
