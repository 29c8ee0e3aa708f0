"""doctor's clock-skew, disk, updates, exo-api-exposure and tb-ping checks, and ip-plan naming another tool's
addresses and routes, as tables on small facts (the probe outputs of tests/fixtures/probes)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from macfleet.facts.disk import parse_df
from macfleet.facts.network import parse_hardware_ports
from macfleet.facts.probes import PingFacts, parse_pf_info, parse_pf_rules, parse_softwareupdate_list
from macfleet.inventory.model import Fleet, Settings
from macfleet.judge.checks.catalogue import BY_CODE
from macfleet.judge.health import (
    ClockReading,
    HealthContext,
    NodeFacts,
    Unknown,
    ping_targets,
)
from macfleet.judge.pf import exposure
from macfleet.judge.topology import check_cabling
from tests.judge.builders import Rig, healthy, mesh

PROBES = Path(__file__).resolve().parent.parent / "fixtures" / "probes"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NODES = ["s1", "s2", "s3"]
PORTS = parse_hardware_ports(Rig(NODES).hardware_ports_text())


def text(name: str) -> str:
    return (PROBES / name).read_text(encoding="utf-8")


def ctx(facts: dict[str, NodeFacts], rig: Rig | None = None) -> HealthContext:
    m = mesh(*NODES)
    fleet = Fleet(root=Path("/nonexistent"), meshes=(m,), settings=Settings())
    c = HealthContext(fleet=fleet, meshes=[m], facts=facts, now=NOW)
    c.cabling[m.name] = check_cabling(m, (rig or healthy(NODES)).facts(), {})
    return c


def verdict(check: str, node_facts: NodeFacts, others: NodeFacts | None = None, node: str = "s1"):
    facts = {n: (node_facts if n == node else others or NodeFacts()) for n in NODES}
    return BY_CODE[check].judge(ctx(facts), node)


@pytest.mark.parametrize(("node_s", "at", "rtt", "found"), [
    (1000, 1000.2, 0.05, False),  # same second
    (1003, 1000.0, 0.05, False),  # 3 s, within 2 s + date's second + half the round trip
    (1004, 1000.0, 0.05, True),
    (996, 1000.0, 0.05, True),  # behind
    (996, 1000.0, 2.5, False),  # a slow round trip widens what cannot be told apart
])
def test_clock_skew_beyond_the_setting_and_the_round_trip(node_s: int, at: float, rtt: float, found: bool) -> None:
    f = NodeFacts(clock=ClockReading(node_epoch_s=node_s, controller_at_s=at, round_trip_s=rtt))
    out = verdict("clock-skew", f)
    assert bool(out) is found
    if found:
        assert out[0].severity == "warning" and "network time" in out[0].fix
        assert ("behind" if node_s < at else "ahead of") in out[0].message


def test_disk_below_the_setting_warns_nearly_full_is_an_error() -> None:
    roomy = parse_df(text("df_k_models.txt"))  # ~83.8 GB free
    assert verdict("disk", NodeFacts(df=roomy)) == []
    low = roomy.model_copy(update={"available_kb": 10_000_000})  # 10.2 GB
    [warn] = verdict("disk", NodeFacts(df=low))
    assert warn.severity == "warning" and "min_free_disk_gb" in warn.message and "~/.exo/models" in warn.fix
    [full] = verdict("disk", NodeFacts(df=roomy.model_copy(update={"available_kb": 102_400})))
    assert full.severity == "error"


def test_updates_pending_point_to_the_macos_upgrade_runbook() -> None:
    assert verdict("updates", NodeFacts(updates=parse_softwareupdate_list(text("softwareupdate_none.txt")))) == []
    [w] = verdict("updates", NodeFacts(updates=parse_softwareupdate_list(text("softwareupdate_macos_pending.txt"))))
    assert w.severity == "warning" and "docs/runbooks/macos-upgrade.md" in w.fix
    assert "macOS Tahoe 26.2-25C56" in w.message and "Safari26.2-26.2" in w.evidence


@pytest.mark.parametrize("check", ["clock-skew", "disk", "updates", "exo-api-exposure", "tb-ping"])
def test_a_probe_not_answered_is_unknown_with_its_reason(check: str) -> None:
    why = {"date": "`date -u +%s` gave no answer within 5 s", "df": "exit 1: df: no such file",
           "softwareupdate": "`softwareupdate --list` gave no answer within 45 s", "pf-info": "exit 1: sudo: a "
           "password is required", "tb-ping:10.213.0.2": "`ping` gave no answer within 5 s",
           "tb-ping:10.213.0.6": "`ping` gave no answer within 5 s"}
    out = verdict(check, NodeFacts(problems=why, hardware_ports=PORTS))
    assert isinstance(out, Unknown) and out.reason


def pf(rules: str, info: str = "Status: Enabled for 0 days 00:00:46         Debug: Urgent\n") -> NodeFacts:
    return NodeFacts(pf_info=parse_pf_info(info), pf_rules=parse_pf_rules(rules), hardware_ports=PORTS)


def test_exo_api_closed_by_the_bootstrap_anchor_is_ok() -> None:
    assert verdict("exo-api-exposure", pf(text("pf_rules_macfleet.txt"))) == []


@pytest.mark.parametrize(("rules", "info", "why"), [
    ("", None, "no rule blocking"),  # anchor not loaded
    (None, "Status: Disabled                              Debug: Urgent\n", "pf is off"),
    ("pass in quick proto tcp from any to any port = 52415 flags S/SA keep state\n"
     "block drop in quick proto tcp to any port = 52415\n", None, "from anywhere"),
    ("pass in quick on en0 proto tcp to any port = 52415 flags S/SA keep state\n"
     "block drop in quick proto tcp to any port = 52415\n", None, "on en0, not a Thunderbolt port"),
    ("block drop in quick proto tcp to any port = 52414\n", None, "no rule blocking tcp 52415"),
])
def test_exo_api_open_to_the_lan_is_a_warning(rules: str | None, info: str | None, why: str) -> None:
    facts = pf(rules if rules is not None else text("pf_rules_macfleet.txt"), *([info] if info else []))
    [w] = verdict("exo-api-exposure", facts)
    assert w.severity == "warning" and why in w.message and "macfleet bootstrap" in w.fix


def test_exposure_reads_quick_rules_first_match() -> None:
    rules = parse_pf_rules("block drop in quick proto tcp to any port = 52415\n"
                           "pass in quick proto tcp from any to any port = 52415\n")
    assert exposure(rules, 52415, {"lo0"}) is None


def pings(received: dict[str, int]) -> dict[str, PingFacts]:
    return {a: PingFacts(transmitted=1, received=r) for a, r in received.items()}


def test_tb_ping_each_link_from_each_end() -> None:
    c = ctx({})
    assert ping_targets(c.fleet, "mesh1", "s1") == {"10.213.0.2": "s2", "10.213.0.6": "s3"}
    good = NodeFacts(pings=pings({"10.213.0.2": 1, "10.213.0.6": 1}))
    assert verdict("tb-ping", good) == []
    [f] = verdict("tb-ping", NodeFacts(pings=pings({"10.213.0.2": 1, "10.213.0.6": 0})))
    assert f.severity == "error" and "s3 at 10.213.0.6" in f.message and "0 received" in f.evidence


def test_tb_ping_skips_a_peer_whose_own_cable_or_address_is_the_finding() -> None:
    facts = {n: NodeFacts(pings=pings({"10.213.0.2": 0, "10.213.0.6": 1})) for n in NODES}
    c = ctx(facts)
    c.found[("ip-plan", "s2")] = True
    assert BY_CODE["tb-ping"].judge(c, "s1") == []
    unplugged = Rig(NODES).cable("s1", 3, "s3", 2).cable("s2", 4, "s3", 3)  # no s1-s2 cable
    c = ctx(facts, unplugged)
    assert BY_CODE["tb-ping"].judge(c, "s1") == []


def test_ip_plan_names_another_tools_addresses_and_routes() -> None:
    from macfleet.facts.network import parse_ifconfig, parse_netstat_routes, parse_service_order
    from macfleet.judge.checks.network import _foreign_note, _foreign_routes

    routes = parse_netstat_routes(
        "Routing tables\n\nInternet:\nDestination        Gateway            Flags               Netif Expire\n"
        "192.168.200.0/24   link#3             UCS                   en3\n"
        "192.168.201.0/30   link#3             UCS                   en3\n"
        "10.213.0.0/30      link#3             UCS                   en3\n")
    c = ctx({})
    found = _foreign_routes(c, NodeFacts(netstat_routes=routes), {"en3"}, ["192.168.201.1/30"])
    assert found == ["192.168.200.0/24 on en3"]
    note = _foreign_note(["192.168.201.1/30"], found)
    assert "192.168.201.1/30 and the route to 192.168.200.0/24 on en3 are not the plan's" in note
    assert "next reboot" in note and "plan's address returns" in note
    assert "self-assigned" in _foreign_note(["169.254.3.4/16"], [])
    assert parse_ifconfig and parse_service_order  # the same parsers the flow uses


# llama.cpp's rpc-server: its port in the anchor, on the Thunderbolt interfaces only (hostile.md row 11)

RPC_IN_ANCHOR = ("pass in quick on lo0 proto tcp to any port = 50052 flags S/SA keep state\n"
                 "pass in quick on en3 proto tcp to any port = 50052 flags S/SA keep state\n"
                 "block drop in quick proto tcp to any port = 50052\n")


@pytest.mark.parametrize(("rules", "info", "why"), [
    (RPC_IN_ANCHOR, None, None),
    ("", None, "no rule blocking tcp 50052"),  # the anchor of exo's ports only (before this round)
    ("pass in quick proto tcp from <macfleet_exo_peers> to any port = 50052 flags S/SA keep state\n"
     "block drop in quick proto tcp to any port = 50052\n", None, "from <macfleet_exo_peers> on any interface"),
    ("pass in quick on en0 proto tcp to any port = 50052 flags S/SA keep state\n"
     "block drop in quick proto tcp to any port = 50052\n", None, "on en0, not a Thunderbolt port"),
    (RPC_IN_ANCHOR, "Status: Disabled                              Debug: Urgent\n", "pf is off"),
])
def test_rpc_server_port_is_judged_against_the_anchor(rules: str, info: str | None, why: str | None) -> None:
    from macfleet.judge.checks.network import pf_exposure

    facts = pf(text("pf_rules_macfleet.txt") + rules, *([info] if info else []))
    got = pf_exposure(facts, 50052, sources_ok=False)
    assert got is None if why is None else why in got
    assert isinstance(pf_exposure(NodeFacts(problems={"pf-info": "exit 1"}), 50052, sources_ok=False), Unknown)


def test_the_anchor_bootstrap_writes_closes_every_port_it_lists() -> None:
    """The pf role's template, loaded by the lab's pfctl and listed back, judged as doctor judges a node: exo's
    API from the mesh and the controller, rpc-server's port on the Thunderbolt interfaces only."""
    from macfleet.judge.checks.network import pf_exposure
    from macfleet.lab.macos.pf import _listing, parse
    from tests.test_bootstrap_playbook import render

    anchor = render("pf", "macfleet.pf.j2", pf_sources=["10.213.0.0/16", "198.18.1.1"], pf_interfaces=["en3", "en4"])
    facts = pf(_listing(parse(anchor, "macfleet")))
    assert pf_exposure(facts, 52415, sources_ok=True) is None
    assert pf_exposure(facts, 50052, sources_ok=False) is None
    assert "no rule blocking tcp 50053" in pf_exposure(facts, 50053, sources_ok=False)
