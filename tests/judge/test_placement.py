"""judge/placement.py and facts/exoapi.py: exo's previews and /state read into a choice or a refusal naming
what to do; the SSE framing and exo's error bodies; hostile answers stay data."""

from __future__ import annotations

import json

import pytest

from macfleet.errors import FactsParseError
from macfleet.facts.exoapi import (
    GenerationStats,
    parse_api_error,
    parse_await,
    parse_chat_chunk,
    parse_cluster,
    parse_previews,
    parse_stats,
    sse_events,
)
from macfleet.judge.placement import Choice, Refusal, choose, missing_on, speeds, targets

MODEL = "demo-org/demo-model"
A, B = "a" * 32, "b" * 32


def _instance(kind: str, nodes: list[str], iid: str = "i-1") -> dict:
    runners = {n: f"r-{n[:1]}" for n in nodes}
    return {f"{kind}Instance": {"instanceId": iid, "shardAssignments": {
        "modelId": MODEL, "nodeToRunner": runners,
        "runnerToShard": {r: {"PipelineShardMetadata": {"modelCard": {"modelId": MODEL}, "deviceRank": k,
                                                        "startLayer": 8 * k, "endLayer": 8 * k + 8}}
                          for k, r in enumerate(runners.values())}}}}


def _previews(*items: dict) -> str:
    return json.dumps({"previews": list(items)})


def _p(kind: str, nodes: list[str] | None, error: str | None = None, sharding: str = "Pipeline") -> dict:
    return {"model_id": MODEL, "sharding": sharding, "instance_meta": kind,
            "instance": _instance(kind, nodes) if nodes else None,
            "memory_delta_by_node": {n: 10 for n in nodes} if nodes else None, "error": error}


def _state(models: dict[str, list[str]], instances: dict | None = None, runners: dict | None = None) -> str:
    downloads = {n: [{"DownloadCompleted": {"nodeId": n, "shardMetadata": {"PipelineShardMetadata": {
        "modelCard": {"modelId": m}}}, "total": {"inBytes": 1}}} for m in ms] for n, ms in models.items()}
    return json.dumps({"topology": {"nodes": [A, B], "connections": {}}, "downloads": downloads,
                       "nodeIdentities": {A: {"friendlyName": "studio-1"}, B: {"friendlyName": "studio-2"}},
                       "instances": instances or {}, "runners": runners or {}})


def test_choice_is_the_fewest_nodes_at_least_min_nodes():
    previews = parse_previews(_previews(_p("MlxRing", [A]), _p("MlxJaccl", [A]), _p("MlxJaccl", [A, B])))
    got = choose(previews, MODEL, sharding="pipeline", transport="rdma", min_nodes=2)
    assert isinstance(got, Choice) and got.preview.nodes == [A, B]
    assert choose(previews, MODEL, sharding="pipeline", transport="rdma", min_nodes=1).preview.nodes == [A]


def test_refusals_carry_exos_reason_and_what_to_do():
    memory = parse_previews(_previews(_p("MlxJaccl", None, "No cycles found with sufficient memory")))
    got = choose(memory, MODEL, sharding="pipeline", transport="rdma", min_nodes=1)
    assert isinstance(got, Refusal) and "No cycles found with sufficient memory" in got.reason
    assert "does not fit" in got.hint
    rdma = parse_previews(_previews(_p("MlxRing", [A, B]), _p("MlxJaccl", [A]),
                                    _p("MlxJaccl", None, "Requested RDMA (MlxJaccl) but no RDMA-connected cycles "
                                                         "available")))
    got = choose(rdma, MODEL, sharding="pipeline", transport="rdma", min_nodes=2)
    assert isinstance(got, Refusal) and "no RDMA-connected cycles" in got.reason and "doctor" in got.hint
    too_few = choose(parse_previews(_previews(_p("MlxRing", [A]))), MODEL, sharding="pipeline", transport="ring",
                     min_nodes=3)
    assert isinstance(too_few, Refusal) and "at most 1 node" in too_few.reason
    assert isinstance(choose([], MODEL, sharding="tensor", transport="ring", min_nodes=1), Refusal)


def test_a_model_missing_on_a_needed_node_points_at_rollout_model():
    choice = Choice(parse_previews(_previews(_p("MlxJaccl", [A, B])))[0])
    cluster = parse_cluster(_state({A: [MODEL], B: ["other/model"]}))
    refusal = missing_on(choice, cluster, MODEL)
    assert refusal is not None and "not on studio-2" in refusal.reason and "studio-1" not in refusal.reason
    assert f"macfleet rollout model {MODEL}" in refusal.hint
    assert missing_on(choice, parse_cluster(_state({A: [MODEL], B: [MODEL]})), MODEL) is None


def test_cluster_instances_runners_and_stop_targets():
    instances = {"i-1": _instance("MlxJaccl", [A, B]), "i-2": _instance("MlxRing", [B], "i-2")}
    runners = {"r-a": {"RunnerReady": {}}, "r-b": {"RunnerFailed": {"errorMessage": "[jaccl] boom"}}}
    cluster = parse_cluster(_state({}, instances, runners))
    jaccl = next(i for i in cluster.instances if i.kind == "MlxJaccl")
    assert [s.status for s in jaccl.shards] == ["RunnerReady", "RunnerFailed"] and not jaccl.ready
    assert jaccl.failed[0].error == "[jaccl] boom" and jaccl.sharding == "Pipeline"
    assert [i.instance_id for i in targets(cluster.instances, "i-2")] == ["i-2"]
    assert len(targets(cluster.instances, MODEL)) == 2 and targets(cluster.instances, "nothing") == []


def test_sse_framing_stats_and_errors():
    lines = [": keep-alive\n", "\n", 'data: {"id": "c", "choices": [{"index": 0, "delta": {"content": "Hi"}, '
             '"finish_reason": null}]}\n', "\n", 'data: {"id": "c", "choices": [{"index": 0, "delta": {"content": '
             '"!"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}\n',
             ': generation_stats {"prompt_tps": 90.5, "generation_tps": 30.25, "prompt_tokens": 3, '
             '"generation_tokens": 2, "peak_memory_usage": {"inBytes": 0}}\n', "data: [DONE]\n", "data: {}\n"]
    events = list(sse_events(lines))
    assert events[0].comment == "keep-alive" and events[-1].done and len(events) == 5
    pieces = [parse_chat_chunk(e.data) for e in events if e.data is not None]
    assert "".join(p.text for p in pieces) == "Hi!" and pieces[-1].completion_tokens == 2
    assert parse_stats(events[3].comment) == GenerationStats(prompt_tps=90.5, generation_tps=30.25, prompt_tokens=3,
                                                             generation_tokens=2)
    err = parse_chat_chunk({"error": {"message": "[jaccl] Recv failed with errno=2", "code": 500}})
    assert err.error == "[jaccl] Recv failed with errno=2"
    with pytest.raises(FactsParseError):
        list(sse_events(["data: {not json\n"]))
    assert parse_await({"type": "timeout", "message": "No instance found for model x"})[0] == "timeout"
    assert parse_await({"type": "ready", "instance": _instance("MlxRing", [A], "i-9")}) == ("ready", "i-9")


def test_exo_error_bodies_and_hostile_text():
    assert parse_api_error('{"error": {"message": "Instance not found", "type": "Not Found"}}') == "Instance not found"
    assert parse_api_error('{"detail": "Not Found"}') == "Not Found"
    assert len(parse_api_error("x" * 10_000)) == 300
    weird = parse_cluster(_state({A: ["[red]x[/red]"]}))
    assert weird.models[A] == ["[red]x[/red]"]  # data, shown as text by render
    with pytest.raises(FactsParseError):
        parse_cluster("[]")


def test_speeds_prefer_exos_figures_else_time_them():
    exo = speeds(GenerationStats(prompt_tps=100, generation_tps=20, prompt_tokens=5, generation_tokens=9),
                 prompt_tokens=5, generation_tokens=9, first_token_s=1.0, last_token_s=2.0)
    assert (exo.generation_tps, exo.source) == (20, "exo")
    timed = speeds(None, prompt_tokens=10, generation_tokens=11, first_token_s=0.5, last_token_s=1.5)
    assert (timed.prompt_tps, timed.generation_tps, timed.source) == (20, 10, "timed")
    assert speeds(None, prompt_tokens=None, generation_tokens=1, first_token_s=None, last_token_s=None).generation_tps \
        is None


def test_exo_nodes_are_named_as_the_inventory_names_them_by_address():
    from macfleet.judge.placement import node_names

    doc = json.loads(_state({}))
    doc["nodeNetwork"] = {A: {"interfaces": [{"name": "en0", "ipAddress": "10.0.0.11", "interfaceType": "ethernet"}]}}
    names = node_names(parse_cluster(json.dumps(doc)), {"m1": "10.0.0.11", "m2": "10.0.0.12"})
    assert names == {A: "m1", B: "studio-2"}  # B lists no address: exo's own name for it
