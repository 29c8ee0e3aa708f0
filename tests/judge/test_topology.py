"""Cabling judgement, table style: a rig in, findings with their fixes out."""

from __future__ import annotations

import pytest

from macfleet.facts.network import parse_hardware_ports
from macfleet.facts.thunderbolt import parse_thunderbolt
from macfleet.inventory.model import MAC_MODELS
from macfleet.judge.topology import NodeTopologyFacts, check_cabling, judge_exit_code, plan_cabling
from tests.conftest import capture
from tests.judge.builders import STUDIO, Rig, healthy, mesh

NAMES = ["studio-1", "studio-2", "studio-3", "studio-4"]


def codes(report) -> list[str]:
    return [f.code for f in report.findings]


def test_healthy_mesh_has_no_finding() -> None:
    report = check_cabling(mesh(*NAMES), healthy(NAMES).facts())
    assert report.findings == []
    assert len(report.links) == 6
    assert judge_exit_code(report) == 0
    first = report.links[0]
    assert (first.a.node, first.a.receptacle, first.a.device) == ("studio-1", 2, "en3")
    assert (first.b.node, first.b.receptacle, first.b.device) == ("studio-2", 2, "en3")
    assert first.speed_gbps == 80
    assert report.json_payload()["links"][0] == {
        "a": {"node": "studio-1", "receptacle": 2, "device": "en3"},
        "b": {"node": "studio-2", "receptacle": 2, "device": "en3"},
        "speed_gbps": 80.0,
    }


def test_unplugged_pair_gets_a_fix_on_free_rdma_ports() -> None:
    rig = Rig(list(NAMES))
    for (a, ra, b, rb) in [("studio-1", 2, "studio-2", 2), ("studio-1", 3, "studio-3", 2),
                           ("studio-2", 3, "studio-3", 3), ("studio-2", 4, "studio-4", 3),
                           ("studio-3", 4, "studio-4", 4)]:
        rig.cable(a, ra, b, rb)
    report = check_cabling(mesh(*NAMES), rig.facts())
    assert codes(report) == ["missing-pair"]
    f = report.findings[0]
    assert f.nodes == ["studio-1", "studio-4"]
    # the plan's ports are free: studio-1's 3rd other Mac on its 3rd RDMA port (4), studio-4's 1st on 2
    assert f.fix == "plug a Thunderbolt 5 cable from studio-1 port 4 into studio-4 port 2"
    assert judge_exit_code(report) == 1


def test_missing_pair_fix_avoids_taken_ports_and_port_next_to_ethernet() -> None:
    rig = Rig(["a", "b", "c"])
    rig.cable("a", 2, "b", 2).cable("a", 3, "b", 6)  # a's ports 2 and 3 both go to b (doubled)
    rig.cable("b", 3, "c", 3)
    report = check_cabling(mesh("a", "b", "c"), rig.facts())
    missing = next(f for f in report.findings if f.code == "missing-pair")
    assert missing.nodes == ["a", "c"]
    # a's planned port for c (3) is taken by the doubled cable; next free RDMA port is 4 (never 1)
    assert missing.fix == "plug a Thunderbolt 5 cable from a port 4 into c port 2"


def test_slow_link() -> None:
    rig = healthy(NAMES[:2])
    rig.speeds[("studio-1", 2)] = rig.speeds[("studio-2", 2)] = "40 Gb/s"
    report = check_cabling(mesh(*NAMES[:2]), rig.facts())
    assert codes(report) == ["slow-link"]
    assert report.findings[0].fix == (
        "replace the cable between studio-1 port 2 and studio-2 port 2 with an 80 Gb/s Thunderbolt 5 cable")
    assert report.links[0].state == "slow"


def test_wrong_port_next_to_ethernet() -> None:
    rig = Rig(["s1", "s2", "s3"]).cable("s1", 1, "s2", 2).cable("s1", 3, "s3", 2).cable("s2", 3, "s3", 3)
    report = check_cabling(mesh("s1", "s2", "s3"), rig.facts())
    assert codes(report) == ["wrong-port"]
    f = report.findings[0]
    assert "port 1 (rear, next to Ethernet) cannot do RDMA" in f.message
    assert f.fix == "move the s1 end from port 1 to port 2"


def test_doubled_pair_keeps_the_good_cable() -> None:
    rig = Rig(["s1", "s2"]).cable("s1", 1, "s2", 3).cable("s1", 2, "s2", 2)
    report = check_cabling(mesh("s1", "s2"), rig.facts())
    assert codes(report) == ["doubled-pair"]
    assert report.findings[0].fix == "unplug the cable between s1 port 1 and s2 port 3"


def test_hub_in_path() -> None:
    rig = Rig(["s1", "s2"]).hub("s1", 2, "s2", 2)
    report = check_cabling(mesh("s1", "s2"), rig.facts())
    assert codes(report) == ["hub-in-path"]
    assert "TS5 Plus" in report.findings[0].message
    assert report.findings[0].fix.startswith("take out TS5 Plus and plug a Thunderbolt 5 cable from s1 port 2")


def test_unknown_mac_and_one_sided() -> None:
    rig = Rig(["s1", "s2"]).cable("s1", 2, "s2", 2).stranger("s2", 4)
    report = check_cabling(mesh("s1", "s2"), rig.facts())
    assert codes(report) == ["unknown-mac"]
    assert report.findings[0].fix.startswith("unplug the cable from s2 port 4")

    rig = Rig(["s1", "s2"]).one_way("s1", 2, "s2", 2)
    report = check_cabling(mesh("s1", "s2"), rig.facts())
    assert codes(report) == ["one-sided"]
    assert report.links == []


def test_unreachable_node_the_rest_still_judged() -> None:
    rig = healthy(NAMES)
    del rig.items[("studio-2", 3)]  # studio-2 ↔ studio-3 unplugged
    del rig.items[("studio-3", 3)]
    report = check_cabling(mesh(*NAMES), rig.facts(skip=("studio-4",)), {"studio-4": "connection refused"})
    assert sorted(codes(report)) == ["missing-pair", "unreachable"]
    assert judge_exit_code(report) == 3
    assert all("studio-4" not in f.nodes for f in report.findings if f.code == "missing-pair")


def test_unknown_peer_is_not_called_a_stranger_while_a_node_is_unreachable() -> None:
    rig = healthy(NAMES[:3])
    report = check_cabling(mesh(*NAMES[:3]), rig.facts(skip=("studio-3",)), {"studio-3": "timed out"})
    assert codes(report) == ["unreachable"]
    assert {h.seen_from.node for h in report.half_links} == {"studio-1", "studio-2"}


def test_failed_command_is_a_finding_not_a_crash() -> None:
    facts = healthy(NAMES[:2]).facts()
    facts["studio-2"] = NodeTopologyFacts(problems=["thunderbolt: timed out after 30 s"])
    report = check_cabling(mesh(*NAMES[:2]), facts)
    assert codes(report) == ["no-facts"]
    assert "timed out" in report.findings[0].message


# --------------------------------------------------------------------------------- real captures


def _sample(name: str) -> str:
    return capture(name)


def test_real_pair_of_m5_max_macbooks_is_one_80_gbps_cable() -> None:
    """The anonymised real pair: bus_1/receptacle 2 on both ends; the local one also has a Sabrent dock."""
    local = parse_thunderbolt(_sample("macos__sp_thunderbolt_json_mbp_m5max_pair_local_anon_1.json"))
    peer = parse_thunderbolt(_sample("macos__sp_thunderbolt_json_mbp_m5max_pair_peer_anon_1.json"))
    hw = parse_hardware_ports(_sample("macos__networksetup_listallhardwareports_mbp_m4max_trimmed_1.txt"))
    m = mesh("mbp-a", "mbp-b", model=None)
    report = check_cabling(m, {"mbp-a": NodeTopologyFacts(thunderbolt=local, hardware_ports=hw),
                               "mbp-b": NodeTopologyFacts(thunderbolt=peer)})
    assert len(report.links) == 1
    lk = report.links[0]
    assert (lk.a.node, lk.a.receptacle, lk.b.node, lk.b.receptacle, lk.speed_gbps) == ("mbp-a", 2, "mbp-b", 2, 80)
    assert lk.a.device is not None and lk.b.device is None  # enX only where -listallhardwareports was given
    assert report.findings == []  # docks and SSDs on other ports are not cabling problems


def test_real_mini_sees_a_macbook_that_is_not_in_the_mesh_at_40_gbps() -> None:
    mini = parse_thunderbolt(_sample("macos__sp_thunderbolt_json_macmini_m4pro_2_peer_mbp.json"))
    report = check_cabling(mesh("mini", model="Mac16,11"), {"mini": NodeTopologyFacts(thunderbolt=mini)})
    assert codes(report) == ["unknown-mac"]
    assert "Mac17,6" in report.findings[0].message


# -------------------------------------------------------------------------------------- planning


def test_plan_four_studios_uses_rdma_ports_only_and_each_once() -> None:
    plan = plan_cabling([(n, STUDIO) for n in NAMES])
    assert plan.feasible and len(plan.cables) == 6
    used: dict[str, list[int]] = {}
    for c in plan.cables:
        for e in (c.a, c.b):
            used.setdefault(e.node, []).append(e.receptacle)
    for ports in used.values():
        assert sorted(ports) == [2, 3, 4]
    c0 = plan.cables[0]
    assert (c0.a.node, c0.a.receptacle, c0.b.node, c0.b.receptacle) == ("studio-1", 2, "studio-2", 2)
    assert c0.a.where == "rear, second from Ethernet"


def test_plan_is_stable_when_a_mac_is_appended() -> None:
    four = plan_cabling([(n, STUDIO) for n in NAMES])
    five = plan_cabling([(n, STUDIO) for n in [*NAMES, "studio-5"]])
    assert five.cables[: len(four.cables)] == four.cables


@pytest.mark.parametrize(("model", "n", "ok"), [
    ("mac-studio-m3-ultra", 6, True), ("mac-studio-m3-ultra", 7, False),
    ("mac-studio-m4-max", 4, True), ("mac-studio-m4-max", 5, False),
    ("mac-mini-m4-pro", 4, True), ("mac-mini-m4-pro", 5, False),
])
def test_plan_says_when_the_model_has_too_few_ports(model: str, n: int, ok: bool) -> None:
    spec = MAC_MODELS[model]
    plan = plan_cabling([(f"m{i}", spec) for i in range(n)])
    assert plan.feasible is ok
    if not ok:
        assert plan.cables == []
        assert f"at most {spec.max_full_mesh_nodes}" in plan.problems[0]


def test_check_of_a_planned_rig_is_clean_for_every_size() -> None:
    for n in range(2, 7):
        names = [f"s{i}" for i in range(n)]
        plan = plan_cabling([(x, STUDIO) for x in names])
        rig = Rig(names)
        for c in plan.cables:
            rig.cable(c.a.node, c.a.receptacle, c.b.node, c.b.receptacle)
        assert check_cabling(mesh(*names), rig.facts()).findings == []


def test_watch_events_say_what_changed() -> None:
    from macfleet.judge.topology import diff_reports
    from macfleet.render.topology import event_words, missing_words

    def words(events):
        return [event_words(e) for e in events]

    m = mesh(*NAMES[:3])
    empty = check_cabling(m, Rig(NAMES[:3]).facts())
    assert missing_words(empty) == ["studio-1 port 2 ↔ studio-2 port 2", "studio-1 port 3 ↔ studio-3 port 2",
                                    "studio-2 port 3 ↔ studio-3 port 3"]
    one = Rig(NAMES[:3]).cable("studio-1", 2, "studio-2", 2)
    r1 = check_cabling(m, one.facts())
    assert words(diff_reports(empty, r1)) == [
        ("+", "studio-1 port 2 ↔ studio-2 port 2, 80 Gb/s")]
    slow = Rig(NAMES[:3]).cable("studio-1", 2, "studio-2", 2).cable("studio-1", 3, "studio-3", 2, speed="40 Gb/s")
    r2 = check_cabling(m, slow.facts())
    ev = words(diff_reports(r1, r2))
    assert ev[0] == ("+", "studio-1 port 3 ↔ studio-3 port 2, 40 Gb/s")
    assert ev[1][0] == "!" and ev[1][1].startswith("40 Gb/s studio-1 port 3 ↔ studio-3 port 2: replace the cable")
    assert words(diff_reports(r2, r1)) == [("-", "studio-1 port 3 ↔ studio-3 port 2")]


# ------------------------------------------------------------------- rules no other test reached


def test_ends_that_report_different_speeds_disagree() -> None:
    rig = healthy(["s1", "s2"])
    rig.speeds[("s1", 2)] = "120 Gb/s"  # both fast enough, but not the same: a badly seated cable
    report = check_cabling(mesh("s1", "s2"), rig.facts())
    assert codes(report) == ["ends-disagree"]
    f = report.findings[0]
    assert f.severity == "warning" and "(120 Gb/s and 80 Gb/s)" in f.message
    assert f.fix == "reseat the cable between s1 port 2 and s2 port 2, then run the check again"
    assert report.links[0].state == "disagree" and judge_exit_code(report) == 1


def test_a_hub_hiding_one_side_is_a_hub_in_path_half_link() -> None:
    rig = Rig(["s1", "s2"]).hub("s1", 2, "s2", 2)
    rig.items[("s2", 2)] = []  # s2's port is connected, but the dock hides s1 from it
    report = check_cabling(mesh("s1", "s2"), rig.facts())
    assert codes(report) == ["hub-in-path"] and report.links == []
    f = report.findings[0]
    assert f.message == "s1 port 2 reaches s2 port 2 through TS5 Plus; RDMA needs a direct Mac-to-Mac cable"
    assert f.fix == "take out TS5 Plus and plug a Thunderbolt 5 cable from s1 port 2 into s2 port 2"
    (half,) = report.half_links
    assert (half.seen_from.node, half.far.node, half.via) == ("s1", "s2", ["TS5 Plus"])


def test_fixes_pick_ports_in_rule_order_and_say_when_none_is_free() -> None:
    """s1's only free RDMA-capable port (3) goes to the wrong-port move, which is judged first; the missing
    pair s1-s3 then has none left on s1, and its fix says to free one."""
    rig = Rig(["s1", "s2", "s3"]).cable("s1", 1, "s2", 2).cable("s2", 3, "s3", 3)
    for r in (2, 4, 5, 6):
        rig.stranger("s1", r)
    report = check_cabling(mesh("s1", "s2", "s3"), rig.facts())
    by_code = {f.code: f for f in report.findings}
    assert by_code["wrong-port"].fix == "move the s1 end from port 1 to port 3"
    assert by_code["missing-pair"].fix == (
        "free an RDMA-capable port on s1 (every one is in use), then plug a Thunderbolt 5 cable from "
        "s1 a free RDMA-capable port into s3 port 2")
    (gap,) = report.missing
    assert (gap.a, gap.a_receptacle, gap.b, gap.b_receptacle) == ("s1", None, "s3", 2)


@pytest.mark.parametrize("problems", [[], ["thunderbolt: channel closed"], ["thunderbolt: no output was collected"]])
def test_no_node_read_is_never_a_clean_verdict(problems: list[str]) -> None:
    facts = {n: NodeTopologyFacts(problems=problems) for n in NAMES[:3]}
    report = check_cabling(mesh(*NAMES[:3]), facts)
    assert codes(report) == ["no-facts"] * 3 and not report.clean and report.missing == []
    assert judge_exit_code(report) == 1
    nothing = check_cabling(mesh(*NAMES[:3]), {})
    assert codes(nothing) == ["no-facts"] * 3


def test_an_unanswered_command_is_a_recorded_problem() -> None:
    from macfleet.facts.registry import facts_from_outputs

    facts, problems = facts_from_outputs({}, {"ifconfig": "channel refused"}, ["thunderbolt", "ifconfig"])
    assert facts == {"thunderbolt": None, "ifconfig": None}
    assert problems == ["thunderbolt: no output was collected", "ifconfig: channel refused"]


def test_link_observations_are_judged_with_a_severity_and_a_fix() -> None:
    from macfleet.facts.links import LinkObservation, LinksResult
    from macfleet.judge.links import judge_links

    seen = LinkObservation(code="one_sided", nodes=["a", "b"], message="a receptacle 2 sees b receptacle 2, but ...")
    report = judge_links(LinksResult(links=[], observations=[seen]))
    assert report.model_dump()["findings"] == [{
        "severity": "warning", "code": "one_sided", "nodes": ["a", "b"], "message": seen.message,
        "fix": "a hub or dock between them, or captures from different passes; cable the two Macs directly and "
               "collect again"}]


def test_a_mac_without_a_domain_uuid_is_never_silently_dropped() -> None:
    """The cable match describes it (`peer_unidentified`); the check judges it an unknown Mac."""
    from macfleet.facts.links import match_links

    rig = Rig(["s1", "s2"]).cable("s1", 2, "s2", 2).stranger("s2", 4)
    del rig.items[("s2", 4)][0]["domain_uuid_key"]
    facts = rig.facts()
    matched = match_links({n: f.thunderbolt for n, f in facts.items()})
    assert [(o.code, o.node, o.receptacle, o.peer) for o in matched.observations] == [
        ("peer_unidentified", "s2", 4, "Mac15,14")]
    report = check_cabling(mesh("s1", "s2"), facts)
    assert codes(report) == ["unknown-mac"]
    assert report.findings[0].message.startswith("s2 port 4 is cabled to a Mac (Mac15,14)")
