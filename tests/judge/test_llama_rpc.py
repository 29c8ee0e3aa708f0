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


# ------------------------------------------------------------------------------- where rpc-server listens

def test_each_node_binds_one_job_per_live_thunderbolt_address() -> None:
    from macfleet.judge.llama_rpc import rpc_bindings

    _, plan = _plan(healthy(NAMES))
    b = rpc_bindings(plan, "mesh1", "studio-2")
    assert [(x.peer, x.address, x.label) for x in b] == [
        ("studio-1", "10.213.0.2", "org.macfleet.llama-rpc.0"),
        ("studio-3", "10.213.0.9", "org.macfleet.llama-rpc.1"),
        ("studio-4", "10.213.0.17", "org.macfleet.llama-rpc.2")]
    assert all(x.port.startswith("en") for x in b)


def test_a_pair_without_a_live_cable_gets_no_job() -> None:
    from macfleet.judge.llama_rpc import rpc_bindings

    rig = Rig(list(NAMES))
    for j in range(4):
        for i in range(j):
            if (NAMES[i], NAMES[j]) != ("studio-1", "studio-3"):
                rig.cable(NAMES[i], 2 + (j - 1), NAMES[j], 2 + i)
    _, plan = _plan(rig)
    assert [x.peer for x in rpc_bindings(plan, "mesh1", "studio-1")] == ["studio-2", "studio-4"]


def _bindings():
    from macfleet.judge.llama_rpc import rpc_bindings

    _, plan = _plan(healthy(NAMES))
    return rpc_bindings(plan, "mesh1", "studio-1")


def test_listening_on_each_thunderbolt_address_only_is_clean() -> None:
    from macfleet.judge.llama_rpc import judge_listeners

    b = _bindings()
    v = judge_listeners([(x.address, 50052) for x in b] + [("*", 22), ("127.0.0.1", 52415)], b, 50052)
    assert (v.exposed, v.missing) == ([], [])


def test_every_address_or_a_lan_address_is_exposure_and_a_gap_is_named() -> None:
    from macfleet.judge.llama_rpc import judge_listeners

    b = _bindings()
    star = judge_listeners([("*", 50052)], b, 50052)
    assert star.exposed == ["every address (*)"] and star.missing == []  # * serves them: one finding, not two
    lan = judge_listeners([(b[0].address, 50052), ("192.168.1.20", 50052)], b, 50052)
    assert lan.exposed == ["192.168.1.20"]
    assert lan.missing == [f"{x.address} ({x.port}, to {x.peer})" for x in b[1:]]
    assert judge_listeners([], b, 50052).missing and not judge_listeners([], b, 50052).exposed
    assert judge_listeners([(b[0].address, 50053)], b[:1], 50052).missing  # another port is not it


def test_the_check_says_nothing_where_llama_rpc_is_off_and_cannot_tell_without_sockets() -> None:
    from tests.judge.test_health import all_nodes, verdict

    assert verdict("llama-rpc", all_nodes()) == []  # not enabled in the inventory: not judged


def test_the_check_reads_the_lab_and_real_netstat_shapes() -> None:
    from macfleet.facts.sockets import parse_netstat_listen

    text = ("Active Internet connections (including servers)\n"
            "Proto Recv-Q Send-Q  Local Address          Foreign Address        (state)    \n"
            "tcp4       0      0  10.213.0.1.50052       *.*                    LISTEN     \n"
            "tcp46      0      0  *.50052                *.*                    LISTEN     \n"
            "tcp4       0      0  10.213.0.1.50052       10.213.0.2.61000       ESTABLISHED\n")
    facts = parse_netstat_listen(text)
    assert [(s.local_address, s.proto) for s in facts.listening(50052)] == [("10.213.0.1", "tcp4"), ("*", "tcp46")]


def test_each_job_is_knocked_on_from_its_peer_and_every_failure_is_named() -> None:
    from macfleet.judge.llama_rpc import knock_targets, rpc_bindings, rpc_health

    _, plan = _plan(healthy(NAMES))
    bindings = {n: rpc_bindings(plan, "mesh1", n) for n in NAMES}
    targets, by_key = knock_targets(bindings, 50052)
    assert sorted(targets) == sorted(NAMES) and all(len(t) == 3 for t in targets.values())
    assert ("10.213.0.2", 50052) in targets["studio-1"]  # studio-2's end of their cable, from studio-1
    assert rpc_health(dict.fromkeys(by_key), by_key) == []
    answers = {**dict.fromkeys(by_key), "10.213.0.2:50052": "Connection refused"}
    del answers["10.213.0.1:50052"]
    reasons = rpc_health(answers, by_key)
    assert reasons == [
        f"studio-1 org.macfleet.llama-rpc.0 (10.213.0.1:50052 on {bindings['studio-1'][0].port}): studio-2 did not "
        "say whether it connected",
        f"studio-2 org.macfleet.llama-rpc.0 (10.213.0.2:50052 on {bindings['studio-2'][0].port}): studio-1 could not "
        "connect: Connection refused"]


def test_the_playbook_is_skipped_only_when_every_plist_is_exactly_the_wanted_job() -> None:
    from macfleet.judge.llama_rpc import jobs_in_place

    b = _bindings()
    prog = "/Users/admin/llama.cpp/current/bin/rpc-server"
    plists = {x.index: {"args": [prog, "-H", x.address, "-p", "50052"], "user": "admin"} for x in b}
    assert jobs_in_place(plists, b, prog, 50052, "admin")
    assert not jobs_in_place(plists, b, prog, 50053, "admin")  # the port changed
    assert not jobs_in_place(plists, b, prog, 50052, "root")
    assert not jobs_in_place({**plists, 7: plists[0]}, b, prog, 50052, "admin")  # a stale job is removed
    assert not jobs_in_place({0: plists[0]}, b, prog, 50052, "admin")  # a job is missing
    moved = {**plists, 1: {"args": [prog, "-H", "0.0.0.0", "-p", "50052"], "user": "admin"}}
    assert not jobs_in_place(moved, b, prog, 50052, "admin")
