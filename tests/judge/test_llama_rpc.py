"""llama.cpp's --rpc list from plain data: the healthy rig, the IP plan bound to its cables, live addresses."""

from __future__ import annotations

from macfleet.judge.ipplan import bind_ports, plan_ip
from macfleet.judge.llama_rpc import RpcList, rpc_list
from macfleet.judge.model import Refusal
from macfleet.judge.topology import check_cabling
from tests.judge.builders import Rig, healthy
from tests.judge.test_mlx import NAMES, fleet, network_as_planned


def _plan(rig: Rig, names=NAMES):
    f = fleet(names)
    return f.meshes[0], bind_ports(plan_ip(f), {"mesh1": check_cabling(f.meshes[0], rig.facts())})


def test_each_worker_on_its_cable_to_the_head() -> None:
    rig = healthy(NAMES)
    mesh, plan = _plan(rig)
    out = rpc_list(mesh, plan, network_as_planned(plan, NAMES, rig), "studio-2", 50052)
    assert isinstance(out, RpcList)
    # pair (i < j): subnet index j*(j-1)/2 + i; .1 to i, .2 to j
    assert out.rpc == "10.213.0.1:50052,10.213.0.10:50052,10.213.0.18:50052"
    assert [w.node for w in out.workers] == ["studio-1", "studio-3", "studio-4"]
    assert out.json_payload()["head"] == "studio-2"


def test_a_worker_without_cable_or_live_address_is_refused_by_name() -> None:
    rig = Rig(list(NAMES))
    for j in range(4):
        for i in range(j):
            if (NAMES[i], NAMES[j]) != ("studio-1", "studio-3"):
                rig.cable(NAMES[i], 2 + (j - 1), NAMES[j], 2 + i)
    mesh, plan = _plan(rig)
    port = next(lk for lk in plan.links if {lk.a.node, lk.b.node} == {"studio-1", "studio-4"}).b.port
    out = rpc_list(mesh, plan, network_as_planned(plan, NAMES, rig, ("studio-4", port)), "studio-1", 50052)
    assert isinstance(out, Refusal)
    assert out.nodes == ["studio-3", "studio-4"]
    assert "studio-3: no live cable to studio-1" in out.reason
    assert f"studio-4 {port} (to studio-1) has no address, not the planned 10.213.0.14/30" in out.reason
