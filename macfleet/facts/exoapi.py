"""exo's API answers that place models and generate, as read on a node: `/state`'s instances and runners,
`/instance/previews`, `/place_instance`, `/instance/await` and chat completions (SSE), errors.

Shapes are exo's own (github.com/exo-explore/exo at b5375f8cee43): request/response models in
src/exo/api/types/api.py (PlacementPreview :280-291, CreateInstanceResponse :298-302, AwaitInstance*Message
:310-318, ChatCompletionResponse :153-161, Usage :130-135, GenerationStats :163-170, ErrorResponse :21-29);
instances and runners in src/exo/shared/types/worker/{instances,runners,shards}.py, tagged as
`{"ClassName": {...}}`; the SSE framing in src/exo/api/adapters/chat_completions.py:218-292 (`data: <json>`,
`: generation_stats <json>` after the last chunk, `data: [DONE]`) and src/exo/api/keepalive.py (`: keep-alive`).
Everything read here is data: ids and names are bounded, nothing is trusted to be well formed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from pydantic import Field

from macfleet.errors import FactsParseError
from macfleet.facts._common import Facts
from macfleet.facts.exo import MAX_JSON_BYTES, _tagged, as_list, as_object, load_state

HEALTHY = ("RunnerReady", "RunnerRunning")
DONE = "[DONE]"


def _json(command: str, body: str) -> object:
    if len(body) > MAX_JSON_BYTES:
        raise FactsParseError(command, f"at most {MAX_JSON_BYTES} bytes", found=f"{len(body)} bytes")
    try:
        return json.loads(body)
    except ValueError:
        raise FactsParseError(command, "JSON", line=1, found=body[:80]) from None


def _s(value: object, limit: int = 200) -> str:
    return str(value)[:limit]


class ExoShard(Facts):
    node_id: str
    runner_id: str
    rank: int = 0
    start_layer: int | None = None
    end_layer: int | None = None
    status: str = "?"  # the runner's state: RunnerReady, RunnerLoading, RunnerFailed, ... ("?": not in runners)
    error: str | None = None


class ExoInstance(Facts):
    instance_id: str
    model: str
    kind: str  # MlxJaccl (RDMA) or MlxRing
    sharding: str  # Pipeline or Tensor
    shards: list[ExoShard] = Field(default_factory=list)

    @property
    def nodes(self) -> list[str]:
        return [s.node_id for s in self.shards]

    @property
    def ready(self) -> bool:
        return bool(self.shards) and all(s.status in HEALTHY for s in self.shards)

    @property
    def failed(self) -> list[ExoShard]:
        return [s for s in self.shards if s.status == "RunnerFailed"]


class ExoCluster(Facts):
    """What `/state` says of the cluster's nodes, models on disk and placed instances."""

    nodes: list[str] = Field(default_factory=list)
    names: dict[str, str] = Field(default_factory=dict)  # node id -> friendlyName
    models: dict[str, list[str]] = Field(default_factory=dict)  # node id -> models complete on disk
    addresses: dict[str, list[str]] = Field(default_factory=dict)  # node id -> its IP addresses (nodeNetwork)
    instances: list[ExoInstance] = Field(default_factory=list)

    def name_of(self, node_id: str) -> str:
        return self.names.get(node_id, node_id[:8])


def _instance(iid: str, value: object, runners: dict) -> ExoInstance | None:
    tag, body = _tagged(value)
    sa = body.get("shardAssignments")
    if not isinstance(sa, dict):
        return None
    shards, sharding = [], "?"
    to_shard = as_object(sa.get("runnerToShard"))
    for node, rid in as_object(sa.get("nodeToRunner")).items():
        if not isinstance(rid, str):  # a runner id is a string: anything else names no runner
            continue
        shard_tag, shard = _tagged(to_shard.get(rid))
        sharding = shard_tag.removesuffix("ShardMetadata") if shard_tag != "?" else sharding
        status, runner = _tagged(runners.get(rid))
        shards.append(ExoShard(node_id=_s(node, 64), runner_id=_s(rid, 64), rank=_int(shard.get("deviceRank")),
                               start_layer=_int(shard.get("startLayer"), None),
                               end_layer=_int(shard.get("endLayer"), None), status=status,
                               error=_s(runner["errorMessage"], 500) if runner.get("errorMessage") else None))
    return ExoInstance(instance_id=_s(iid, 64), model=_s(sa.get("modelId"), 200), kind=tag.removesuffix("Instance"),
                       sharding=sharding, shards=sorted(shards, key=lambda s: s.rank))


def _int(value: object, default: int | None = 0) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def parse_cluster(body: str) -> ExoCluster:
    return cluster_of(load_state(body))


def cluster_of(state: dict) -> ExoCluster:
    """`/state` (facts/exo.py `load_state`) reduced to nodes, their names, the models complete on each and the
    placed instances."""
    nodes = [_s(n, 64) for n in as_list(as_object(state.get("topology")).get("nodes")) if isinstance(n, str)]
    names = {_s(k, 64): _s(v.get("friendlyName"), 100) for k, v in as_object(state.get("nodeIdentities")).items()
             if isinstance(v, dict) and v.get("friendlyName")}
    models: dict[str, list[str]] = {}
    for node, entries in as_object(state.get("downloads")).items():
        for entry in as_list(entries):
            tag, dl = _tagged(entry)
            _shard_tag, shard = _tagged(dl.get("shardMetadata"))
            model = as_object(shard.get("modelCard")).get("modelId")
            if tag == "DownloadCompleted" and isinstance(model, str):
                models.setdefault(_s(node, 64), []).append(_s(model))
    addresses = {_s(k, 64): [_s(i.get("ipAddress"), 64) for i in as_list(v.get("interfaces")) if isinstance(i, dict)]
                 for k, v in as_object(state.get("nodeNetwork")).items() if isinstance(v, dict)}
    runners = as_object(state.get("runners"))
    instances = [i for iid, v in as_object(state.get("instances")).items() if (i := _instance(iid, v, runners))]
    return ExoCluster(nodes=nodes, names=names, models=models, addresses=addresses,
                      instances=sorted(instances, key=lambda i: (i.model, i.instance_id)))


class Preview(Facts):
    """One of exo's placement previews: where a (sharding, transport) would go, or why it cannot."""

    model: str
    sharding: str
    kind: str  # MlxJaccl / MlxRing
    nodes: list[str] = Field(default_factory=list)  # in rank order
    error: str | None = None
    memory: dict[str, int] = Field(default_factory=dict)  # node id -> bytes the placement would take


def parse_previews(body: str) -> list[Preview]:
    """`GET /instance/previews?model_id=` (PlacementPreviewResponse)."""
    doc = _json("GET /instance/previews", body)
    if not isinstance(doc, dict) or not isinstance(doc.get("previews"), list):
        raise FactsParseError("GET /instance/previews", "a JSON object with a 'previews' list", found=body[:80])
    out = []
    for p in doc["previews"]:
        if not isinstance(p, dict):
            continue
        inst = _instance("preview", p["instance"], {}) if p.get("instance") else None
        memory = {_s(k, 64): v for k, v in as_object(p.get("memory_delta_by_node")).items()
                  if _int(v, None) is not None}
        out.append(Preview(model=_s(p.get("model_id")), sharding=_s(p.get("sharding"), 20),
                           kind=_s(p.get("instance_meta"), 20), nodes=inst.nodes if inst else [],
                           error=_s(p["error"], 500) if p.get("error") else None, memory=memory))
    return out


def parse_api_error(body: str) -> str:
    """exo's error answer (ErrorResponse `{"error": {"message"}}`, or FastAPI's `{"detail": ...}`) as a line."""
    try:
        doc = json.loads(body[:MAX_JSON_BYTES])
    except ValueError:
        return _s(body.strip() or "no body", 300)
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        return _s(doc["error"].get("message") or doc["error"], 300)
    if isinstance(doc, dict) and "detail" in doc:
        return _s(doc["detail"], 300)
    return _s(body.strip(), 300)


def parse_command_id(body: str) -> str:
    """`POST /place_instance` and `DELETE /instance/{id}` answer "Command received." with a command id."""
    doc = _json("POST /place_instance", body)
    if not isinstance(doc, dict) or not isinstance(doc.get("command_id"), str):
        raise FactsParseError("POST /place_instance", "a JSON object with a 'command_id'", found=body[:80])
    return _s(doc["command_id"], 64)


class SseEvent(Facts):
    """One server-sent event: a `data:` payload (JSON, or "[DONE]") or a comment line (`: ...`)."""

    data: object = None
    done: bool = False
    comment: str | None = None


def sse_events(lines: Iterable[str]) -> Iterator[SseEvent]:
    """The events of an SSE body, line by line (exo sends one `data:` line per event)."""
    for n, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        if line.startswith(":"):
            yield SseEvent(comment=line[1:].strip()[:2000])
        elif line.startswith("data:"):
            payload = line[5:].strip()
            if payload == DONE:
                yield SseEvent(done=True)
                return
            try:
                yield SseEvent(data=json.loads(payload))
            except ValueError:
                raise FactsParseError("SSE", "`data: <JSON>` or `data: [DONE]`", line=n, found=line[:80]) from None


class GenerationStats(Facts):
    prompt_tps: float
    generation_tps: float
    prompt_tokens: int
    generation_tokens: int


def parse_stats(value: object) -> GenerationStats | None:
    """exo's GenerationStats (a `: generation_stats {...}` comment, or a bench answer's `generation_stats`)."""
    if isinstance(value, str):
        if not value.startswith("generation_stats "):
            return None
        try:
            value = json.loads(value[len("generation_stats "):])
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    try:
        return GenerationStats.model_validate({k: value.get(k) for k in GenerationStats.model_fields})
    except ValueError:
        return None


def parse_bench_answer(body: str) -> GenerationStats:
    """`POST /bench/chat/completions` (not streamed): a BenchChatCompletionResponse, whose top-level
    `generation_stats` are exo's own figures (api/types/api.py:214-216; exo's bench/exo_bench.py:297 reads them
    there). An answer without them cannot give tokens/s: an error, never a zero."""
    doc = _json("POST /bench/chat/completions", body)
    stats = parse_stats(doc.get("generation_stats") if isinstance(doc, dict) else None)
    if stats is None:
        raise FactsParseError("POST /bench/chat/completions", "an answer with generation_stats", found=body[:80])
    return stats


class ChatPiece(Facts):
    """One streamed chunk of a chat completion: its text, and on the last one the finish reason and usage."""

    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None


def parse_chat_chunk(data: object) -> ChatPiece:
    """A `data:` payload of `/v1/chat/completions` with `stream: true`: a ChatCompletionResponse whose choice
    has a `delta`, or an ErrorResponse sent mid-stream."""
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return ChatPiece(error=_s(data["error"].get("message") or "error", 500))
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise FactsParseError("POST /v1/chat/completions", "a chunk with choices", found=str(data)[:80])
    choice = choices[0]
    delta = choice.get("delta") or choice.get("message") or {}
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return ChatPiece(text=str(delta.get("content") or "") if isinstance(delta, dict) else "",
                     finish_reason=_s(choice["finish_reason"], 40) if choice.get("finish_reason") else None,
                     prompt_tokens=_int(usage.get("prompt_tokens"), None),
                     completion_tokens=_int(usage.get("completion_tokens"), None))


def parse_await(data: object) -> tuple[str, str]:
    """An `/instance/await` event: ("ready", instance id) or ("timeout", exo's message)."""
    if isinstance(data, dict) and data.get("type") == "ready":
        return "ready", _instance_id(data.get("instance"))
    if isinstance(data, dict) and data.get("type") == "timeout":
        return "timeout", _s(data.get("message"), 300)
    raise FactsParseError("GET /instance/await", "a ready or timeout message", found=str(data)[:80])


def _instance_id(value: object) -> str:
    _tag, body = _tagged(value)
    return _s(body.get("instanceId") or "?", 64)
