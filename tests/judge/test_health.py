"""doctor's checks as tables: real captures where they exist, small built facts otherwise; `now` passed in."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from macfleet.facts.exo import log_since_start, parse_exo_state, parse_http_response, parse_node_id
from macfleet.facts.rdma import parse_rdma_ctl
from macfleet.facts.system import parse_fdesetup, parse_pmset, parse_sw_vers, parse_sysctl
from macfleet.inventory.model import Fleet, Settings
from macfleet.judge.checks.catalogue import BY_CODE
from macfleet.judge.health import (
    CHECK_CODES,
    CHECKS,
    HealthContext,
    NodeFacts,
    Unknown,
    judge_health,
    select_checks,
)
from tests.judge.builders import mesh

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CAPTURES = FIXTURES / "captures"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NODES = ["s1", "s2", "s3"]


def capture(kind: str, name: str) -> str:
    return (CAPTURES / kind / name).read_text(encoding="utf-8")


SW_VERS = capture("sw-vers", "macos__sw_vers_macos26_6_2_runner_1.txt")


def ctx(facts: dict[str, NodeFacts]) -> HealthContext:
    m = mesh(*NODES)
    fleet = Fleet(root=Path("/nonexistent"), meshes=(m,), settings=Settings())
    return HealthContext(fleet=fleet, meshes=[m], facts=facts, now=NOW)


def verdict(check: str, facts: dict[str, NodeFacts], node: str = "s1"):
    return BY_CODE[check].judge(ctx(facts), node)


def all_nodes(**kw) -> dict[str, NodeFacts]:
    return {n: NodeFacts(**kw) for n in NODES}


def test_catalogue_codes_are_stable_and_each_has_a_function() -> None:
    assert CHECK_CODES == ("reachable", "macos-build", "cabling", "bridge", "ip-plan", "rdma", "power",
                           "wired-limit", "filevault", "exo-running", "exo-version", "exo-peers", "exo-rdma",
                           "exo-runners", "exo-log", "rdma-ledger", "model-placed", "inference", "exo-discovery",
                           "clock-skew", "disk", "updates", "macos-target", "auto-updates",
                           "tb-ping",
                           "exo-models-dir", "exo-networksetup", "exo-api-exposure", "llama-rpc", "links-bench")
    assert set(BY_CODE) == set(CHECK_CODES)
    for c in CHECKS:  # a check depends only on checks that run before it
        assert all(CHECK_CODES.index(d) < CHECK_CODES.index(c.code) for d in c.depends)
    assert [c.code for c in select_checks(["power"])] == ["reachable", "power"]


@pytest.mark.parametrize("reason, fix_word", [
    ("cannot connect to 10.0.0.1:22: timed out", "power cycle"),
    ("host key of 10.0.0.1 does not match known_hosts (impersonation?)", "known_hosts"),
])
def test_unreachable_is_a_finding_with_its_fix(reason: str, fix_word: str) -> None:
    facts = all_nodes()
    facts["s1"] = NodeFacts(reachable=False, unreachable_reason=reason)
    [f] = verdict("reachable", facts)
    assert f.check == "reachable" and f.node == "s1" and fix_word in f.fix


def test_same_build_everywhere_is_ok_and_the_odd_node_is_named() -> None:
    sw = parse_sw_vers(SW_VERS)  # real capture: macOS 26.6.2
    assert verdict("macos-build", all_nodes(sw_vers=sw)) == []
    odd = sw.model_copy(update={"build_version": "25C56", "product_version": "26.2"})
    facts = all_nodes(sw_vers=sw)
    facts["s2"] = NodeFacts(sw_vers=odd)
    assert verdict("macos-build", facts, "s1") == []
    [f] = verdict("macos-build", facts, "s2")
    assert "25C56" in f.message and "macos-upgrade" in f.fix


def test_macos_older_than_26_2_is_an_error() -> None:
    old = parse_sw_vers(SW_VERS).model_copy(update={"product_version": "26.1", "build_version": "25B78"})
    [f] = verdict("macos-build", all_nodes(sw_vers=old))
    assert "26.2" in f.message


def test_a_fact_not_read_is_unknown_never_ok() -> None:
    facts = all_nodes(problems={"sw-vers": "timed out after 10 s"})
    v = verdict("macos-build", facts)
    assert isinstance(v, Unknown) and "timed out" in v.reason
    for check in ("power", "wired-limit", "filevault", "exo-running", "exo-peers", "exo-log", "rdma"):
        assert isinstance(verdict(check, all_nodes()), Unknown), check


def test_pmset_of_a_real_desktop_is_judged_against_the_inventory() -> None:
    pmset = parse_pmset(capture("pmset", "macos__pmset_g_desktop_fixture_1.txt"))  # sleep 120, disksleep 10
    [f] = verdict("power", all_nodes(pmset=pmset))
    assert "sleep 120 (want 0)" in f.message and "autorestart unset (want 1)" in f.message
    good = pmset.model_copy(update={"settings": {**pmset.settings, "sleep": "0", "disksleep": "0",
                                                 "autorestart": "1"}})
    assert verdict("power", all_nodes(pmset=good)) == []


@pytest.mark.parametrize("limit, found", [("507904", False), ("0", True), ("400000", True)])
def test_wired_limit_auto_is_memory_less_the_reserve(limit: str, found: bool) -> None:
    sysctl = parse_sysctl(f"hw.memsize: 549755813888\niogpu.wired_limit_mb: {limit}\n")
    v = verdict("wired-limit", all_nodes(sysctl=sysctl))
    assert bool(v) is found


def test_filevault_on_warns_off_is_ok() -> None:
    on = parse_fdesetup(capture("fdesetup", "macos__fdesetup_status_on_1.txt"))
    off = parse_fdesetup(capture("fdesetup", "macos__fdesetup_status_off_1.txt"))
    [f] = verdict("filevault", all_nodes(fdesetup=on))
    assert f.severity == "warning" and "authrestart" in f.fix
    assert verdict("filevault", all_nodes(fdesetup=off)) == []


def test_rdma_is_rdma_status_judgement_wedge_disabled_and_enabled() -> None:
    """doctor's `rdma` check is `rdma status`'s judgement (judge/rdma) of the same facts."""
    on = parse_rdma_ctl(capture("rdma-ctl", "macos__rdma_ctl_status_enabled_1.txt"))
    wedged = NodeFacts(rdma_ctl=on, timed_out=["ibv-devinfo:verbose"],
                       problems={"ibv-devinfo:verbose": "no answer in 10 s"})
    [f] = verdict("rdma", {**all_nodes(rdma_ctl=on), "s1": wedged})
    assert "wedged" in f.message and "macfleet reboot --mesh mesh1" in f.fix and "no answer in 10 s" in f.evidence
    off = NodeFacts(rdma_ctl=parse_rdma_ctl("disabled\n"))
    [f] = verdict("rdma", {**all_nodes(rdma_ctl=on), "s1": off})
    assert "Recovery" in f.fix and f.evidence == "rdma_ctl status: disabled"
    v = verdict("rdma", all_nodes(rdma_ctl=on))  # enabled, but no ibv_devinfo read: cannot tell the ports
    assert isinstance(v, Unknown) and "ibv_devinfo -v" in v.reason and "ibv_devices" in v.reason
    v = verdict("rdma", {**all_nodes(rdma_ctl=on), "s2": off})  # s2's RDMA off is s2's finding, not s1's
    assert isinstance(v, Unknown) and "off" not in v.reason


# ---------------------------------------------------------------------------------------------- exo


def state(ids: list[str], names: dict[str, str], runners: dict | None = None, rdma: bool = True) -> str:
    conns = {a: {b: [{"sinkMultiaddr": {"address": "/ip4/10.213.0.1/tcp/52415"}}]
                 + ([{"sourceRdmaIface": "rdma_en3", "sinkRdmaIface": "rdma_en3"}] if rdma else [])
                 for b in ids if b != a} for a in ids}
    n2r = {i: f"r-{i}" for i in ids}
    return json.dumps({
        "instances": {"x": {"MlxJacclInstance": {"shardAssignments": {"nodeToRunner": n2r}}}},
        "runners": runners or {f"r-{i}": {"RunnerReady": {}} for i in ids},
        "topology": {"nodes": ids, "connections": conns},
        "nodeIdentities": {i: {"friendlyName": names[i], "osBuildVersion": "25F80"} for i in ids},
        "nodeRdmaCtl": {i: {"enabled": True} for i in ids},
    })


IDS = {"s1": "a" * 32, "s2": "b" * 32, "s3": "c" * 32}


def exo_facts(views: dict[str, list[str]], version: dict[str, str] | None = None, **state_kw) -> dict:
    out = {}
    for n in NODES:
        ids = [IDS[v] for v in views[n]]
        out[n] = NodeFacts(exo_api="up", exo_node_id=IDS[n], exo_version=(version or {}).get(n, "1.0.71"),
                           exo_state=parse_exo_state(state(ids, {IDS[k]: k for k in NODES}, **state_kw)),
                           exo_log=[])
    return out


def test_exo_http_and_node_id_parsers() -> None:
    http = parse_http_response('HTTP/1.1 200 OK\r\ndate: Wed, 02 Dec 2026 08:00:00 GMT\r\nserver: hypercorn-h11\r\n'
                               'content-type: application/json\r\ncontent-length: 5\r\n\r\n"abc"')
    assert (http.status, parse_node_id(http.body)) == (200, "abc")
    # exo's docs show an object; the code serves a bare string: both are accepted
    assert parse_node_id('{"node_id": "abc"}') == "abc"


def test_exo_peers_names_the_node_cut_off_and_only_it() -> None:
    views = {"s1": ["s1", "s2"], "s2": ["s1", "s2"], "s3": ["s3"]}
    facts = exo_facts(views)
    assert verdict("exo-peers", facts, "s1") == [] and verdict("exo-peers", facts, "s2") == []
    [f] = verdict("exo-peers", facts, "s3")
    assert "cut off" in f.message and "sees nobody" in f.message and "do(es)" not in f.message


def test_exo_version_odd_node() -> None:
    facts = exo_facts({n: NODES for n in NODES}, version={"s3": "1.0.70"})
    assert verdict("exo-version", facts, "s1") == []
    [f] = verdict("exo-version", facts, "s3")
    assert "1.0.70" in f.message


def test_exo_version_of_a_node_without_a_macfleet_release_is_could_not_tell_saying_why() -> None:
    facts = exo_facts({n: NODES for n in NODES})
    why = "no exo release installed by macfleet on this node (/opt/exo/current is not there)"
    facts["s3"] = facts["s3"].model_copy(update={"exo_version": None, "problems": {"exo-release": why}})
    got = verdict("exo-version", facts, "s3")
    assert isinstance(got, Unknown) and why in got.reason
    assert verdict("exo-version", facts, "s1") == []  # the others still agree with each other


def test_failed_runner_is_mapped_to_its_cause_and_not_repeated_by_the_log_check() -> None:
    msg = "[jaccl] Changing queue pair to RTR failed with errno 22"
    runners = {f"r-{IDS['s1']}": {"RunnerFailed": {"errorMessage": msg}},
               **{f"r-{IDS[n]}": {"RunnerReady": {}} for n in ("s2", "s3")}}
    facts = exo_facts({n: NODES for n in NODES}, runners=runners)
    [f] = verdict("exo-runners", facts, "s1")
    assert "Thunderbolt Bridge" in f.message and "topology apply" in f.fix
    assert verdict("exo-runners", facts, "s2") == []
    facts["s1"] = facts["s1"].model_copy(update={"exo_log": [f"W Runner crashed with critical exception {msg}"]})
    assert verdict("exo-log", facts, "s1") == []  # the runner finding already says it (and exo-log depends on it)


def test_log_since_last_start_only() -> None:
    text = "x Changing queue pair to RTR failed with errno 22\nStarting EXO version 1\nall good\n"
    assert log_since_start(text) == ["Starting EXO version 1", "all good"]
    recovered = "Starting EXO\nCouldn't allocate protection domain\nrunner ready\nok\n"
    assert log_since_start(recovered) == ["runner ready", "ok"]


# ------------------------------------------------------------------------------------------ the whole pass


def test_unreachable_node_leaves_its_other_checks_unknown_and_the_rest_judged() -> None:
    facts = all_nodes()
    facts["s3"] = NodeFacts(reachable=False, unreachable_reason="cannot connect")
    c = ctx(facts)
    report = judge_health(c.fleet, c.meshes, facts, NOW, only=["reachable", "filevault"])
    by = {(r.check, r.node): r for r in report.checks}
    assert by[("reachable", "s3")].result == "finding"
    assert by[("filevault", "s3")].result == "unknown" and "reachable" in by[("filevault", "s3")].reason
    assert by[("filevault", "s1")].result == "unknown"  # no fdesetup read: could not tell, not ok
    assert report.summary.unreachable == ["s3"] and not report.summary.healthy
    payload = report.json_payload()
    assert set(payload) == {"findings", "checks", "summary"}
    assert set(payload["findings"][0]) == {"node", "check", "severity", "message", "fix", "evidence"}
    assert set(payload["checks"][0]) == {"check", "node", "result"}



def test_every_check_of_an_unreachable_node_is_unknown() -> None:
    """Even the checks read from the controller's files (links-bench): a node that does not answer is not
    judged, and never gets a clean verdict."""
    facts = all_nodes()
    facts["s3"] = NodeFacts(reachable=False, unreachable_reason="cannot connect")
    c = ctx(facts)
    report = judge_health(c.fleet, c.meshes, facts, NOW)
    assert {r.result for r in report.checks if r.node == "s3" and r.check != "reachable"} == {"unknown"}

def test_exo_peers_says_every_peer_sees_it_when_only_its_own_view_is_short() -> None:
    views = {"s1": ["s1", "s2", "s3"], "s2": ["s1", "s2", "s3"], "s3": ["s3"]}
    [f] = verdict("exo-peers", exo_facts(views), "s3")
    assert f.message.endswith("it sees nobody; every peer sees it")


def test_exo_version_of_a_hung_node_with_another_release_is_judged_not_a_crash() -> None:
    """Its API gives no answer (exo_api None: could not tell) yet its release is read from disk: the pass goes
    on, the hung node's exo-running is could-not-tell and its other release is named."""
    facts = exo_facts({n: NODES for n in NODES})
    facts["s3"] = facts["s3"].model_copy(update={"exo_api": None, "exo_version": "1.0.70",
                                                 "problems": {"exo": "timed out after 10 s"}})
    c = ctx(facts)
    report = judge_health(c.fleet, c.meshes, facts, NOW, only=["exo-running", "exo-version"])
    by = {(r.check, r.node): r.result for r in report.checks}
    assert by[("exo-running", "s3")] == "unknown" and by[("exo-version", "s3")] == "finding"
    assert by[("exo-version", "s1")] == "ok" and by[("exo-version", "s2")] == "ok"
    [f] = report.findings
    assert "1.0.70" in f.message and "s1 1.0.71" in f.evidence


def test_exo_version_with_no_other_node_answering_is_could_not_tell() -> None:
    """No exo answers (a hung mesh): each node's release is read, but nobody's running exo to compare with."""
    facts = exo_facts({n: NODES for n in NODES})
    for n in NODES:
        facts[n] = facts[n].model_copy(update={"exo_api": None, "problems": {"exo": "timed out after 10 s"}})
    c = ctx(facts)
    report = judge_health(c.fleet, c.meshes, facts, NOW, only=["exo-running", "exo-version"])
    got = verdict("exo-version", facts, "s1")
    assert isinstance(got, Unknown) and "no other node's exo version" in got.reason
    assert {r.result for r in report.checks if r.check != "reachable"} == {"unknown"} and not report.findings


def test_odd_one_out_is_one_majority_vote() -> None:
    from macfleet.judge.checks.base import odd_one_out

    assert odd_one_out({"a": "1", "b": "1", "c": "2"}, "a", "v") == []
    assert odd_one_out({"a": "1", "b": "1", "c": "2"}, "c", "v") == ["1"]
    assert odd_one_out({"a": "1", "b": "2"}, "a", "v") == ["2"]  # a tie: each stands apart
    assert odd_one_out({"a": "1", "b": None, "c": "1"}, "a", "v") == []
    assert odd_one_out({"a": "1"}, "a", "v") == []  # alone: nothing to differ from
    assert isinstance(odd_one_out({"a": "1", "b": None}, "a", "v"), Unknown)
