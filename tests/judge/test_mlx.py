"""MLX's hostfile from plain data: the healthy rig's captures through the real parsers, the cabling check, the
IP plan and the RDMA judge, then `mlx_hostfile`."""

from __future__ import annotations

import json
from pathlib import Path

from macfleet.facts.network import parse_hardware_ports, parse_ifconfig
from macfleet.inventory.model import Fleet, Mesh, Node, Settings
from macfleet.judge.ipplan import NodeNetworkFacts, bind_ports, plan_ip
from macfleet.judge.mlx import MlxHostfile, mlx_hostfile
from macfleet.judge.model import Refusal
from macfleet.judge.rdma import RdmaReport, check_rdma
from macfleet.judge.topology import check_cabling
from tests.judge.builders import Rig, healthy
from tests.judge.test_rdma import node_facts

NAMES = ["studio-1", "studio-2", "studio-3", "studio-4"]


def fleet(names: list[str], address=lambda i: f"198.18.0.{10 + i}", user: str | None = "macadmin") -> Fleet:
    mesh = Mesh(name="mesh1", nodes=tuple(Node(name=n, mesh="mesh1", address=address(i), user=user, model="Mac15,14")
                                          for i, n in enumerate(names)), settings=Settings())
    return Fleet(root=Path("/nonexistent"), meshes=(mesh,), settings=Settings())


def inputs(f: Fleet, rig: Rig, **rdma_kw):
    mesh = f.meshes[0]
    plan = bind_ports(plan_ip(f), {"mesh1": check_cabling(mesh, rig.facts())})
    facts = {n: node_facts(rig, n, **rdma_kw.get(n, {})) for n in mesh.node_names}
    report = RdmaReport(nodes=check_rdma(mesh, facts))
    return mesh, plan, report


def ifconfig(addrs: dict[str, str]) -> str:
    out = "lo0: flags=8049<UP,LOOPBACK,RUNNING,MULTICAST> mtu 16384\n\tinet 127.0.0.1 netmask 0xff000000\n"
    for dev, addr in addrs.items():
        out += (f"{dev}: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500\n"
                f"\tinet {addr} netmask 0xfffffffc broadcast 10.213.0.255\n\tstatus: active\n")
    return out


def network_as_planned(plan, names: list[str], rig: Rig, drop: tuple[str, str] | None = None):
    out = {}
    for n in names:
        addrs = {}
        for lk in plan.for_node(n):
            e = lk.end(n)
            if e.port and (n, e.port) != drop:
                addrs[e.port] = e.address
        out[n] = NodeNetworkFacts(hardware_ports=parse_hardware_ports(rig.hardware_ports_text()),
                                  ifconfig=parse_ifconfig(ifconfig(addrs)))
    return out


def test_jaccl_hostfile_of_a_healthy_mesh_is_mlx_documented_shape() -> None:
    f = fleet(NAMES)
    mesh, plan, report = inputs(f, healthy(NAMES))
    hf = mlx_hostfile(mesh, plan, report, {}, "jaccl")
    assert isinstance(hf, MlxHostfile)
    data = json.loads(hf.text())
    assert list(data) == ["backend", "envs", "hosts"]
    assert data["backend"] == "jaccl" and data["envs"] == []
    assert [h["ssh"] for h in data["hosts"]] == [f"macadmin@198.18.0.{10 + i}" for i in range(4)]
    assert [h["ips"] for h in data["hosts"]] == [[f"198.18.0.{10 + i}"] for i in range(4)]
    # healthy(): the k-th other Mac on the k-th RDMA port (Thunderbolt 2.. = en3..)
    assert [h["rdma"] for h in data["hosts"]] == [
        [None, "rdma_en3", "rdma_en4", "rdma_en5"],
        ["rdma_en3", None, "rdma_en4", "rdma_en5"],
        ["rdma_en3", "rdma_en4", None, "rdma_en5"],
        ["rdma_en3", "rdma_en4", "rdma_en5", None],
    ]


def test_each_entry_is_the_port_of_that_pairs_actual_cable() -> None:
    """studio-1's cable to studio-3 moved to its port 6 (en7): only that entry changes, on that side."""
    rig = Rig(list(NAMES))
    for j in range(4):
        for i in range(j):
            ra = 6 if (NAMES[i], NAMES[j]) == ("studio-1", "studio-3") else 2 + (j - 1)
            rig.cable(NAMES[i], ra, NAMES[j], 2 + i)
    mesh, plan, report = inputs(fleet(NAMES), rig)
    hf = mlx_hostfile(mesh, plan, report, {}, "jaccl")
    assert isinstance(hf, MlxHostfile)
    assert hf.hosts[0].rdma == [None, "rdma_en3", "rdma_en7", "rdma_en5"]
    assert hf.hosts[2].rdma == ["rdma_en3", "rdma_en4", None, "rdma_en5"]


def test_a_pair_without_an_active_port_is_refused_naming_the_pair() -> None:
    # studio-2's en4 (to studio-3) is PORT_DOWN
    mesh, plan, report = inputs(fleet(NAMES), healthy(NAMES), **{"studio-2": {"active": {"rdma_en4": False}}})
    out = mlx_hostfile(mesh, plan, report, {}, "jaccl")
    assert isinstance(out, Refusal)
    assert "studio-2 and studio-3: no active RDMA port (studio-2 en4 is PORT_DOWN" in out.reason
    assert out.nodes == ["studio-2", "studio-3"]


def test_a_missing_cable_and_a_missing_gid_are_refused() -> None:
    rig = Rig(list(NAMES))
    for j in range(4):
        for i in range(j):
            if (NAMES[i], NAMES[j]) != ("studio-1", "studio-4"):
                rig.cable(NAMES[i], 2 + (j - 1), NAMES[j], 2 + i)
    mesh, plan, report = inputs(fleet(NAMES), rig)
    out = mlx_hostfile(mesh, plan, report, {}, "jaccl")
    assert isinstance(out, Refusal) and "studio-1 and studio-4: no cable between them" in out.reason
    mesh, plan, report = inputs(fleet(NAMES[:2]), healthy(NAMES[:2]), **{"studio-2": {"gid": False}})
    out = mlx_hostfile(mesh, plan, report, {}, "jaccl")
    assert isinstance(out, Refusal) and "studio-2 en3 has no IPv4-mapped GID" in out.reason


def test_a_port_not_read_is_refused_never_guessed() -> None:
    mesh, plan, report = inputs(fleet(NAMES[:2]), healthy(NAMES[:2]))
    report = RdmaReport(nodes=[report.nodes[0]])  # studio-2 gave nothing
    out = mlx_hostfile(mesh, plan, report, {}, "jaccl")
    assert isinstance(out, Refusal) and "studio-2 en3: its RDMA state was not read" in out.reason


def test_coordinator_must_be_an_ip_address() -> None:
    f = fleet(NAMES[:2], address=lambda i: f"studio-{i + 1}.lan")
    mesh, plan, report = inputs(f, healthy(NAMES[:2]))
    out = mlx_hostfile(mesh, plan, report, {}, "jaccl")
    assert isinstance(out, Refusal) and "host name for studio-1, studio-2" in out.reason


def test_ring_gives_each_rank_its_address_on_the_cable_to_the_rank_before() -> None:
    f = fleet(NAMES, user=None)
    rig = healthy(NAMES)
    mesh, plan, report = inputs(f, rig)
    hf = mlx_hostfile(mesh, plan, report, network_as_planned(plan, NAMES, rig), "ring")
    assert isinstance(hf, MlxHostfile)
    # pair (i < j) has subnet index j*(j-1)/2 + i of 10.213.0.0/16's /30s; .1 to i, .2 to j
    assert [(h.ssh, h.ips, h.rdma) for h in hf.hosts] == [
        ("198.18.0.10", ["10.213.0.13"], []),  # studio-1 on studio-1 ↔ studio-4 (index 3)
        ("198.18.0.11", ["10.213.0.2"], []),  # studio-2 on studio-1 ↔ studio-2 (index 0)
        ("198.18.0.12", ["10.213.0.10"], []),  # studio-3 on studio-2 ↔ studio-3 (index 2)
        ("198.18.0.13", ["10.213.0.22"], []),  # studio-4 on studio-3 ↔ studio-4 (index 5)
    ]


def test_ring_refuses_an_address_that_is_not_live() -> None:
    f = fleet(NAMES[:3])
    rig = healthy(NAMES[:3])
    mesh, plan, report = inputs(f, rig)
    port = plan.links[0].b.port  # studio-2's end of studio-1 ↔ studio-2
    out = mlx_hostfile(mesh, plan, report, network_as_planned(plan, NAMES[:3], rig, ("studio-2", port)), "ring")
    assert isinstance(out, Refusal)
    assert f"studio-2 {port} (to studio-1) has no address, not the planned 10.213.0.2/30" in out.reason
    out = mlx_hostfile(mesh, plan, report, {}, "ring")
    assert isinstance(out, Refusal) and "its addresses could not be read" in out.reason
