"""RDMA readiness and the `rdma enable` state machine, table style: facts in (real captures where they exist,
else text in the shape real Macs print, parsed by the real parsers), decisions out."""

from __future__ import annotations

import pytest

from macfleet.facts.network import parse_hardware_ports, parse_ifconfig
from macfleet.facts.rdma import parse_ibv_devices, parse_ibv_devinfo, parse_rdma_ctl
from macfleet.facts.system import parse_sw_vers
from macfleet.facts.thunderbolt import parse_thunderbolt
from macfleet.judge.rdma import NodeRdmaFacts, RdmaReport, check_rdma
from macfleet.judge.rdma_walk import (
    TRANSITIONS,
    InvalidTransition,
    NodeProgress,
    WalkState,
    advance,
    next_group,
    plan_walk,
    timed_out,
)
from macfleet.judge.startup_steps import FAMILIES, startup_steps
from tests.conftest import capture
from tests.judge.builders import Rig, healthy, mesh

NAMES = ["studio-1", "studio-2", "studio-3"]


def sw_vers(version: str = "26.5.1", build: str = "25F80") -> str:
    return f"ProductName:\t\tmacOS\nProductVersion:\t\t{version}\nBuildVersion:\t\t{build}\n"


def ibv_devices(devices: list[str]) -> str:
    rows = "".join(f"    {d:<16}\t9016a3fffe0{i}ac05\n" for i, d in enumerate(devices))
    return "    device          \t   node GUID\n    ------          \t----------------\n" + rows


def devinfo(ports: dict[str, tuple[bool, str | None]]) -> str:
    """`ibv_devinfo -v` in the layout of TN3205's capture: device -> (active, IPv4 of its GID[1] or None)."""
    blocks = []
    for dev, (active, v4) in ports.items():
        lines = [f"hca_id:\t{dev}", "\ttransport:\t\t\tThunderbolt (100)", "\tphys_port_cnt:\t\t\t1",
                 "\t\tport:\t1", f"\t\t\tstate:\t\t\t{'PORT_ACTIVE (4)' if active else 'PORT_DOWN (1)'}",
                 "\t\t\tlink_layer:\t\tThunderbolt", "\t\t\tGID[  0]:\t\tfe80::344d:4ff:feea:4e40"]
        if v4:
            lines.append(f"\t\t\tGID[  1]:\t\t::ffff:{v4}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def node_facts(rig: Rig, node: str, *, rdma: bool = True, active: dict[str, bool] | None = None,
               gid: bool = True, version: str = "26.5.1", build: str = "25F80", timed_out: tuple[str, ...] = (),
               **override) -> NodeRdmaFacts:
    tb = parse_thunderbolt(rig.thunderbolt_json(node))
    hw = parse_hardware_ports(rig.hardware_ports_text())
    devs = [f"rdma_en{r + 1}" for r in range(1, rig.ports + 1)] if rdma else []
    cabled = {f"rdma_{hw.by_thunderbolt()[p.receptacle].device}" for p in tb.ports if p.connected}
    active = active or {}
    info = {d: (active.get(d, rdma and d in cabled), f"10.213.0.{i + 1}" if gid and d in cabled else None)
            for i, d in enumerate(devs)}
    facts = dict(
        sw_vers=parse_sw_vers(sw_vers(version, build)), thunderbolt=tb, hardware_ports=hw,
        rdma_ctl=parse_rdma_ctl("enabled" if rdma else "disabled"), ibv_devices=parse_ibv_devices(ibv_devices(devs)),
        ibv_devinfo=parse_ibv_devinfo(devinfo(info)) if devs and "ibv-devinfo" not in timed_out else None,
        timed_out=list(timed_out),
    )
    facts.update(override)
    return NodeRdmaFacts(**facts)


def codes(node) -> list[str]:
    return [p.code for p in node.problems]


def judge(names, facts, unreachable=None, model="Mac15,14"):
    return RdmaReport(nodes=check_rdma(mesh(*names, model=model), facts, unreachable))


# ------------------------------------------------------------------------------------------- rdma status


def test_healthy_mesh_is_ready_and_json_is_the_documented_shape() -> None:
    rig = healthy(NAMES)
    report = judge(NAMES, {n: node_facts(rig, n) for n in NAMES})
    assert report.ready and report.exit_code() == 0
    first = report.json_payload()["nodes"][0]
    assert first == {
        "name": "studio-1", "os": "26.5.1", "build": "25F80", "rdma_enabled": True, "ready": True,
        "ports": [{"port": "en3", "peer": "studio-2", "state": "active", "gid_v4": "10.213.0.2"},
                  {"port": "en4", "peer": "studio-3", "state": "active", "gid_v4": "10.213.0.3"}],
        "problems": [],
    }


def test_rdma_off_names_the_node_and_every_port_it_takes_down_at_its_peers() -> None:
    rig = healthy(NAMES)
    facts = {n: node_facts(rig, n, active={"rdma_en3": n == "studio-3"} if n != "studio-2" else None,
                           rdma=n != "studio-2") for n in NAMES}
    # studio-1 en3 and studio-3 en4 face studio-2: PORT_DOWN there
    facts["studio-1"] = node_facts(rig, "studio-1", active={"rdma_en3": False})
    facts["studio-3"] = node_facts(rig, "studio-3", active={"rdma_en3": True, "rdma_en4": False})
    report = judge(NAMES, facts)
    s1, s2, s3 = report.nodes
    assert codes(s2) == ["rdma-off"] and s2.rdma_enabled is False
    assert "macfleet rdma enable studio-2" in s2.problems[0].fix
    assert [p.state for p in s2.ports] == ["down", "down"]
    assert codes(s1) == ["peer-rdma-off"] and codes(s3) == ["peer-rdma-off"]
    assert s1.problems[0].message.startswith("en3 (port 2, rear, second from Ethernet) to studio-2 is down")
    assert s3.problems[0].message.startswith("en4 (port 3, rear, third from Ethernet) to studio-2 is down")
    assert report.exit_code() == 1 and not report.ready


def test_a_thunderbolt_4_mac_is_told_once_and_its_peers_get_no_cable_advice() -> None:
    rig = healthy(["studio-1", "mini-1"])
    rig.speeds = {k: "40 Gb/s" for k in rig.speeds}
    tb4 = node_facts(rig, "mini-1", ibv_devices=parse_ibv_devices(
        capture("mlx__omlx-issue-3037_rdma_ctl_status_ibv_devices_empty_tb4.txt")), ibv_devinfo=None,
        rdma_ctl=parse_rdma_ctl(capture("mlx__omlx-issue-3037_rdma_ctl_status_ibv_devices_empty_tb4.txt")))
    facts = {"studio-1": node_facts(rig, "studio-1", active={"rdma_en3": False}), "mini-1": tb4}
    m = mesh("studio-1", "mini-1")
    m = m.model_copy(update={"nodes": (m.nodes[0], m.nodes[1].model_copy(update={"model": "Mac16,10"}))})
    report = RdmaReport(nodes=check_rdma(m, facts))
    studio, mini = report.nodes
    every = [p.code for n in report.nodes for p in n.problems]
    assert every == ["not-tb5"]
    assert "can never do RDMA" in mini.problems[0].message and mini.rdma_enabled is True
    assert mini.can_do_rdma is False and not mini.needs_enable
    assert studio.ports[0].why == "mini-1 is Thunderbolt 4" and not studio.ready


def test_missing_ipv4_gid_on_an_active_bridged_port_gives_the_ip_plan_fix() -> None:
    rig = healthy(NAMES)
    bridge = parse_ifconfig("bridge0: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500\n"
                            "\tmember: en3 flags=3<LEARNING,DISCOVER>\n\tmember: en4 flags=3<LEARNING,DISCOVER>\n")
    facts = {n: node_facts(rig, n) for n in NAMES}
    facts["studio-1"] = node_facts(rig, "studio-1", gid=False, ifconfig=bridge)
    report = judge(NAMES, facts)
    s1 = report.nodes[0]
    assert codes(s1) == ["no-ipv4-gid", "no-ipv4-gid"]
    assert [p.gid_v4 for p in s1.ports] == [None, None] and [p.state for p in s1.ports] == ["active", "active"]
    assert "Changing queue pair to RTR failed with errno 22" in s1.problems[0].message
    assert "bridge0" in s1.problems[0].message
    assert "macfleet topology apply" in s1.problems[0].fix


def test_a_wedged_devinfo_is_the_finding_and_ports_are_unknown_not_down() -> None:
    rig = healthy(NAMES)
    facts = {n: node_facts(rig, n) for n in NAMES}
    facts["studio-2"] = node_facts(rig, "studio-2", timed_out=("ibv-devinfo",))
    facts["studio-1"] = node_facts(rig, "studio-1", active={"rdma_en3": False})
    report = judge(NAMES, facts)
    s1, s2, _ = report.nodes
    assert codes(s2) == ["rdma-wedged"] and s2.wedged
    assert "RDMA wedged on studio-2" in s2.problems[0].message and "macfleet reboot --mesh mesh1" in s2.problems[0].fix
    assert {p.state for p in s2.ports} == {"unknown"}
    assert codes(s1) == [] and s1.ports[0].why == "RDMA wedged on studio-2" and not s1.ready


@pytest.mark.parametrize(("versions", "expect"), [
    ({"studio-1": ("26.5.1", "25F80"), "studio-2": ("26.5.1", "25F80"), "studio-3": ("26.4.1", "25E253")},
     {"studio-3": ["os-mismatch"]}),
    ({"studio-1": ("26.1", "25B78"), "studio-2": ("26.1", "25B78"), "studio-3": ("26.1", "25B78")},
     {n: ["os-too-old"] for n in NAMES}),
])
def test_macos_version_and_build(versions, expect) -> None:
    rig = healthy(NAMES)
    report = judge(NAMES, {n: node_facts(rig, n, version=v, build=b) for n, (v, b) in versions.items()})
    assert {n.name: codes(n) for n in report.nodes if n.problems} == expect


def test_could_not_tell_is_null_never_no() -> None:
    rig = healthy(NAMES)
    facts = {n: node_facts(rig, n) for n in NAMES}
    facts["studio-3"] = node_facts(rig, "studio-3", rdma_ctl=None, problems=["rdma-ctl: exit 1: boom"])
    report = judge(NAMES, facts, unreachable={"studio-2": "cannot connect"})
    payload = report.json_payload()["nodes"]
    assert payload[1] == {"name": "studio-2", "os": None, "build": None, "rdma_enabled": None, "ready": False,
                          "ports": [], "problems": [{"code": "unreachable", "message":
                                                     "studio-2 could not be reached: cannot connect", "fix":
                                                     "check that studio-2 is powered on, on the network and "
                                                     "accepts SSH"}]}
    assert payload[2]["rdma_enabled"] is None and "rdma-unknown" in codes(report.nodes[2])
    assert report.exit_code() == 3


def test_enabled_but_no_devices_on_a_thunderbolt_5_mac_is_a_broken_state() -> None:
    rig = healthy(NAMES)
    facts = {n: node_facts(rig, n) for n in NAMES}
    facts["studio-1"] = node_facts(rig, "studio-1", ibv_devices=parse_ibv_devices(
        capture("macos__ibv_devices_rdma_disabled_1.txt")), ibv_devinfo=None)
    report = judge(NAMES, facts)
    assert "no-rdma-devices" in codes(report.nodes[0])
    assert not report.nodes[0].enabled_ok


def test_real_tn3205_devinfo_gives_the_port_its_ipv4_gid() -> None:
    rig = Rig(["a", "b"]).cable("a", 1, "b", 1)
    facts = {"a": node_facts(rig, "a", ibv_devinfo=parse_ibv_devinfo(
        capture("mlx__apple-tn3205_ibv_devinfo_-d_rdma_en2_-v.txt"))), "b": node_facts(rig, "b")}
    report = judge(["a", "b"], facts, model=None)
    a = report.nodes[0]
    assert [(p.port, p.peer, p.state, p.gid_v4) for p in a.ports] == [("en2", "b", "active", "169.254.205.255")]


def test_real_m4_mac_mini_ports_name_the_port() -> None:
    hw = parse_hardware_ports(capture("macos__networksetup_listallhardwareports_macmini_m4_1.txt"))
    assert {r: p.device for r, p in hw.by_thunderbolt().items()} == {1: "en2", 2: "en3", 4: "en4"}


# ------------------------------------------------------------------------------------------ startup steps


@pytest.mark.parametrize("family", [*FAMILIES, None])
def test_every_family_has_the_recovery_checklist(family) -> None:
    steps = startup_steps(family)
    text = "\n".join(steps)
    for must in ("Loading startup options", "Options, then Continue", "Utilities → Terminal", "`rdma_ctl enable`",
                 "Restart"):
        assert must in text


# --------------------------------------------------------------------------------------- the walk machine


@pytest.mark.parametrize(("phase", "event", "to"), [
    ("todo", "begin", "going-down"),
    ("todo", "gone", "away"),
    ("going-down", "gone", "away"),
    ("going-down", "timeout", "timed-out"),
    ("going-down", "retry", "going-down"),
    ("away", "reachable", "back"),
    ("away", "timeout", "timed-out"),
    ("back", "verified", "done"),
    ("back", "not-verified", "failed"),
    ("timed-out", "retry", "todo"),
    ("failed", "retry", "todo"),
    ("away", "skip", "skipped"),
    ("todo", "skip", "skipped"),
])
def test_transitions(phase, event, to) -> None:
    p = advance(NodeProgress(node="n", phase=phase, since=1.0), event, now=5.0, note="why")
    assert (p.phase, p.since, p.note) == (to, 5.0, "why")


@pytest.mark.parametrize(("phase", "event"), [
    ("todo", "reachable"), ("todo", "verified"), ("going-down", "reachable"), ("away", "gone"),
    ("done", "skip"), ("done", "begin"), ("back", "timeout"), ("skipped", "gone"),
])
def test_refused_transitions(phase, event) -> None:
    with pytest.raises(InvalidTransition):
        advance(NodeProgress(node="n", phase=phase), event, now=0.0)


def test_done_is_final() -> None:
    assert not [e for (p, e) in TRANSITIONS if p == "done"]


@pytest.mark.parametrize(("phase", "since", "now", "expect"), [
    ("away", 100.0, 159.0, False), ("away", 100.0, 160.0, True), ("going-down", 0.0, 61.0, True),
    ("todo", 0.0, 1e9, False), ("back", 0.0, 1e9, False), ("away", None, 1e9, False),
])
def test_timeout(phase, since, now, expect) -> None:
    assert timed_out(NodeProgress(node="n", phase=phase, since=since), now, 60.0) is expect


def test_plan_keeps_inventory_order_and_resumes_the_node_in_progress() -> None:
    order = ["a", "b", "c", "d"]
    fresh = plan_walk(order, ["d", "b"], None, all_at_once=False)
    assert [p.node for p in fresh.nodes] == ["b", "d"] and next_group(fresh) == ["b"]
    previous = WalkState(nodes=[NodeProgress(node="b", phase="done"), NodeProgress(node="c", phase="timed-out"),
                                NodeProgress(node="d", phase="away", since=3.0)])
    resumed = plan_walk(order, ["c", "d"], previous, all_at_once=False)
    assert [(p.node, p.phase) for p in resumed.nodes] == [("c", "todo"), ("d", "away")]
    assert next_group(resumed) == ["d"]  # the node it left first
    assert next_group(resumed.put(NodeProgress(node="d", phase="done"))) == ["c"]


def test_all_at_once_takes_every_node_together() -> None:
    state = plan_walk(["a", "b", "c"], ["a", "c"], None, all_at_once=True)
    assert next_group(state) == ["a", "c"]
    done = state.put(NodeProgress(node="a", phase="done")).put(NodeProgress(node="c", phase="skipped"))
    assert next_group(done) == [] and done.finished


@pytest.mark.parametrize(("cable", "speed", "code", "fix"), [
    (("a", 2, "b", 2), "40 Gb/s", "slow-link", "replace the cable between a port 2 and b port 2 with a Thunderbolt 5"),
    (("a", 1, "b", 2), "80 Gb/s", "port-not-rdma", "move the cable from a port 1 to a free RDMA-capable port of a"),
])
def test_a_down_port_between_two_rdma_macs_says_which_cable_or_port(cable, speed, code, fix) -> None:
    rig = Rig(["a", "b"]).cable(*cable, speed=speed)
    report = judge(["a", "b"], {n: node_facts(rig, n, active={"rdma_en2": False, "rdma_en3": False})
                                for n in ("a", "b")})
    a = report.nodes[0]
    assert codes(a) == [code] and a.problems[0].fix.startswith(fix)
    assert [(p.peer, p.state) for p in a.ports] == [("b", "down")]
