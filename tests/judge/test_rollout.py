"""Rollout judgement as tables: names, what is missing, the fan-out over the links, the health verdict."""

from __future__ import annotations

import pytest

from macfleet.judge.rollout import (
    Manifest,
    ManifestFile,
    NodeAnswer,
    fanout_direct,
    judge_health,
    make_manifest,
    missing_files,
    model_dir_name,
    plan_chunks,
    release_name,
    releases_to_prune,
    safe_relpath,
)


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


def _state(ids: list[str], *, rdma_pairs: set[frozenset] | None = None, rdma_on: bool = True,
           runners: dict | None = None) -> dict:
    conns: dict = {}
    for a in ids:
        for b in ids:
            if a == b:
                continue
            edges = [{"sinkMultiaddr": {"address": "/ip4/10.0.0.1/tcp/52415"}}]
            if rdma_pairs is None or frozenset((a, b)) in rdma_pairs:
                edges.append({"sourceRdmaIface": "rdma_en3", "sinkRdmaIface": "rdma_en4"})
            conns.setdefault(a, {})[b] = edges
    return {"topology": {"nodes": ids, "connections": conns},
            "nodeRdmaCtl": {i: {"enabled": rdma_on} for i in ids},
            "runners": runners or {i + "r": {"RunnerReady": {}} for i in ids}}


IDS = {"n1": "a" * 32, "n2": "b" * 32, "n3": "c" * 32}


def _answers(state_for) -> dict[str, NodeAnswer]:
    return {n: NodeAnswer(node_id=i, state=state_for(n)) for n, i in IDS.items()}


def test_health_verdicts() -> None:
    ids = list(IDS.values())
    assert judge_health(_answers(lambda n: _state(ids))).healthy
    # a node that sees only itself (a build whose runner never comes up)
    v = judge_health(_answers(lambda n: _state([IDS[n]]) if n == "n3" else _state(ids)))
    assert not v.healthy and any("n3: /state shows 1 of 3 nodes" in r for r in v.reasons)
    # a pair without RDMA while RDMA is on; and the same with RDMA off is fine
    pairs = {frozenset((ids[0], ids[1])), frozenset((ids[0], ids[2]))}
    v = judge_health(_answers(lambda n: _state(ids, rdma_pairs=pairs)))
    assert any("no RDMA connection between n2 and n3" in r for r in v.reasons)
    assert judge_health(_answers(lambda n: _state(ids, rdma_pairs=set(), rdma_on=False))).healthy
    # a failed runner, with exo's message
    failed = {"x": {"RunnerFailed": {"errorMessage": "[jaccl] Changing queue pair to RTR failed with errno 22"}}}
    v = judge_health(_answers(lambda n: _state(ids, runners=failed)))
    assert any("errno 22" in r for r in v.reasons)


def test_health_unknown_is_not_healthy() -> None:
    ids = list(IDS.values())
    answers = _answers(lambda n: _state(ids))
    answers["n2"] = NodeAnswer(error="connection refused")
    v = judge_health(answers)
    assert not v.healthy and "n2: no answer on /node_id (connection refused)" in v.reasons
    answers["n2"] = NodeAnswer(node_id=IDS["n2"], state=None, error="timed out")
    assert "n2: no answer on /state (timed out)" in judge_health(answers).reasons
