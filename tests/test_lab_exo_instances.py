"""exo stand-in, instances (macfleet/lab/exo/instances.py): placement previews and refusals as exo's master
decides them, placing, awaiting (SSE), streamed and whole chat completions with usage, bench stats, deletion,
each answer held to the keys of exo's models (tests/fixtures/exo_schema). In-process servers on 127.0.0.1 fed
canned command outputs (the simulated mesh of test_lab_exo_standin); no root, no lab."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from macfleet.lab.exo import instances
from tests import test_lab_exo_standin as standin
from tests.test_lab_exo_standin import (
    LIST,
    MAP,
    SHARD,
    STATE_SPEC,
    _extra_keys,
    _family,
    _get,
    _rdma_pairs,
    _wait,
)

start_mesh = standin.start_mesh  # the fixture

MODEL = "demo-org/demo-model"
INSTANCE = ("tagged", _family("BaseInstance"), {"shardAssignments": ("model", "ShardAssignments", {
    "runnerToShard": (MAP, SHARD), "nodeToRunner": None})})
PREVIEWS_SPEC = ("model", "PlacementPreviewResponse", {"previews": (LIST, ("model", "PlacementPreview", {
    "instance": INSTANCE}))})
CREATED_SPEC = ("model", "CreateInstanceResponse", {"model_card": ("model", "ModelCard", {})})
DELETED_SPEC = ("model", "DeleteInstanceResponse", {})
USAGE = ("model", "Usage", {})
CHUNK_SPEC = ("model", "ChatCompletionResponse", {"usage": USAGE, "choices": (LIST, (
    "model", "StreamingChoiceResponse", {"delta": ("model", "ChatCompletionMessage", {})}))})
WHOLE_SPEC = ("model", "ChatCompletionResponse", {"usage": USAGE, "choices": (LIST, (
    "model", "ChatCompletionChoice", {"message": ("model", "ChatCompletionMessage", {})}))})
STATS_SPEC = ("model", "GenerationStats", {"peak_memory_usage": ("model", "Memory", {})})
BENCH_SPEC = ("model", "BenchChatCompletionResponse", {"generation_stats": STATS_SPEC, "choices": (LIST, (
    "model", "ChatCompletionChoice", {"message": ("model", "ChatCompletionMessage", {})}))})


def _model_on(tmp_path: Path, nodes: range) -> None:
    for i in nodes:
        d = tmp_path / f"home{i}" / ".exo" / "models" / MODEL.replace("/", "--")
        d.mkdir(parents=True)
        (d / "model.safetensors").write_bytes(b"w" * 4096)


def _post(port: int, path: str, body: dict, timeout: float = 30.0):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    return urllib.request.urlopen(req, timeout=timeout)


def _sse(resp) -> tuple[list[dict], list[str]]:
    """(data events, comment lines) of an SSE answer, up to `data: [DONE]` or the end."""
    events, comments = [], []
    for raw in resp:
        line = raw.decode().rstrip("\n")
        if line.startswith(": "):
            comments.append(line[2:])
        elif line.startswith("data: "):
            if line == "data: [DONE]":
                break
            events.append(json.loads(line[6:]))
    return events, comments


def _ready(port: int, model: str):
    def check():
        s = _get(port, "/state")[2]
        ids = [i for i, v in s["instances"].items() if instances._body(v)["shardAssignments"]["modelId"] == model]
        if not ids:
            return None
        sa = instances._body(s["instances"][ids[0]])["shardAssignments"]
        return ids[0] if all("RunnerReady" in s["runners"][r] for r in sa["nodeToRunner"].values()) else None
    return _wait(check, 20)


def test_place_over_rdma_then_chat_streamed_and_whole_then_delete(start_mesh, tmp_path: Path):
    _model_on(tmp_path, range(2))
    _mesh, apps = start_mesh(2)
    port = apps[0].port
    _wait(lambda: len(_rdma_pairs(_get(port, "/state")[2])) == 2 and len(_get(port, "/state")[2]["nodeMemory"]) == 2)

    previews = _get(port, f"/instance/previews?model_id={MODEL}")[2]
    assert _extra_keys(previews, PREVIEWS_SPEC) == []
    jaccl = [p for p in previews["previews"] if p["instance_meta"] == "MlxJaccl" and p["error"] is None
             and len(p["memory_delta_by_node"]) == 2]
    assert jaccl and "MlxJacclInstance" in jaccl[0]["instance"]

    with _post(port, "/place_instance", {"model_id": MODEL, "sharding": "Pipeline", "instance_meta": "MlxJaccl",
                                         "min_nodes": 2}) as resp:
        created = json.loads(resp.read())
    assert created["message"] == "Command received." and _extra_keys(created, CREATED_SPEC) == []

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/instance/await?model_id={MODEL}&timeout_seconds=20",
                                timeout=30) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        events, comments = _sse(resp)
    assert events[0]["type"] == "ready" and comments[0] == "keep-alive"
    iid = _ready(port, MODEL)
    state = _get(apps[1].port, "/state")[2]  # every node's /state shows it
    assert iid in state["instances"] and _extra_keys(state, STATE_SPEC) == []
    body = instances._body(state["instances"][iid])
    assert body["jacclCoordinators"][sorted(state["topology"]["nodes"])[0]].startswith("0.0.0.0:")
    assert sorted(body["shardAssignments"]["nodeToRunner"]) == sorted(state["topology"]["nodes"])

    ask = {"model": MODEL, "messages": [{"role": "user", "content": "what is a mesh"}], "max_tokens": 12}
    with _post(port, "/v1/chat/completions", {**ask, "stream": True}) as resp:
        chunks, comments = _sse(resp)
    assert all(_extra_keys(c, CHUNK_SPEC) == [] for c in chunks)
    text = "".join(c["choices"][0]["delta"]["content"] for c in chunks)
    assert text.startswith("Hello from the lab's exo on 2 nodes.") and len(chunks) == 12
    assert "usage" not in chunks[0] and chunks[-1]["usage"]["completion_tokens"] == 12
    assert chunks[-1]["usage"]["prompt_tokens"] == 4 and chunks[-1]["choices"][0]["finish_reason"] == "length"
    stats = json.loads(next(c for c in comments if c.startswith("generation_stats "))[len("generation_stats "):])
    assert _extra_keys(stats, STATS_SPEC) == [] and stats["generation_tokens"] == 12
    assert stats["generation_tps"] <= instances.BASE_GENERATION_TPS * 1.01  # paced, never faster than that

    with _post(apps[1].port, "/v1/chat/completions", ask) as resp:
        whole = json.loads(resp.read())
    assert _extra_keys(whole, WHOLE_SPEC) == [] and whole["choices"][0]["message"]["content"] == text
    assert whole["usage"]["total_tokens"] == 16
    with _post(port, "/bench/chat/completions", ask) as resp:
        bench = json.loads(resp.read())
    assert _extra_keys(bench, BENCH_SPEC) == [] and bench["generation_stats"]["generation_tokens"] == 12

    req = urllib.request.Request(f"http://127.0.0.1:{apps[1].port}/instance/{iid}", method="DELETE")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert _extra_keys(json.loads(resp.read()), DELETED_SPEC) == []
    _wait(lambda: iid not in _get(port, "/state")[2]["instances"])
    with pytest.raises(urllib.error.HTTPError) as e:
        _get(port, f"/instance/{iid}")
    assert e.value.code == 404 and json.loads(e.value.read())["error"]["message"] == "Instance not found"
    with pytest.raises(urllib.error.HTTPError) as e:
        _post(port, "/v1/chat/completions", ask)
    assert e.value.code == 404 and f"No instance found for model {MODEL}" in e.value.read().decode()


def test_refusals_as_exo_words_them_and_failures_mid_chat(start_mesh, tmp_path: Path):
    _model_on(tmp_path, range(1))  # on node 0 only
    mesh, apps = start_mesh(2)
    port = apps[0].port
    _wait(lambda: len(_rdma_pairs(_get(port, "/state")[2])) == 2 and len(_get(port, "/state")[2]["nodeMemory"]) == 2)
    huge = _get(port, "/instance/previews?model_id=mlx-community/DeepSeek-V3.1-4bit")[2]["previews"]
    assert {p["error"] for p in huge} == {"No cycles found with sufficient memory"}

    mesh.wedged.add(1)
    _wait(lambda: not _rdma_pairs(_get(port, "/state")[2]))
    errors = {p["error"] for p in _get(port, f"/instance/previews?model_id={MODEL}")[2]["previews"]
              if p["instance_meta"] == "MlxJaccl"}
    assert "Requested RDMA (MlxJaccl) but no RDMA-connected cycles available" in errors
    mesh.wedged.clear()
    _wait(lambda: len(_rdma_pairs(_get(port, "/state")[2])) == 2)

    # placed where node 1 lacks the model: exo would download it; the lab's runner there stays idle
    with _post(port, "/place_instance", {"model_id": MODEL, "instance_meta": "MlxJaccl", "min_nodes": 2}):
        pass
    state = _wait(lambda: (s := _get(port, "/state")[2]) and any(
        "RunnerIdle" in s["runners"].get(r, {}) for r in [instances.runner_id(i, apps[1].node_id)
                                                         for i in s["instances"]]) and s)
    assert _extra_keys(state, STATE_SPEC) == []
    _model_on(tmp_path, range(1, 2))
    _ready(port, MODEL)
    mesh.wedged.add(1)  # the RDMA stack wedges: the instance's runners fail, a chat answers with the error
    _wait(lambda: any("RunnerFailed" in r for r in _get(port, "/state")[2]["runners"].values()))
    ask = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with _post(port, "/v1/chat/completions", ask) as resp:
        events, _ = _sse(resp)
    assert events[-1]["error"]["message"] in (instances.RTR_ERRNO_22, instances.RECV_ERRNO_2)


def test_the_standins_own_instance_answers_like_a_placed_one_and_fails_as_its_runners_do(start_mesh):
    """The lab's own MlxJaccl instance (docs/lab.md "Guesses") is an instance of its model as /state shows it:
    exo answers a completion through any instance of the model (exo b5375f8 src/exo/api/main.py:987-1010), so it
    answers chat and bench, and /instance/await finds it; a runner failed on one of its nodes or a wedged RDMA
    stack fails the completion with the runner's error, as a placed instance's would."""
    from macfleet.lab.exo import standin as exo

    mesh, apps = start_mesh(2)
    port = apps[0].port
    state = _wait(lambda: (s := _get(port, "/state")[2]) and len(_rdma_pairs(s)) == 2
                  and all("RunnerReady" in r for r in s["runners"].values()) and len(s["runners"]) == 2 and s)
    (iid,) = state["instances"]
    own = instances._body(state["instances"][iid])["shardAssignments"]["modelId"]
    assert own == exo.DEFAULT_INSTANCE_MODEL
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/instance/await?model_id={own}&timeout_seconds=5",
                                timeout=30) as resp:
        events, _ = _sse(resp)
    assert events[0]["type"] == "ready" and instances.instance_id(events[0]["instance"]) == iid
    assert _get(apps[1].port, f"/instance/{iid}")[2] == state["instances"][iid]

    ask = {"model": own, "messages": [{"role": "user", "content": "are you there"}], "max_tokens": 8}
    with _post(apps[1].port, "/v1/chat/completions", ask) as resp:
        whole = json.loads(resp.read())
    assert whole["choices"][0]["message"]["content"].startswith("Hello from the lab's exo on 2 nodes.")
    with _post(port, "/bench/chat/completions", ask) as resp:
        bench = json.loads(resp.read())
    assert _extra_keys(bench, BENCH_SPEC) == [] and bench["generation_stats"]["generation_tokens"] == 8

    faults = apps[1].cfg.exo_home / "lab_faults.json"
    faults.write_text(json.dumps({"runnerFailed": exo.SEGV_MESSAGE}))
    _wait(lambda: any("RunnerFailed" in r for r in _get(port, "/state")[2]["runners"].values()))
    with pytest.raises(urllib.error.HTTPError) as e:
        _post(port, "/bench/chat/completions", ask)
    assert e.value.code == 500 and exo.SEGV_MESSAGE in e.value.read().decode()
    faults.unlink()
    _wait(lambda: all("RunnerReady" in r for r in _get(port, "/state")[2]["runners"].values()))

    mesh.wedged.add(1)  # no RDMA to node 1: JACCL cannot connect the instance's pair
    _wait(lambda: not _rdma_pairs(_get(port, "/state")[2]))
    with _post(port, "/v1/chat/completions", {**ask, "stream": True}) as resp:
        events, _ = _sse(resp)
    assert events[-1]["error"]["message"] in (instances.RTR_ERRNO_22, instances.RECV_ERRNO_2)
    delete = urllib.request.Request(f"http://127.0.0.1:{port}/instance/{iid}", method="DELETE")
    with pytest.raises(urllib.error.HTTPError) as e:  # never deleted (a GUESS): its runners are the nodes' own
        urllib.request.urlopen(delete, timeout=10)
    assert e.value.code == 404


def test_generation_follows_the_slowest_link_of_the_instance():
    entry = {"instance": {"MlxRingInstance": {"shardAssignments": {"nodeToRunner": {"a": "r1", "b": "r2",
                                                                                    "c": "r3"}}}}}
    fast = {n: {"linkSpeeds": {p: "80 Gb/s" for p in "abc" if p != n}} for n in "abc"}
    assert instances.link_factor(entry, fast) == 1.0
    slow = json.loads(json.dumps(fast))
    slow["b"]["linkSpeeds"]["c"] = "40 Gb/s"
    assert instances.link_factor(entry, slow) == 0.5
    assert instances.link_factor({"instance": {"MlxRingInstance": {"shardAssignments": {
        "nodeToRunner": {"a": "r1"}}}}}, fast) == 1.0


def test_single_node_placement_is_forced_to_ring_pipeline():
    state = {"topology": {"nodes": ["n1"], "connections": {}}, "nodeMemory": {"n1": {
        "ramAvailable": {"inBytes": 10 ** 10}}}, "nodeRdmaCtl": {"n1": {"enabled": True}}, "downloads": {},
        "nodeNetwork": {}}
    inst = instances.place(state, instances.model_card(MODEL, 1000), "Tensor", "MlxJaccl")
    assert "MlxRingInstance" in inst
    shard = next(iter(instances._body(inst)["shardAssignments"]["runnerToShard"].values()))
    assert "PipelineShardMetadata" in shard and instances._body(shard)["endLayer"] == instances.DEFAULT_LAYERS
