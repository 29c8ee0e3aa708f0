"""`bench links` on plain data: the schedule, the parsers on real captures, a link's result, the baseline."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from macfleet.errors import FactsParseError
from macfleet.facts.bench import parse_iperf3_json, parse_ping
from macfleet.judge.links_bench import (
    Baselines,
    BenchLink,
    LinkResult,
    baseline_findings,
    baseline_of,
    below_baseline,
    bench_exit_code,
    link_result,
    schedule_rounds,
)

CAPTURES = Path(__file__).resolve().parent.parent / "fixtures" / "bench-captures"


def cap(name: str) -> str:
    return next(CAPTURES.glob(f"*/{name}")).read_text(encoding="utf-8")


def _check_schedule(pairs, rounds) -> None:
    placed = [p for r in rounds for p in r]
    assert sorted(placed) == sorted(pairs)  # every link exactly once
    for r in rounds:
        nodes = [n for p in r for n in p]
        assert len(nodes) == len(set(nodes)), r  # no Mac twice in a round


@pytest.mark.parametrize("n", range(2, 8))
def test_full_mesh_takes_the_fewest_rounds(n: int) -> None:
    nodes = [f"studio-{i + 1}" for i in range(n)]
    pairs = list(itertools.combinations(nodes, 2))
    rounds = schedule_rounds(pairs)
    _check_schedule(pairs, rounds)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)  # 4 Macs: 3 rounds, not 6


@given(st.sets(st.tuples(st.integers(0, 6), st.integers(0, 6)).filter(lambda p: p[0] < p[1]), max_size=21),
       st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)).filter(lambda p: p[0] < p[1]), max_size=3))
def test_any_set_of_links_is_scheduled_disjointly(pairs: set, doubled: list) -> None:
    links = sorted(pairs) + doubled  # a second cable between two Macs is a link of its own
    rounds = schedule_rounds(links)
    _check_schedule(links, rounds)


def test_iperf3_bidir_capture_gives_each_direction_as_received() -> None:
    r = parse_iperf3_json(cap("debian-iperf3-3.12_bidir_json_loopback.json"))
    assert r.version == "iperf 3.12" and r.error is None
    assert r.forward_bps == pytest.approx(3194562228.3497686)
    assert r.reverse_bps == pytest.approx(2481936969.357075)
    refused = parse_iperf3_json(cap("debian-iperf3-3.12_json_connection_refused.json"))
    assert refused.error == "unable to connect to server: Connection refused"
    assert refused.forward_bps is None and refused.reverse_bps is None
    with pytest.raises(FactsParseError):
        parse_iperf3_json("iperf3: error - unable to connect to server\n")


@pytest.mark.parametrize(("name", "avg"), [("freebsd-journal_ping_bsd_summary.txt", 0.602),
                                           ("debian-iputils_ping_-c3_loopback.txt", 0.096)])
def test_ping_summary_of_bsd_and_linux(name: str, avg: float) -> None:
    p = parse_ping(cap(name))
    assert (p.transmitted, p.received, p.avg_ms) == (3, 3, avg)


def test_ping_without_reply_has_no_latency_and_garbage_is_refused() -> None:
    p = parse_ping("PING 10.213.0.2 (10.213.0.2): 56 data bytes\n\n--- 10.213.0.2 ping statistics ---\n"
                   "3 packets transmitted, 0 packets received, 100.0% packet loss\n")
    assert p.received == 0 and p.avg_ms is None
    with pytest.raises(FactsParseError):
        parse_ping("ping: sendto: No route to host\n")


LINK = BenchLink(a="studio-1", b="studio-2", a_port="en3", b_port="en3", a_address="10.213.0.1",
                 b_address="10.213.0.2")


def test_a_link_result_says_why_a_figure_is_missing() -> None:
    ok = link_result(LINK, parse_iperf3_json(cap("debian-iperf3-3.12_bidir_json_loopback.json")),
                     parse_ping(cap("freebsd-journal_ping_bsd_summary.txt")))
    assert (round(ok.a_to_b_gbps, 2), round(ok.b_to_a_gbps, 2), ok.rtt_ms, ok.problems) == (3.19, 2.48, 0.602, [])
    bad = link_result(LINK, parse_iperf3_json(cap("debian-iperf3-3.12_json_connection_refused.json")), None,
                      ["ping: timed out"])
    assert bad.a_to_b_gbps is None and bad.rtt_ms is None
    assert bad.problems == ["ping: timed out", "iperf3: unable to connect to server: Connection refused"]
    assert bench_exit_code([bad], []) == 1 and bench_exit_code([ok], []) == 0


def _result(a: str, b: str, fwd: float | None, rev: float | None) -> LinkResult:
    return LinkResult(a=a, b=b, a_port="en3", b_port="en3", a_to_b_gbps=fwd, b_to_a_gbps=rev, rtt_ms=0.2)


def test_each_direction_below_its_fraction_of_the_baseline_is_named() -> None:
    base = baseline_of([_result("s1", "s2", 10.0, 10.0), _result("s1", "s3", 10.0, 8.0)], "2026-11-30T00:00:00+00:00",
                       5)
    assert base is not None
    now = [_result("s1", "s2", 7.9, 8.1), _result("s1", "s3", 10.0, 8.0), _result("s2", "s3", 1.0, 1.0)]
    below = below_baseline(now, base, 0.8)
    assert [(d.a, d.b, d.direction) for d in below] == [("s1", "s2", "a_to_b")]  # s2–s3 has no baseline
    assert below[0].text == "s1 → s2: 7.90 Gb/s, 79% of its baseline 10.00 Gb/s"
    assert below_baseline(now, None, 0.8) == []
    assert bench_exit_code(now, below) == 1


def test_a_baseline_is_never_saved_with_a_gap() -> None:
    assert baseline_of([_result("s1", "s2", 10.0, None)], "t", 5) is None
    assert baseline_of([], "t", 5) is None


def test_findings_for_doctor_name_the_link_and_the_unmeasured() -> None:
    base = baseline_of([_result("s1", "s2", 10.0, 10.0), _result("s1", "s3", 10.0, 10.0)], "t", 5)
    files = Baselines(meshes={"mesh1": base})
    now = [_result("s1", "s2", 4.0, 9.0), LinkResult(a="s1", b="s3", problems=["no live cable between them: "
                                                                               "not measured"])]
    found = baseline_findings(now, files, "mesh1", 0.8)
    assert [(f.code, f.nodes) for f in found] == [("link-below-baseline", ["s1", "s2"]),
                                                   ("link-not-measured", ["s1", "s3"])]
    assert "s1 → s2: 4.00 Gb/s, 40% of its baseline" in found[0].message
    assert baseline_findings([_result("s1", "s2", 10.0, 10.0)], None, "mesh1", 0.8) == []


def test_doctor_reports_the_latest_run_only_against_a_baseline() -> None:
    from macfleet.judge.links_bench import LatestRun, LinksBenchInput, links_bench_findings

    base = baseline_of([_result("s1", "s2", 10.0, 10.0)], "t0", 5)
    files = Baselines(meshes={"mesh1": base})
    latest = LatestRun(measured_at="2026-12-01T01:00:00+00:00", duration_s=5, links=[_result("s1", "s2", 3.0, 9.5)])
    found = links_bench_findings(LinksBenchInput(baselines=files, latest=latest), "mesh1", 0.8)
    assert [(f.code, f.nodes) for f in found] == [("link-below-baseline", ["s1", "s2"])]
    assert "(`macfleet bench links` at 2026-12-01T01:00:00+00:00)" in found[0].message
    assert links_bench_findings(LinksBenchInput(baselines=files), "mesh1", 0.8) == []  # no run since
    assert links_bench_findings(LinksBenchInput(latest=latest), "mesh1", 0.8) == []  # no baseline


def test_the_doctor_check_names_the_link_on_its_first_node_and_says_when_it_cannot_tell() -> None:
    from pathlib import Path

    from macfleet.inventory.model import Fleet, Settings
    from macfleet.judge.checks.catalogue import BY_CODE
    from macfleet.judge.health import HealthContext, Unknown
    from macfleet.judge.links_bench import LatestRun, LinksBenchInput
    from tests.judge.builders import mesh
    from tests.judge.test_health import NOW, all_nodes

    m = mesh("s1", "s2", "s3")
    fleet = Fleet(root=Path("/nonexistent"), meshes=(m,), settings=Settings())
    base = baseline_of([_result("s1", "s2", 10.0, 10.0)], "t0", 5)
    latest = LatestRun(measured_at="t1", duration_s=5, links=[_result("s1", "s2", 3.0, 9.5)])
    bench = {m.name: LinksBenchInput(baselines=Baselines(meshes={m.name: base}), latest=latest)}
    ctx = HealthContext(fleet=fleet, meshes=[m], facts=all_nodes(), now=NOW, links_bench=bench)
    one = BY_CODE["links-bench"].judge(ctx, "s1")
    assert [(f.node, f.check, f.severity) for f in one] == [("s1", "links-bench", "warning")]
    assert "s1 → s2: 3.00 Gb/s" in one[0].message
    assert BY_CODE["links-bench"].judge(ctx, "s2") == []
    ctx.links_bench = {m.name: LinksBenchInput(problem="bench-links.latest.json is not a bench result")}
    assert isinstance(BY_CODE["links-bench"].judge(ctx, "s1"), Unknown)
    ctx.links_bench = {}
    assert BY_CODE["links-bench"].judge(ctx, "s1") == []
