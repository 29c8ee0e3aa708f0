"""exo's discovery: the master each node follows (its log, proven on a real exo log) and the rank-0 addresses of
instances. Nodes that do not see each other in /state are exo-peers' finding (tests/judge/test_health.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from macfleet.errors import FactsParseError
from macfleet.facts.discovery import SELF, master_followed, parse_coordinators
from macfleet.judge.discovery import NodeDiscovery, coordinators, masters

LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "exo-log"
IDS = {"s1": "a" * 32, "s2": "b" * 32, "s3": "c" * 32, "s4": "d" * 32}


def line(message: str) -> str:
    return f"[ 2026-12-02 10:00:00.000 | INFO     | exo.main:_elect_loop:235 ] {message}"


def test_a_real_log_names_its_node_master() -> None:
    text = (LOGS / "exo__exo-issue-2067_startup_node_elected_master.txt").read_text(encoding="utf-8")
    assert master_followed(text) == SELF


def test_the_last_outcome_since_the_last_start_counts() -> None:
    b = IDS["s2"]
    assert master_followed("\n".join([line("Node elected Master - promoting self"),
                                      line(f"Node {b} elected master - demoting self")])) == b
    assert master_followed("\n".join([line(f"Node {b} elected master"),
                                      line("Starting EXO | pid=1")])) is None


def _mesh(followed: dict[str, str], sees: dict[str, set[str]]) -> dict[str, NodeDiscovery]:
    return {n: NodeDiscovery(node_id=IDS[n], master=followed[n], sees={IDS[m] for m in sees[n]}) for n in followed}


def judged(mesh: dict[str, NodeDiscovery]) -> list:
    """What the exo-discovery check judges (nodes that do not see each other are exo-peers' finding)."""
    return masters(mesh) + coordinators(mesh)


def test_one_master_followed_by_all_is_fine() -> None:
    everyone = set(IDS)
    mesh = _mesh({"s1": SELF, "s2": IDS["s1"], "s3": IDS["s1"], "s4": IDS["s1"]}, dict.fromkeys(IDS, everyone))
    assert judged(mesh) == []


def test_every_node_its_own_master_is_a_split() -> None:
    mesh = _mesh(dict.fromkeys(IDS, SELF), {n: {n} for n in IDS})
    [f] = judged(mesh)
    assert f.kind == "split-master" and "4 masters" in f.message
    assert "start it on all of them together" in f.fix


def test_two_halves_that_do_not_see_each_other() -> None:
    halves = {"s1": {"s1", "s2"}, "s2": {"s1", "s2"}, "s3": {"s3", "s4"}, "s4": {"s3", "s4"}}
    mesh = _mesh({"s1": SELF, "s2": IDS["s1"], "s3": SELF, "s4": IDS["s3"]}, halves)
    [m] = judged(mesh)
    assert "s1, s2 follow s1" in m.message


def _state(coords: dict[str, str]) -> str:
    return json.dumps({"topology": {"nodes": [IDS[n] for n in coords]}, "instances": {"inst-1": {"MlxJacclInstance": {
        "instanceId": "inst-1", "jacclDevices": [], "jacclCoordinators": {IDS[n]: a for n, a in coords.items()}}}}})


def test_coordinator_addresses_from_state() -> None:
    [c] = parse_coordinators(_state({"s1": "0.0.0.0:5555", "s2": "192.168.1.11:5555"}))
    assert c.backend == "MlxJacclInstance" and c.addresses[IDS["s2"]] == ["192.168.1.11"]
    with pytest.raises(FactsParseError):
        parse_coordinators("[]")


@pytest.mark.parametrize(("given", "iface", "found"), [
    ("192.168.1.11", "en0", None),  # exo puts JACCL's coordinator on en0 on purpose (exo PR #1059)
    ("10.77.0.1", "en2", None),  # a Thunderbolt port's planned address
    ("10.99.0.1", None, "which it does not hold"),
    ("169.254.3.3", "bridge0", "on its Thunderbolt Bridge"),  # exo#2309
])
def test_rank_zero_address_must_be_one_it_holds_and_not_the_bridge(given: str, iface: str | None,
                                                                   found: str | None) -> None:
    coords = parse_coordinators(_state({"s1": "0.0.0.0:5555", "s2": f"{given}:5555"}))
    held = {"192.168.1.11": "en0", "10.77.0.1": "en2", **({given: iface} if iface else {})}
    mesh = {"s1": NodeDiscovery(IDS["s1"], SELF, {IDS["s2"]}, coords, held),
            "s2": NodeDiscovery(IDS["s2"], IDS["s1"], {IDS["s1"]}, coords, {"192.168.1.12": "en0"})}
    got = judged(mesh)
    if found is None:
        assert got == []
    else:
        [f] = got
        assert f.kind == "coordinator" and found in f.message and f.nodes == ("s2", "s1")


def test_doctor_tells_a_split_once_on_the_first_node_it_names() -> None:
    from tests.judge.test_health import IDS as H_IDS
    from tests.judge.test_health import NODES as H_NODES
    from tests.judge.test_health import exo_facts, verdict

    facts = exo_facts({"s1": ["s1"], "s2": ["s2", "s3"], "s3": ["s2", "s3"]})
    masters = {"s1": SELF, "s2": SELF, "s3": H_IDS["s2"]}
    facts = {n: facts[n].model_copy(update={"exo_master": masters[n]}) for n in H_NODES}
    [split_master] = verdict("exo-discovery", facts, "s1")  # s1 alone: the smallest group, named first
    assert "2 masters" in split_master.message and "s1 follows s1; s2, s3 follow s2" in split_master.message
    assert verdict("exo-discovery", facts, "s2") == []
    assert {(f.check, f.node) for f in verdict("exo-peers", facts, "s1")} == {("exo-peers", "s1")}
    no_state = facts["s1"].model_copy(update={"exo_state": None, "problems": {"exo-state": "exit 7"}})
    assert "exit 7" in verdict("exo-discovery", {**facts, "s1": no_state}, "s1").reason
