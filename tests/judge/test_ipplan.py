"""The IP plan: deterministic, keyed by pair, stable when a Mac is appended, and what applying changes."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from macfleet.facts.network import parse_hardware_ports, parse_ifconfig, parse_service_order
from macfleet.inventory.model import SUBNETS_PER_MESH, Fleet, IpPlanSettings, Mesh, Node, Settings
from macfleet.judge.ipplan import (
    NodeNetworkFacts,
    bind_ports,
    diff_ip,
    find_collisions,
    find_drift,
    network_vars,
    pair_index,
    plan_ip,
)
from macfleet.judge.model import Change, Noop
from macfleet.judge.topology import check_cabling
from tests.conftest import capture
from tests.judge.builders import Rig, healthy

NAMES = ["studio-1", "studio-2", "studio-3", "studio-4"]


def fleet(*meshes: tuple[str, list[str]], prefix: int = 30) -> Fleet:
    settings = Settings(ipplan=IpPlanSettings(prefix=prefix))
    return Fleet(
        root=Path("/nonexistent"),
        meshes=tuple(
            Mesh(
                name=m,
                nodes=tuple(Node(name=n, mesh=m, address=f"{n}.lan", model="Mac15,14") for n in names),
                settings=settings,
            )
            for m, names in meshes
        ),
        settings=settings,
    )


def test_four_node_plan_from_the_default_pool() -> None:
    plan = plan_ip(fleet(("mesh1", NAMES)))
    got = [(lk.a.node, lk.a.address, lk.b.node, lk.b.address, lk.subnet) for lk in plan.links]
    assert got == [
        ("studio-1", "10.213.0.1", "studio-2", "10.213.0.2", "10.213.0.0/30"),
        ("studio-1", "10.213.0.5", "studio-3", "10.213.0.6", "10.213.0.4/30"),
        ("studio-2", "10.213.0.9", "studio-3", "10.213.0.10", "10.213.0.8/30"),
        ("studio-1", "10.213.0.13", "studio-4", "10.213.0.14", "10.213.0.12/30"),
        ("studio-2", "10.213.0.17", "studio-4", "10.213.0.18", "10.213.0.16/30"),
        ("studio-3", "10.213.0.21", "studio-4", "10.213.0.22", "10.213.0.20/30"),
    ]


def test_slash_31_and_second_mesh_start_at_their_reservation() -> None:
    plan = plan_ip(fleet(("pod1", ["a", "b"]), ("pod2", ["c", "d"]), prefix=31))
    assert [(lk.a.address, lk.b.address, lk.subnet) for lk in plan.links] == [
        ("10.213.0.0", "10.213.0.1", "10.213.0.0/31"),
        ("10.213.0.64", "10.213.0.65", "10.213.0.64/31"),  # 32 /31s = 64 addresses further
    ]


@given(st.integers(min_value=2, max_value=8))
def test_appending_a_node_never_moves_a_link(n: int) -> None:
    names = [f"m{i}" for i in range(n)]
    before = {(lk.a.node, lk.b.node): lk.subnet for lk in plan_ip(fleet(("x", names[:-1]))).links}
    after = {(lk.a.node, lk.b.node): lk.subnet for lk in plan_ip(fleet(("x", names))).links}
    assert all(after[k] == v for k, v in before.items())
    subnets = list(after.values())
    assert len(set(subnets)) == len(subnets)


def test_pair_indices_fill_the_reservation_of_an_8_node_mesh() -> None:
    idx = sorted(pair_index(i, j) for j in range(8) for i in range(j))
    assert idx == list(range(28)) and idx[-1] < SUBNETS_PER_MESH


def test_ports_come_from_the_live_cable_and_moving_it_keeps_the_subnet() -> None:
    f = fleet(("mesh1", NAMES))
    mesh = f.meshes[0]
    rig = healthy(NAMES)
    report = check_cabling(mesh, rig.facts())
    plan = bind_ports(plan_ip(f), {"mesh1": report})
    first = plan.links[0]
    assert (first.a.port, first.b.port) == ("en3", "en3")
    assert plan.json_payload()["links"][0] == {
        "a": {"node": "studio-1", "port": "en3", "address": "10.213.0.1"},
        "b": {"node": "studio-2", "port": "en3", "address": "10.213.0.2"},
        "subnet": "10.213.0.0/30",
    }
    # move studio-1's end of the studio-1 ↔ studio-2 cable from port 2 to port 6
    moved = Rig(list(NAMES))
    for (node, r), items in rig.items.items():
        moved.items[("studio-1", 6) if (node, r) == ("studio-1", 2) else (node, r)] = items
    moved.items[("studio-2", 2)] = [moved._mac_item("studio-1", 6)]
    moved.speeds = {k: "80 Gb/s" for k in moved.items}
    plan2 = bind_ports(plan_ip(f), {"mesh1": check_cabling(mesh, moved.facts())})
    assert plan2.links[0].subnet == first.subnet
    assert plan2.links[0].a.port == "en7"


IFCONFIG_AFTER = """\
lo0: flags=8049<UP,LOOPBACK,RUNNING,MULTICAST> mtu 16384
\tinet 127.0.0.1 netmask 0xff000000
en0: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500
\tinet {lan} netmask 0xffffff00 broadcast 192.168.1.255
\tstatus: active
en3: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500
\tinet 10.213.0.1 netmask 0xfffffffc broadcast 10.213.0.3
\tstatus: active
"""
ORDER = """\
An asterisk (*) denotes that a network service is disabled.
(1) Ethernet
(Hardware Port: Ethernet, Device: en0)

(*) Thunderbolt Bridge
(Hardware Port: Thunderbolt Bridge, Device: bridge0)

(2) Thunderbolt 2
(Hardware Port: Thunderbolt 2, Device: en3)
"""


def _two_node_plan():
    f = fleet(("mesh1", NAMES[:2]))
    report = check_cabling(f.meshes[0], healthy(NAMES[:2]).facts())
    return bind_ports(plan_ip(f), {"mesh1": report})


def _net(lan: str = "192.168.1.20", order: str = ORDER) -> NodeNetworkFacts:
    from macfleet.facts.network import parse_netstat_routes

    return NodeNetworkFacts(
        hardware_ports=parse_hardware_ports(Rig(["x"]).hardware_ports_text()),
        service_order=parse_service_order(order),
        ifconfig=parse_ifconfig(IFCONFIG_AFTER.format(lan=lan)),
        netstat_routes=parse_netstat_routes(capture("donbulinux-2021_netstat_rn_macos11_3_1.txt")),
    )


def test_diff_after_apply_is_only_a_noop_with_a_reason() -> None:
    plan = _two_node_plan()
    out = diff_ip(plan, "studio-1", _net())
    assert len(out) == 1 and isinstance(out[0], Noop) and out[0].reason
    assert find_drift(plan, {"studio-1": _net()}) == []


def test_diff_before_apply_lists_each_change() -> None:
    plan = _two_node_plan()
    order = ORDER.replace("(*) Thunderbolt Bridge", "(3) Thunderbolt Bridge").replace(
        "(2) Thunderbolt 2\n(Hardware Port: Thunderbolt 2, Device: en3)\n", ""
    )
    facts = NodeNetworkFacts(
        hardware_ports=_net().hardware_ports,
        service_order=parse_service_order(order),
        ifconfig=parse_ifconfig("en3: flags=8863<UP> mtu 9000\n\tstatus: active\n"),
    )
    out = diff_ip(plan, "studio-1", facts)
    assert all(isinstance(c, Change) for c in out)
    whats = [c.what for c in out]
    assert whats == [
        "disable the 'Thunderbolt Bridge' service",
        "create the service 'Thunderbolt 2' on Thunderbolt 2",
        "set en3 to 10.213.0.1/30 (link to studio-2)",
        "set the MTU of en3 to 1500",
    ]
    hv = network_vars(plan, "studio-1", facts)
    assert hv["ipplan_interfaces"] == [
        {
            "device": "en3",
            "hardware_port": "Thunderbolt 2",
            "service": "Thunderbolt 2",
            "address": "10.213.0.1",
            "netmask": "255.255.255.252",
            "subnet": "10.213.0.0/30",
            "peer": "studio-2",
            "peer_address": "10.213.0.2",
        }
    ]
    assert hv["ipplan_bridge_services"] == ["Thunderbolt Bridge"]
    assert hv["ipplan_thunderbolt_devices"][:2] == ["en2", "en3"]


def test_pool_collision_on_the_lan_is_found() -> None:
    plan = _two_node_plan()
    clash = _net(lan="10.213.0.2")
    found = find_collisions(plan, {"studio-1": clash})
    assert [f.code for f in found] == ["pool-collision"]
    assert "en0" in found[0].message
    assert find_collisions(plan, {"studio-1": _net()}) == []  # our own address on en3 is not a collision
    assert find_collisions(plan, {}, {"studio-2": "10.213.0.1"})[0].code == "pool-collision"


def test_real_tn3205_interface_with_link_local_is_no_collision() -> None:
    text = capture("mlx__apple-tn3205_ifconfig_en2_thunderbolt-ip.txt")
    facts = NodeNetworkFacts(ifconfig=parse_ifconfig(text))
    found = find_collisions(plan_ip(fleet(("mesh1", NAMES))), {"studio-1": facts})
    assert [f.code for f in found if f.code != "unread"] == []
    assert all(
        ipaddress.IPv4Network(lk.subnet).subnet_of(ipaddress.IPv4Network("10.213.0.0/16"))
        for lk in plan_ip(fleet(("mesh1", NAMES))).links
    )


# ----------------------------------------------------------------------------------- routes (netstat -rn)

ROUTES_HEADER = "Routing tables\n\nInternet:\nDestination        Gateway            Flags        Netif Expire\n"


def _with_routes(*rows: str) -> NodeNetworkFacts:
    from macfleet.facts.network import parse_netstat_routes

    return _net().model_copy(update={"netstat_routes": parse_netstat_routes(ROUTES_HEADER + "\n".join(rows) + "\n")})


@pytest.mark.parametrize(
    ("row", "collides"),
    [
        ("10.213.0/24        10.8.0.1           UGSc           utun3", True),  # a VPN pushes part of the pool
        ("10.213.0.4/30      192.168.1.1        UGSc           en0", True),  # a static route to one cable's /30
        ("10/8               10.8.0.1           UGSc           utun3", False),  # broader: the cables' /30s win
        ("default            192.168.1.1        UGScg          en0", False),
        ("10.213.0/24        link#4             UCS            en0", False),  # connected: ifconfig's business
        ("10.213.0.1         4:d4:c4:1:2:3      UHLWIi         en0", False),  # an ARP entry
        ("10.213.0/24        10.213.0.2         UGSc           en3", False),  # on a Thunderbolt port: ours
        ("172.16.111/24      10.8.0.1           UGSc           utun3", False),
    ],
)
def test_routes_into_the_pool_through_a_gateway_collide(row: str, collides: bool) -> None:
    plan = plan_ip(fleet(("mesh1", NAMES)))
    found = find_collisions(plan, {"studio-1": _with_routes(row)})
    assert [f.code for f in found] == (["pool-collision"] if collides else [])
    if collides:
        assert "routes" in found[0].message and found[0].nodes == ["studio-1"]


def test_real_routing_table_with_vmware_networks_is_no_collision() -> None:
    from macfleet.facts.network import parse_netstat_routes

    facts = _net().model_copy(
        update={"netstat_routes": parse_netstat_routes(capture("apple-se-336888_netstat_rn_vmware_1.txt"))}
    )
    assert find_collisions(plan_ip(fleet(("mesh1", NAMES))), {"studio-1": facts}) == []


# ------------------------------------------------------------------------------- could not read: refuse

@pytest.mark.parametrize("missing", ["ifconfig", "netstat_routes", "hardware_ports"])
def test_a_node_that_could_not_be_read_is_never_clear_of_collisions(missing: str) -> None:
    """A colliding LAN on a node whose command failed: the check says it cannot tell, and apply refuses."""
    from macfleet.judge.ipplan import refuse_on_collision

    plan = _two_node_plan()
    kind = missing.replace("_", "-")
    facts = _net(lan="10.213.0.2").model_copy(update={missing: None, "problems": [f"{kind}: channel closed"]})
    found = find_collisions(plan, {"studio-1": facts})
    unread = [f for f in found if f.code == "unread"]
    assert len(unread) == 1 and unread[0].nodes == ["studio-1"] and "channel closed" in unread[0].message
    refusal = refuse_on_collision(found)
    assert refusal is not None and refusal.nodes == ["studio-1"] and "could not read" in refusal.reason
    # and with every input missing and no reason given, still a refusal naming what was not read
    bare = find_collisions(plan, {"studio-2": NodeNetworkFacts()})
    assert {f.code for f in bare} == {"unread"} and len(bare) == 3
    assert all("studio-2" in f.message and "not read" in f.message for f in bare)
