"""Rollout judgement as tables: names, what is missing, the fan-out over the links, the health verdict."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from macfleet.inventory.model import Fleet, Settings
from macfleet.judge.rollout import (
    HEALTH_GATE,
    Manifest,
    ManifestFile,
    fanout_direct,
    gate_verdict,
    make_manifest,
    missing_files,
    model_dir_name,
    plan_chunks,
    release_name,
    releases_to_prune,
    safe_relpath,
)
from tests.judge.builders import healthy, mesh


def _m(*files: tuple[str, int]) -> Manifest:
    return make_manifest([ManifestFile(path=p, size=s, digest=f"{s:064x}") for p, s in files])


def test_release_name_is_version_and_content() -> None:
    a = _m(("bin/exo", 10), ("lib/x.py", 20))
    b = _m(("lib/x.py", 20), ("bin/exo", 10))  # order does not matter
    c = _m(("bin/exo", 11), ("lib/x.py", 20))
    assert release_name("1.0.72", a) == release_name("1.0.72", b)
    assert release_name("1.0.72", a) != release_name("1.0.72", c)
    assert release_name("1.0.72", a).startswith("1.0.72-") and len(release_name("1.0.72", a)) == 7 + 12
    with pytest.raises(ValueError, match="bad exo version"):
        release_name("1.0; rm -rf /", a)


@pytest.mark.parametrize("bad", ["", "/etc/passwd", "../x", "a/../b", "a//b", "./a", "a/\nb"])
def test_unsafe_paths_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        safe_relpath(bad)


def test_model_dir_name_follows_exo() -> None:
    assert model_dir_name("mlx-community/Qwen3-0.6B-4bit") == "mlx-community--Qwen3-0.6B-4bit"
    for bad in ("qwen", "a/b/c", "../x", "a/..", "-a/b"):
        with pytest.raises(ValueError):
            model_dir_name(bad)


def test_missing_files_resume_rules() -> None:
    m = _m(("a", 5), ("b", 7), ("c", 9))
    have = {"a": (5, f"{5:064x}"), "b": (3, None), "c": (9, "0" * 64)}
    assert [f.path for f in missing_files(m, have)] == ["b", "c"]
    assert missing_files(m, {p.path: (p.size, p.digest) for p in m.files}) == []


def test_chunks_balance_bytes_cover_everything_and_go_to_every_peer() -> None:
    m = _m(("w1", 400), ("w2", 300), ("w3", 300), ("w4", 100), ("w5", 100), ("w6", 100), ("cfg", 1))
    chunks = plan_chunks(m, ["p1", "p2", "p3"])
    assert [p for p, _ in chunks] == ["p1", "p2", "p3"]
    assert sorted(f for _, fs in chunks for f in fs) == sorted(f.path for f in m.files)
    sizes = [sum(f.size for f in m.files if f.path in fs) for _, fs in chunks]
    assert max(sizes) - min(sizes) <= 100


def test_a_small_model_ends_with_small_chunks_so_the_tail_is_short() -> None:
    m = _m(*[(f"w{i}", 75) for i in range(8)], ("cfg", 1))  # the benchmark's shape: 8 shards and a config
    chunks = plan_chunks(m, ["a", "b", "c"], extra=2)  # one per peer, and two more
    sizes = [sum(f.size for f in m.files if f.path in fs) for _, fs in chunks]
    assert len(chunks) == 5 and sizes == sorted(sizes, reverse=True) and sizes[-1] == 75
    assert [len(fs) for _, fs in plan_chunks(m, ["a", "b", "c"])] == [3, 3, 3]
    assert [p for p, _ in chunks[:3]] == ["a", "b", "c"]
    assert sorted(f for _, fs in chunks for f in fs) == sorted(f.path for f in m.files)


def test_a_big_model_is_cut_finer_so_the_last_chunk_is_short() -> None:
    m = _m(*[(f"w{i:02d}", 5) for i in range(24)])  # 24 shards of 5 bytes, chunks of about 10
    chunks = plan_chunks(m, ["a", "b", "c"], chunk_bytes=10)
    assert len(chunks) == 12 and all(len(fs) == 2 for _, fs in chunks)
    assert [p for p, _ in chunks[:6]] == ["a", "b", "c", "a", "b", "c"]
    assert sorted(f for _, fs in chunks for f in fs) == sorted(f.path for f in m.files)
    # never more chunks than files, never none for a peer while files remain
    assert len(plan_chunks(_m(("x", 100)), ["a", "b"], chunk_bytes=1)) == 1
    assert plan_chunks(m, []) == [] and plan_chunks(_m(), ["a"]) == []


def test_direct_fanout_sends_from_the_seed_over_each_cable() -> None:
    nodes = ["s", "a", "b"]
    addr = {(x, y): f"{y}@{x}" for x in nodes for y in nodes if x != y}
    hops = fanout_direct("s", ["a", "b"], addr)
    assert [(h.src, h.dst, h.dst_address) for h in hops] == [("s", "a", "a@s"), ("s", "b", "b@s")]


def test_prune_keeps_newest_and_pinned() -> None:
    rel = ["r1", "r2", "r3", "r4", "r5"]
    assert releases_to_prune(rel, keep={"r5", "r4"}, limit=3) == ["r1", "r2"]
    assert releases_to_prune(rel, keep={"r1"}, limit=2) == ["r2", "r3"]


def _gate(one_way: bool = False, runner: str = "RunnerReady", down: str | None = None):
    """The rollout's gate judged on two cabled nodes whose exo answers (its /state real-shaped, parsed)."""
    from macfleet.facts.exo import parse_exo_state
    from macfleet.judge.health import NodeFacts, judge_health
    from tests.judge.test_rdma import node_facts as rdma_facts

    ids = {"s1": "a" * 32, "s2": "b" * 32}
    rdma = [{"sourceRdmaIface": "rdma_en3", "sinkRdmaIface": "rdma_en3"}]
    conns = {ids["s1"]: {ids["s2"]: rdma}, ids["s2"]: {ids["s1"]: [] if one_way else rdma}}
    state = parse_exo_state(json.dumps({
        "topology": {"nodes": list(ids.values()), "connections": conns},
        "instances": {"x": {"MlxJacclInstance": {"shardAssignments": {
            "nodeToRunner": {i: f"r-{i}" for i in ids.values()}}}}},
        "runners": {f"r-{i}": {runner: {"errorMessage": "errno 22"}} for i in ids.values()}}))
    rig, m = healthy(["s1", "s2"]), mesh("s1", "s2")
    facts = {n: NodeFacts(**{k: v for k, v in dict(rdma_facts(rig, n)).items()
                             if k in NodeFacts.model_fields and k != "problems"},
                          exo_api="up", exo_node_id=ids[n], exo_state=state) for n in ids}
    if down:
        facts[down] = NodeFacts(reachable=False, unreachable_reason="connection refused")
    fleet = Fleet(root=Path("/nonexistent"), meshes=(m,), settings=Settings())
    return gate_verdict(judge_health(fleet, [m], facts, datetime(2026, 12, 2, tzinfo=UTC), only=list(HEALTH_GATE)))


def test_the_gate_is_doctors_exo_judgement_with_an_rdma_connection_each_way() -> None:
    """issue 26: the gate judged raw /state on its own and took an RDMA edge in one direction for the pair;
    it is doctor's exo checks now, which want both."""
    assert _gate().healthy
    v = _gate(one_way=True)
    assert not v.healthy and "s1: exo has no RDMA connection between s1 and s2" in v.reasons[0]
    assert any("errno 22" in r for r in _gate(runner="RunnerFailed").reasons)


def test_a_node_the_gate_cannot_read_is_not_healthy() -> None:
    v = _gate(down="s2")
    assert not v.healthy and any(r.startswith("s2: s2 is unreachable: connection refused") for r in v.reasons)
