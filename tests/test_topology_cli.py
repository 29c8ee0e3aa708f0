"""`macfleet topology check|plan|show|ipplan|apply` wiring: exit codes and exact JSON, with the collection
replaced by captures built in the real shape, and the playbook run replaced by a recorder."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import macfleet.flow.topology as flow_topology
from macfleet.act.ansible import HostStats, PlaybookResult
from macfleet.collect.gather import Gathered
from macfleet.collect.ssh import Raw
from tests.conftest import capture
from tests.judge.builders import Rig, healthy

NAMES = ["studio-1", "studio-2", "studio-3", "studio-4"]


def _raw(text: str) -> Raw:
    return Raw(stdout=text, stderr="", rc=0, took_s=0.01)


ORDER = """An asterisk (*) denotes that a network service is disabled.
(1) Ethernet
(Hardware Port: Ethernet, Device: en0)

(2) Thunderbolt Bridge
(Hardware Port: Thunderbolt Bridge, Device: bridge0)
"""


ROUTES = capture("donbulinux-2021_netstat_rn_macos11_3_1.txt")


def fake_gather(rig: Rig, unreachable: dict[str, str] | None = None, lan: str = "192.168.7.10",
                failed: dict[str, str] | None = None):
    """Each node answers like a real Mac; `failed` (KIND -> reason) makes those commands fail everywhere."""

    def gather(fleet, nodes, specs, **kw):
        g = Gathered()
        for n in nodes:
            if unreachable and n.name in unreachable:
                g.unreachable[n.name] = unreachable[n.name]
                continue
            g.outputs[n.name] = {
                "thunderbolt": _raw(rig.thunderbolt_json(n.name)),
                "hardware-ports": _raw(rig.hardware_ports_text()),
                "ifconfig": _raw(f"en0: flags=8863<UP> mtu 1500\n\tinet {lan} netmask 0xffffff00\n"),
                "service-order": _raw(ORDER),
                "ibv-devices": Raw(stdout="", stderr="ibv_devices: command not found", rc=127, took_s=0.0),
                "netstat-routes": _raw(ROUTES),
            }
            for kind, why in (failed or {}).items():
                g.outputs[n.name].pop(kind, None)
                g.failed.setdefault(n.name, {})[kind] = why
        return g

    return gather


def test_check_clean_mesh_exits_0_with_exact_json(cli, example_inventory: Path, monkeypatch) -> None:
    monkeypatch.setattr(flow_topology, "gather", fake_gather(healthy(NAMES)))
    r = cli("topology", "check", "-i", str(example_inventory), "--json")
    assert r.exit_code == 0, r.output
    data = cli.json(r)
    assert data["nodes"] == NAMES and data["findings"] == []
    assert data["links"][0] == {"a": {"node": "studio-1", "receptacle": 2, "device": "en3"},
                                "b": {"node": "studio-2", "receptacle": 2, "device": "en3"}, "speed_gbps": 80.0}
    assert len(data["links"]) == 6


def test_check_unplugged_exits_1_and_unreachable_exits_3(cli, example_inventory: Path, monkeypatch) -> None:
    rig = healthy(NAMES)
    del rig.items[("studio-1", 4)], rig.items[("studio-4", 2)]
    monkeypatch.setattr(flow_topology, "gather", fake_gather(rig))
    r = cli("topology", "check", "-i", str(example_inventory), "--json")
    assert r.exit_code == 1
    assert cli.json(r)["findings"] == [{
        "severity": "error", "code": "missing-pair", "nodes": ["studio-1", "studio-4"],
        "message": "studio-1 and studio-4 have no cable between them",
        "fix": "plug a Thunderbolt 5 cable from studio-1 port 4 into studio-4 port 2",
    }]
    monkeypatch.setattr(flow_topology, "gather", fake_gather(healthy(NAMES), {"studio-3": "connection refused"}))
    r = cli("topology", "check", "-i", str(example_inventory), "--json")
    assert r.exit_code == 3
    assert [f["code"] for f in cli.json(r)["findings"]] == ["unreachable"]
    r = cli("topology", "check", "-i", str(example_inventory))
    assert "studio-1" in r.stdout and "unreachable" in r.stdout


def test_show_draws_the_live_mesh(cli, example_inventory: Path, monkeypatch, tmp_path: Path) -> None:
    rig = healthy(NAMES)
    del rig.items[("studio-1", 4)], rig.items[("studio-4", 2)]
    rig.speeds[("studio-2", 3)] = rig.speeds[("studio-3", 3)] = "40 Gb/s"
    monkeypatch.setattr(flow_topology, "gather", fake_gather(rig))
    out = tmp_path / "live.svg"
    r = cli("topology", "show", "-i", str(example_inventory), "--svg", str(out))
    assert r.exit_code == 1, r.stderr  # findings, not a crash: the matrix and the findings are printed
    assert "internal error" not in r.stderr and "cables (my port↔their port" in r.stdout
    svg = out.read_text()
    ET.fromstring(svg)  # well-formed
    assert 'stroke-dasharray' in svg and "#ef6c00" in svg and "#2e7d32" in svg


def test_plan_json_svg_and_too_many_nodes(cli, tmp_path: Path) -> None:
    out = tmp_path / "plan.svg"
    r = cli("topology", "plan", "--nodes", "4", "--model", "Mac15,14", "--svg", str(out), "--json")
    assert r.exit_code == 0
    data = cli.json(r)
    assert data["feasible"] is True and len(data["cables"]) == 6
    assert data["cables"][0]["a"] == {"node": "studio-1", "receptacle": 2, "where": "rear, second from Ethernet",
                                      "label": None}
    root = ET.fromstring(out.read_text())
    assert root.tag.endswith("svg")
    r = cli("topology", "plan", "--nodes", "7", "--model", "mac-studio-m3-ultra", "--json")
    assert r.exit_code == 1
    assert "at most 6" in cli.json(r)["problems"][0]
    assert cli("topology", "plan", "--nodes", "3", "--model", "Mac99,1").exit_code == 2
    assert cli("topology", "plan", "--nodes", "3").exit_code == 2


def test_plan_from_inventory_uses_labels(cli, example_inventory: Path) -> None:
    r = cli("topology", "plan", "-i", str(example_inventory), "--json")
    assert r.exit_code == 0
    first = cli.json(r)["cables"][0]
    assert first["a"]["label"] == "rear 2"


def test_ipplan_json(cli, example_inventory: Path, monkeypatch) -> None:
    monkeypatch.setattr(flow_topology, "gather", fake_gather(healthy(NAMES)))
    r = cli("topology", "ipplan", "-i", str(example_inventory), "--json")
    assert r.exit_code == 0
    data = cli.json(r)
    assert data["links"][0] == {"a": {"node": "studio-1", "port": "en3", "address": "10.213.0.1"},
                                "b": {"node": "studio-2", "port": "en3", "address": "10.213.0.2"},
                                "subnet": "10.213.0.0/30"}
    assert {d["node"] for d in data["drift"]} == set(NAMES)  # nothing applied yet


class Recorder:
    """Stands in for the playbook run; keeps each run and the generated host_vars it was given."""

    def __init__(self) -> None:
        self.runs = []
        self.hostvars: dict[str, str] = {}

    def __call__(self, run, *, on_event=None, cancel=None, raise_on_failure=True):
        self.runs.append(run)
        for f in (run.inventory / "host_vars").glob("*/macfleet_generated.yml"):
            self.hostvars[f.parent.name] = f.read_text()
        hosts = {n: HostStats(ok=5, changed=3) for n in run.limit}
        return PlaybookResult(playbook=run.playbook, status="successful", rc=0, hosts=hosts, failed_tasks=[],
                              changes={n: ["Set the address."] for n in run.limit}, unreachable={},
                              artifact_dir=None)


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_apply_check_runs_the_plan_from_a_copy_and_writes_nothing(cli, example_inventory: Path, monkeypatch) -> None:
    monkeypatch.setattr(flow_topology, "gather", fake_gather(healthy(NAMES)))
    rec = Recorder()
    monkeypatch.setattr(flow_topology, "run_playbook", rec)
    before = _tree(example_inventory)
    r = cli("topology", "apply", "-i", str(example_inventory), "--check", "--json")
    assert r.exit_code == 0, r.output
    assert cli.json(r) == {"changed": 12, "nodes": {n: {"changed": 3, "failed": False} for n in NAMES}}
    (run,) = rec.runs
    assert (run.playbook, run.check, run.diff, run.limit) == ("network", True, True, tuple(NAMES))
    hv = rec.hostvars["studio-1"]  # the check run saw the plan...
    assert "generated by macfleet" in hv.lower() and "10.213.0.1" in hv and "en3" in hv
    assert _tree(example_inventory) == before  # ...and the inventory is byte for byte what it was
    assert run.inventory != example_inventory and not run.inventory.exists()  # the copy is gone


def test_apply_writes_hostvars_and_runs_the_network_playbook(cli, example_inventory: Path, monkeypatch) -> None:
    monkeypatch.setattr(flow_topology, "gather", fake_gather(healthy(NAMES)))
    rec = Recorder()
    monkeypatch.setattr(flow_topology, "run_playbook", rec)
    r = cli("topology", "apply", "-i", str(example_inventory), "--json")
    assert r.exit_code == 0, r.output
    (run,) = rec.runs
    assert (run.check, run.inventory) == (False, example_inventory)
    hv = (example_inventory / "host_vars" / "studio-1" / "macfleet_generated.yml").read_text()
    assert "generated by macfleet" in hv.lower() and "10.213.0.1" in hv and "en3" in hv
    assert rec.hostvars["studio-1"] == hv


def test_apply_refuses_a_pool_collision_before_any_change(cli, example_inventory: Path, monkeypatch) -> None:
    monkeypatch.setattr(flow_topology, "gather", fake_gather(healthy(NAMES), lan="10.213.0.9"))
    rec = Recorder()
    monkeypatch.setattr(flow_topology, "run_playbook", rec)
    r = cli("topology", "apply", "-i", str(example_inventory), "--json")
    assert r.exit_code == 1
    assert cli.json(r)["error"]["code"] == "refused"
    assert rec.runs == []
    assert not (example_inventory / "host_vars" / "studio-1" / "macfleet_generated.yml").exists()


@pytest.mark.parametrize("kind", ["ifconfig", "netstat-routes", "hardware-ports"])
def test_apply_refuses_when_a_collision_input_could_not_be_read(cli, example_inventory: Path, monkeypatch,
                                                                 kind: str) -> None:
    """A colliding LAN hidden by a failing command is not "no collision": refused, nothing run."""
    monkeypatch.setattr(flow_topology, "gather",
                        fake_gather(healthy(NAMES), lan="10.213.0.9", failed={kind: "channel closed"}))
    rec = Recorder()
    monkeypatch.setattr(flow_topology, "run_playbook", rec)
    r = cli("topology", "apply", "-i", str(example_inventory), "--json")
    assert r.exit_code == 1, r.output
    err = cli.json(r)["error"]
    assert err["code"] == "refused" and "studio-1: could not read" in err["message"]
    assert "channel closed" in err["message"]
    assert rec.runs == []
    assert not (example_inventory / "host_vars").exists() or not any((example_inventory / "host_vars").rglob("*.yml"))


def test_ipplan_with_a_node_off_names_it_and_shows_its_links_unknown(cli, example_inventory: Path,
                                                                      monkeypatch) -> None:
    monkeypatch.setattr(flow_topology, "gather", fake_gather(healthy(NAMES), {"studio-3": "connection refused"}))
    r = cli("topology", "ipplan", "-i", str(example_inventory))
    assert r.exit_code == 3
    assert "studio-3" in r.stderr and "connection refused" in r.stderr
    assert "No drift" not in r.stdout and "unknown" in r.stdout
    assert "no cable" not in r.stdout  # every other pair is cabled; studio-3's links are unknown, not uncabled


@pytest.mark.parametrize("cmd", ["check", "plan", "show", "watch", "ipplan", "apply"])
def test_help(cli, cmd: str) -> None:
    assert cli("topology", cmd, "--help").exit_code == 0


def test_watch_says_each_change_then_stops_when_complete(cli, example_inventory: Path, monkeypatch) -> None:
    """The watch loop lives in the flow: two looks (one cable missing, then none)."""
    partial = healthy(NAMES)
    del partial.items[("studio-1", 4)], partial.items[("studio-4", 2)]
    looks = iter([fake_gather(partial), fake_gather(healthy(NAMES))])
    monkeypatch.setattr(flow_topology, "gather", lambda *a, **kw: next(looks)(*a, **kw))
    r = cli("topology", "watch", "-i", str(example_inventory), "--interval", "0.2")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "still missing (1): studio-1 port 4 ↔ studio-4 port 2" in out
    assert "+ studio-1 port 4 ↔ studio-4 port 2, 80 Gb/s" in out
    assert out.rstrip().endswith("complete: 6 cables, all at 80 Gb/s on RDMA ports")
