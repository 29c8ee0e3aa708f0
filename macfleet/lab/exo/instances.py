"""exo stand-in, part two: placing models and answering prompts (exo's instance, chat and bench endpoints).

Copied next to the server as `<release>/lib/exo_instances.py` (build.py) and imported by `standin.py`; standard
library only, nothing of `macfleet` (the lab must not reuse macfleet's code). "exo" below is
github.com/exo-explore/exo at b5375f8cee43 (the snapshot the rest of the lab cites); every behaviour names its
source in `SOURCES`, and what has none is a GUESS there and in docs/lab-exo.md.

How the cluster-wide parts work in the lab: real exo keeps instances in the master's event-sourced State; here
the node that received `POST /place_instance` keeps the instance in its gossiped record and a `DELETE` leaves a
tombstone in the deleting node's record, so every node's `/state` shows the same instances within a refresh.
An instance lives while each of its nodes runs the exo process it was placed on (each record carries its
process's start time): exo, restarted or rebooted, has lost its instances.

The "model" is deterministic: its answer is made of the prompt's words, one token per word, streamed at a rate
scaled from the links between the instance's nodes (a 40 Gb/s link halves it; a Jaccl instance over a pair
without RDMA fails as JACCL does).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from typing import Any

SHARDINGS = ("Pipeline", "Tensor")  # exo shared/types/worker/shards.py:10-12
METAS = ("MlxRing", "MlxJaccl")  # exo shared/types/worker/instances.py:15-17
LOAD_S = 2.0  # GUESS: how long runners load before they are ready (a Mac loading GBs takes far longer)
BASE_GENERATION_TPS = 40.0  # GUESS: tokens/s of the lab's model over full-speed links
BASE_PROMPT_TPS = 400.0  # GUESS
FULL_LINK_GBPS = 80.0  # a TB5 link (research/macos-outputs.md: current_speed_key "80 Gb/s")
AVAILABLE_FRACTION = 0.75  # GUESS: share of RAM exo reports available on an idle Mac
MAX_BODY = 1 << 20
READY_WAIT_S = 60.0  # GUESS: how long a request waits for a loading instance before it fails
DEFAULT_MAX_TOKENS = 24  # GUESS: the lab model's answer length when max_tokens is not given
# GUESS: shape of a model card for a model exo does not know (exo reads config.json from Hugging Face)
DEFAULT_LAYERS, DEFAULT_HIDDEN, DEFAULT_KV_HEADS = 16, 2048, 8

RTR_ERRNO_22 = "[jaccl] Changing queue pair to RTR failed with errno 22"
RECV_ERRNO_2 = "[jaccl] Recv failed with errno=2"
RING_ABORT = "[ring] Too many send/recv errors. Aborting..."

SOURCES = {
    "GET /instance/previews?model_id=": "exo src/exo/api/main.py:509-632 get_placement_previews: every "
        "(sharding, instance_meta, min_nodes) tried, one error preview per (sharding, meta), memory_delta_by_node "
        "= storage split evenly; PlacementPreview(Response) src/exo/api/types/api.py:280-291",
    "POST /place_instance": "exo src/exo/api/main.py:429-442: answers CreateInstanceResponse {message: "
        "\"Command received.\", command_id, model_card} at once; placement happens in the master and a refusal "
        "is only logged (api/types/api.py:269-274, 298-302)",
    "placement rules": "exo src/exo/master/placement.py:106-252 (cycles >= min_nodes, memory filter 'No cycles "
        "found with sufficient memory', tensor divisibility, MlxJaccl needs an RDMA cycle with rdma_ctl enabled "
        "everywhere, smallest cycles, most downloaded then most RAM, single node forced to MlxRing/Pipeline); "
        "placement_utils.py:21-37 (memory), 296-325 (jaccl devices matrix), 431-461 (coordinators, rank 0 "
        "0.0.0.0); topology.py:244-258 is_rdma_cycle. Not modelled: leaf-node preference, backends, CFG shards",
    "layers split by available RAM": "exo src/exo/master/placement_utils.py:46-76 allocate_layers_proportionally",
    "GET /instance/await (SSE)": "exo src/exo/api/main.py:639-679: `data: <AwaitInstanceReadyMessage>` as soon as "
        "an instance of the model exists (not when it is ready), or `AwaitInstanceTimeoutMessage` 'No instance "
        "found for model X' after timeout_seconds (0 = forever); keep-alive `: keep-alive` first and every 10 s "
        "(src/exo/api/keepalive.py:9-34)",
    "GET|DELETE /instance/{id}": "exo src/exo/api/main.py:634-637, 681-694: 404 'Instance not found'; delete "
        "answers DeleteInstanceResponse {message: \"Command received.\", command_id, instance_id}",
    "POST /v1/chat/completions": "exo src/exo/api/main.py:916-948 and src/exo/api/adapters/chat_completions.py:"
        "181-382: answered through an instance of the model, any (the stand-in's own one too), 404 'No instance "
        "found for model X' only when there is none (main.py:987-1010); stream = `data: <chunk>` per token "
        "(object chat.completion, delta), usage only on the last chunk, then `: generation_stats {...}` and "
        "`data: [DONE]`; an error mid-stream = `data: {\"error\": ...}` then `data: [DONE]`; non-stream = one "
        "ChatCompletionResponse with usage",
    "POST /bench/chat/completions": "exo src/exo/api/main.py:950-985, 791-860: BenchChatCompletionResponse with "
        "generation_stats (GenerationStats, api/types/api.py:163-170); power_usage null here (the lab has no "
        "power sampler; exo's PowerSampler reads nodeSystem)",
    "stats on the final token": "exo src/exo/worker/engines/mlx/generator/generate.py:796-817",
    "the stand-in's own instance answers like a placed one": "exo src/exo/api/main.py:987-1010 (any instance "
        "of the model answers); it can answer while each node's own runner is RunnerReady and fails as a placed "
        "MlxJaccl instance does (`failure`); that it exists, needs no model files and is never deleted: GUESS "
        "(docs/lab.md)",
    "runner states of a placed instance": "exo src/exo/shared/types/worker/runners.py:25-77 (RunnerIdle, "
        "RunnerLoading{layersLoaded,totalLayers}, RunnerReady, RunnerFailed{errorMessage,diagnostics}); "
        "RunnerIdle while the model is missing on the node: GUESS (exo would download it from Hugging Face; "
        "the lab downloads nothing)",
    "JACCL/ring failure messages": "research/exo.md section 5.1 (RTR errno 22: exo#1390; Recv errno=2: mlx#4530; "
        "ring abort: exo src/exo/worker/runner/diagnostics.py:13-26)",
    "instances lost when exo restarts": "exo b5375f8 draws a new node id per start (src/exo/routing/router.py:"
        "232-240), so the old node times out and its instances go; the lab keeps the id and compares start times",
    "nodeMemory": "exo src/exo/shared/types/profiling.py MemoryUsage; total from `sysctl -n hw.memsize`, "
        "available = AVAILABLE_FRACTION of it less the shards placed on the node: GUESS (exo reads macmon)",
    "tokens/s scaled by the slowest link of the instance": "GUESS (the lab's model has no arithmetic to slow; "
        "JACCL/ring throughput follows the link, research/exo.md section 3)",
    "model cards": "GUESS: storage size from the lab's catalogue or the model's files on the nodes; layers, "
        "hidden size and KV heads DEFAULT_* (exo reads them from the model's config.json)",
}


class PlacementError(ValueError):
    """exo's placement refusals are ValueErrors with a sentence (placement.py)."""


# ------------------------------------------------------------------------------------------------ the registry


class Registry:
    """This node's share of the cluster's instances: those placed through its API, and the ids deleted here."""

    def __init__(self) -> None:
        self.started = time.time()
        self._lock = threading.Lock()
        self._placed: dict[str, dict] = {}
        self._deleted: set[str] = set()

    def record(self) -> dict:
        """What this node gossips (merged into every node's /state by `view`)."""
        with self._lock:
            return {"started": self.started, "placed": dict(self._placed), "deleted": sorted(self._deleted)}

    def add(self, instance: dict, records: dict) -> None:
        iid = _body(instance)["instanceId"]
        nodes = list(_body(instance)["shardAssignments"]["nodeToRunner"])
        with self._lock:
            self._placed[iid] = {"instance": instance, "at": time.time(),
                                 "starts": {n: records[n].get("started") for n in nodes}}

    def delete(self, iid: str) -> None:
        with self._lock:
            self._placed.pop(iid, None)
            self._deleted.add(iid)


def _body(tagged: dict) -> dict:
    return next(iter(tagged.values()))


def _tag(tagged: dict) -> str:
    return next(iter(tagged))


def instance_id(tagged: dict) -> str:
    return _body(tagged)["instanceId"]


def placed(records: dict) -> dict:
    """{instance id: entry} over every node's record: placed somewhere, deleted nowhere, and every node of it
    still running the exo it was placed on."""
    deleted = {i for rec in records.values() for i in rec.get("deleted", [])}
    out = {}
    for rec in records.values():
        for iid, entry in (rec.get("placed") or {}).items():
            alive = all(n in records and records[n].get("started") == s for n, s in entry["starts"].items())
            if iid not in deleted and alive:
                out[iid] = entry
    return out


# ------------------------------------------------------------------------------------------------ runners


def runner_id(iid: str, node: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_OID, f"exo-lab-runner:{iid}:{node}"))


def _pairs(nodes: list) -> list[tuple[str, str]]:
    return [(a, b) for a, b in itertools.permutations(nodes, 2)]


def _has(connections: dict, a: str, b: str, kind: str) -> bool:
    return any(kind in c for c in connections.get(a, {}).get(b, []))


def failure(entry: dict, records: dict, connections: dict) -> dict:
    """{node: errorMessage} for the instance's runners that cannot run now."""
    inst = entry["instance"]
    nodes = list(_body(inst)["shardAssignments"]["nodeToRunner"])
    out: dict[str, str] = {}
    for n in nodes:
        status = records[n].get("runner", {}).get("status", {})
        if "RunnerFailed" in status:
            out[n] = status["RunnerFailed"].get("errorMessage") or RTR_ERRNO_22
    if _tag(inst) == "MlxJacclInstance":
        for n in nodes:
            if records[n].get("rdmaPorts") is None and n not in out:
                out[n] = RTR_ERRNO_22
        for a, b in _pairs(nodes):
            if not _has(connections, a, b, "sourceRdmaIface"):
                out.setdefault(a, RTR_ERRNO_22)
        if out:
            out.update({n: RECV_ERRNO_2 for n in nodes if n not in out})
    elif len(nodes) > 1:
        ring = nodes + nodes[:1]
        broken = [a for a, b in itertools.pairwise(ring) if not _has(connections, a, b, "sinkMultiaddr")]
        out.update({n: RING_ABORT for n in broken if n not in out})
    return out


def own_entry(app: Any, records: dict) -> tuple[str, dict] | None:
    """(id, entry) of the stand-in's own instance (standin.py `own_instance`) over the nodes of `records` its
    `/state` shows, shaped as a placed one's: there since exo started, its runners the nodes' own; None without
    one."""
    inst = app.own_instance(app.visible_records(records))
    return (instance_id(inst), {"instance": inst, "at": 0.0, "own": True}) if inst is not None else None


def loading(entry: dict, records: dict, now: float) -> bool:
    """The instance cannot answer yet: a placed one's runners load (the model missing on a node: exo would
    download it; or within LOAD_S of its placing); the stand-in's own while a node's runner is not ready."""
    if entry.get("own"):
        return any("RunnerReady" not in records[n].get("runner", {}).get("status", {})
                   for n in _body(entry["instance"])["shardAssignments"]["nodeToRunner"])
    return bool(_missing_model(entry, records)) or now - entry["at"] < LOAD_S


def _missing_model(entry: dict, records: dict) -> list[str]:
    model = _body(entry["instance"])["shardAssignments"]["modelId"]
    return [n for n in _body(entry["instance"])["shardAssignments"]["nodeToRunner"]
            if not any(m["modelId"] == model and m["complete"] for m in records[n].get("models", []))]


def runners(entries: dict, records: dict, connections: dict, now: float) -> dict:
    """exo's `runners` for the placed instances (tagged RunnerStatus by runner id)."""
    out = {}
    for entry in entries.values():
        sa = _body(entry["instance"])["shardAssignments"]
        failed = failure(entry, records, connections)
        missing = set(_missing_model(entry, records))
        for node, rid in sa["nodeToRunner"].items():
            shard = _body(sa["runnerToShard"][rid])
            layers = shard["endLayer"] - shard["startLayer"]
            if node in failed:
                out[rid] = {"RunnerFailed": {"errorMessage": failed[node], "diagnostics": []}}
            elif missing:
                out[rid] = {"RunnerIdle": {}}
            elif now - entry["at"] < LOAD_S:
                done = int(layers * (now - entry["at"]) / LOAD_S)
                out[rid] = {"RunnerLoading": {"layersLoaded": done, "totalLayers": layers}}
            else:
                out[rid] = {"RunnerReady": {"prefillServerPort": None}}
    return out


def node_memory(records: dict, entries: dict) -> dict:
    """exo's `nodeMemory`: MemoryUsage per node whose RAM size is known."""
    used: dict[str, int] = {}
    for entry in entries.values():
        sa = _body(entry["instance"])["shardAssignments"]
        for node, rid in sa["nodeToRunner"].items():
            shard = _body(sa["runnerToShard"][rid])
            card = shard["modelCard"]
            share = card["storageSize"]["inBytes"] * (shard["endLayer"] - shard["startLayer"]) // card["nLayers"]
            used[node] = used.get(node, 0) + share
    out = {}
    for nid, rec in records.items():
        total = rec.get("memBytes")
        if total:
            free = max(0, int(total * AVAILABLE_FRACTION) - used.get(nid, 0))
            out[nid] = {"ramTotal": {"inBytes": total}, "ramAvailable": {"inBytes": free},
                        "swapTotal": {"inBytes": 0}, "swapAvailable": {"inBytes": 0}}
    return out


def view(state: dict, records: dict, now: float | None = None) -> None:
    """Put the placed instances, their runners and nodeMemory into a /state being built from `records`."""
    entries = placed(records)
    connections = state["topology"]["connections"]
    state["instances"].update({iid: e["instance"] for iid, e in entries.items()})
    state["runners"].update(runners(entries, records, connections, time.time() if now is None else now))
    state["nodeMemory"] = node_memory(records, entries)


# ------------------------------------------------------------------------------------------------ placement


def model_card(model_id: str, size_bytes: int) -> dict:
    """A ModelCard (exo shared/models/model_cards.py:157-177, camelCase) for the lab's model."""
    return {"modelId": model_id, "storageSize": {"inBytes": size_bytes}, "nLayers": DEFAULT_LAYERS,
            "hiddenSize": DEFAULT_HIDDEN, "supportsTensor": True, "numKeyValueHeads": DEFAULT_KV_HEADS,
            "tasks": ["TextGeneration"], "family": "", "quantization": "", "baseModel": "",
            "capabilities": ["text"], "backends": ["Mlx"], "isCustom": True}


def _cycles(state: dict) -> list[list[str]]:
    """Every set of nodes that a cycle of connections joins (exo: simple cycles + singletons), each in one
    order: the first node, then the others so that each reaches the next and the last the first."""
    conns = state["topology"]["connections"]
    nodes = sorted(state["topology"]["nodes"])
    out = [[n] for n in nodes]
    for k in range(2, len(nodes) + 1):
        for subset in itertools.combinations(nodes, k):
            for rest in itertools.permutations(subset[1:]):
                ring = [subset[0], *rest]
                if all(conns.get(a, {}).get(b) for a, b in zip(ring, [*ring[1:], ring[0]], strict=False)):
                    out.append(ring)
                    break
    return out


def _free(state: dict, node: str) -> int:
    return state["nodeMemory"][node]["ramAvailable"]["inBytes"]


def _downloaded(state: dict, node: str, model_id: str) -> bool:
    return any("DownloadCompleted" in d and _body(d)["shardMetadata"]["PipelineShardMetadata"]["modelCard"][
        "modelId"] == model_id for d in state["downloads"].get(node, []))


def _layers(card: dict, cycle: list[str], state: dict) -> list[int]:
    """exo's largest-remainder split of the layers by available RAM, at least one each."""
    total_layers = card["nLayers"]
    if total_layers < len(cycle):
        raise PlacementError(f"Cannot distribute {total_layers} layers across {len(cycle)} nodes "
                             "(need at least 1 layer per node)")
    free = [_free(state, n) for n in cycle]
    raw = [f * total_layers / max(1, sum(free)) for f in free]
    out = [int(r) for r in raw]
    for i in sorted(range(len(cycle)), key=lambda i: raw[i] - out[i], reverse=True)[:total_layers - sum(out)]:
        out[i] += 1
    for i in range(len(cycle)):
        if out[i] == 0:
            top = max(range(len(cycle)), key=lambda j: out[j])
            out[top] -= 1
            out[i] = 1
    return out


def _ip_of(state: dict, src: str, sink: str) -> str | None:
    """An address of `sink` that `src` reached it on (exo find_ip_prioritised, ring=False: ethernet first,
    thunderbolt last)."""
    ips = [c["sinkMultiaddr"]["ip_address"] for c in state["topology"]["connections"].get(src, {}).get(sink, [])
           if "sinkMultiaddr" in c]
    kinds = {i["ipAddress"]: i["interfaceType"] for i in state["nodeNetwork"].get(sink, {}).get("interfaces", [])}
    rank = {"ethernet": 0, "wifi": 1, "unknown": 2, "maybe_ethernet": 3, "thunderbolt": 4}
    return min(ips, key=lambda ip: rank.get(kinds.get(ip, "unknown"), 2)) if ips else None


def place(state: dict, card: dict, sharding: str, meta: str, min_nodes: int = 1) -> dict:
    """One new instance (tagged), chosen as exo's master would; PlacementError with exo's sentence if none."""
    conns = state["topology"]["connections"]
    size = card["storageSize"]["inBytes"]
    cycles = [c for c in _cycles(state) if len(c) >= min_nodes]
    cycles = [c for c in cycles if all(n in state["nodeMemory"] for n in c)
              and sum(_free(state, n) for n in c) >= size]
    if not cycles:
        raise PlacementError("No cycles found with sufficient memory")
    if sharding == "Tensor":
        if not card["supportsTensor"]:
            raise PlacementError("Requested Tensor sharding but this model does not support tensor "
                                 f"parallelism: {card['modelId']}")
        kv = card.get("numKeyValueHeads")
        cycles = [c for c in cycles if card["hiddenSize"] % len(c) == 0 and (kv is None or kv % len(c) == 0)]
        if not cycles:
            raise PlacementError(f"No tensor sharding found for model with hidden_size={card['hiddenSize']}"
                                 f"{f', num_key_value_heads={kv}' if kv is not None else ''} across candidate "
                                 "cycles")
    smallest = min(len(c) for c in cycles)
    cycles = [c for c in cycles if len(c) == smallest]
    rdma_ok = state.get("nodeRdmaCtl", {})
    rdma_cycles = [c for c in cycles if all(_has(conns, a, b, "sourceRdmaIface") for a, b in _pairs(c))
                   and all((rdma_ok.get(n) or {}).get("enabled") for n in c)]
    if meta == "MlxJaccl":
        if not rdma_cycles:
            raise PlacementError("Requested RDMA (MlxJaccl) but no RDMA-connected cycles available")
        cycles = rdma_cycles
    cycle = max(cycles, key=lambda c: (sum(_downloaded(state, n, card["modelId"]) for n in c),
                                       sum(_free(state, n) for n in c)))
    if len(cycle) == 1:
        sharding, meta = "Pipeline", "MlxRing"
    return _instance(state, card, cycle, sharding, meta)


def _instance(state: dict, card: dict, cycle: list[str], sharding: str, meta: str) -> dict:
    iid = str(uuid.uuid4())
    layers = _layers(card, cycle, state) if sharding == "Pipeline" else [card["nLayers"]] * len(cycle)
    node_to_runner, runner_to_shard, start = {}, {}, 0
    for rank, (node, n) in enumerate(zip(cycle, layers, strict=True)):
        rid = runner_id(iid, node)
        node_to_runner[node] = rid
        first = start if sharding == "Pipeline" else 0
        runner_to_shard[rid] = {f"{sharding}ShardMetadata": {
            "modelCard": card, "deviceRank": rank, "worldSize": len(cycle), "startLayer": first,
            "endLayer": first + n, "nLayers": card["nLayers"]}}
        start += n if sharding == "Pipeline" else 0
    sa = {"modelId": card["modelId"], "runnerToShard": runner_to_shard, "nodeToRunner": node_to_runner}
    port = 49153 + uuid.UUID(iid).int % 16383  # exo random_ephemeral_port: 49153-65535 (utils/ports.py:4-6)
    conns = state["topology"]["connections"]
    if meta == "MlxJaccl":
        devices = [[None if a == b else next((c["sourceRdmaIface"] for c in conns.get(a, {}).get(b, [])
                                               if "sourceRdmaIface" in c), None) for b in cycle] for a in cycle]
        if any(devices[i][j] is None for i in range(len(cycle)) for j in range(len(cycle)) if i != j):
            raise PlacementError("Current jaccl backend requires all-to-all RDMA connections")
        coordinators = {}
        for n in cycle:
            ip = "0.0.0.0" if n == cycle[0] else _ip_of(state, n, cycle[0])
            if ip is None:
                raise PlacementError("Current jaccl backend requires all participating devices to be able to "
                                     "communicate")
            coordinators[n] = f"{ip}:{port}"
        return {"MlxJacclInstance": {"instanceId": iid, "shardAssignments": sa, "jacclDevices": devices,
                                     "jacclCoordinators": coordinators}}
    hosts = {}
    for i, n in enumerate(cycle):
        hosts[n] = []
        for j, peer in enumerate(cycle):
            ip = "0.0.0.0" if i == j else _ip_of(state, n, peer)
            if ip is None and len(cycle) > 1 and abs(i - j) in (1, len(cycle) - 1):
                raise PlacementError("MLX ring backend requires connectivity between neighbouring nodes")
            hosts[n].append({"ip": ip or "198.51.100.1", "port": port})
    return {"MlxRingInstance": {"instanceId": iid, "shardAssignments": sa, "hostsByNode": hosts,
                                "ephemeralPort": port}}


def previews(state: dict, card: dict) -> list[dict]:
    """exo's previews: every sharding x meta x min_nodes; one error per (sharding, meta), one preview per size."""
    out, seen = [], set()
    n_nodes = len(state["topology"]["nodes"])
    if n_nodes == 0:
        return []
    for sharding in SHARDINGS:
        for meta in METAS:
            for min_nodes in range(1, n_nodes + 1):
                try:
                    inst = place(state, card, sharding, meta, min_nodes)
                except PlacementError as exc:
                    if (sharding, meta, 0) not in seen:
                        out.append({"model_id": card["modelId"], "sharding": sharding, "instance_meta": meta,
                                    "instance": None, "memory_delta_by_node": None, "error": str(exc)})
                    seen.add((sharding, meta, 0))
                    continue
                nodes = sorted(_body(inst)["shardAssignments"]["nodeToRunner"])
                if (sharding, meta, len(nodes)) in seen:
                    continue
                seen.add((sharding, meta, len(nodes)))
                size = card["storageSize"]["inBytes"]
                delta = {n: size // len(nodes) + (1 if i < size % len(nodes) else 0) for i, n in enumerate(nodes)}
                out.append({"model_id": card["modelId"], "sharding": sharding, "instance_meta": meta,
                            "instance": inst, "memory_delta_by_node": delta, "error": None})
    return out


# ------------------------------------------------------------------------------------------------ generation


def link_factor(entry: dict, records: dict) -> float:
    """The slowest link between neighbours of the instance against a full TB5 link (1.0 on one node)."""
    nodes = list(_body(entry["instance"])["shardAssignments"]["nodeToRunner"])
    if len(nodes) < 2:
        return 1.0
    speeds = []
    for a, b in zip(nodes, [*nodes[1:], nodes[0]], strict=False):
        speeds.append(min(_gbps(records[a].get("linkSpeeds", {}).get(b)),
                          _gbps(records[b].get("linkSpeeds", {}).get(a))))
    return max(0.01, min(speeds) / FULL_LINK_GBPS)


def _gbps(text: str | None) -> float:
    try:
        return float(str(text).split()[0])
    except (ValueError, IndexError):
        return FULL_LINK_GBPS / 8  # GUESS: a link whose speed nobody reports runs as a slow one


def _words(messages: Any) -> list[str]:
    words: list[str] = []
    for m in messages if isinstance(messages, list) else []:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        words += str(content or "").split()
    return words


def answer(prompt_words: list[str], n_nodes: int, limit: int) -> list[str]:
    """The lab model's tokens: a fixed sentence, then the prompt's words echoed; deterministic."""
    head = ["Hello", "from", "the", "lab's", "exo", "on", f"{n_nodes}", "node" + ("s" if n_nodes != 1 else "") + "."]
    tokens = [w + " " for w in head + ["You", "said:"] + (prompt_words or ["nothing."])]
    tokens[-1] = tokens[-1].rstrip()
    return tokens[:max(1, limit)]


# ------------------------------------------------------------------------------------------------ HTTP


class Api:
    """The endpoints, over a stand-in `app` that offers `state()`, `records()`, `visible_records(records)`,
    `own_instance(records)` (its own instance, or None), `registry`, `card(model_id)` (a ModelCard or None) and
    `log`; `req` is the BaseHTTPRequestHandler with `_send` and `_error`."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def handle(self, req: Any, method: str, path: str, query: dict) -> bool:
        """Answer the request if it is one of these endpoints; False otherwise."""
        route = {
            ("GET", "/instance/previews"): self.get_previews,
            ("GET", "/instance/await"): self.await_instance,
            ("POST", "/place_instance"): self.place_instance,
            ("POST", "/v1/chat/completions"): self.chat,
            ("POST", "/bench/chat/completions"): self.bench,
        }.get((method, path))
        if route is not None:
            route(req, query)
            return True
        if path.startswith("/instance/") and path.count("/") == 2 and method in ("GET", "DELETE"):
            self.instance(req, method, path.rsplit("/", 1)[1])
            return True
        return False

    # ---- helpers

    def _body(self, req: Any) -> dict | None:
        try:
            length = int(req.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY:
            req._send(422, {"detail": [{"type": "missing", "loc": ["body"], "msg": "Field required"}]})
            return None
        try:
            body = json.loads(req.rfile.read(length))
        except ValueError:
            body = None
        if not isinstance(body, dict):
            req._send(422, {"detail": [{"type": "json_invalid", "loc": ["body"], "msg": "JSON decode error"}]})
            return None
        return body

    def _card(self, req: Any, model_id: Any) -> dict | None:
        card = self.app.card(model_id) if isinstance(model_id, str) and model_id else None
        if card is None:
            req._error(400, f"Failed to load model card: no model card for {model_id!r}", "Bad Request")
        return card

    def _sse_start(self, req: Any) -> None:
        req.send_response(200)
        req.send_header("Content-Type", "text/event-stream; charset=utf-8")
        req.send_header("Cache-Control", "no-cache")
        req.send_header("Connection", "close")
        req.send_header("X-Accel-Buffering", "no")
        req.end_headers()
        self._write(req, ": keep-alive\n\n")

    @staticmethod
    def _write(req: Any, text: str) -> None:
        req.wfile.write(text.encode())
        req.wfile.flush()

    # ---- instances

    def get_previews(self, req: Any, query: dict) -> None:
        card = self._card(req, query.get("model_id"))
        if card is not None:
            req._send(200, {"previews": previews(self.app.state(), card)})

    def place_instance(self, req: Any, _query: dict) -> None:
        body = self._body(req)
        if body is None:
            return
        sharding, meta = body.get("sharding", "Pipeline"), body.get("instance_meta", "MlxRing")
        min_nodes = body.get("min_nodes", 1)
        if sharding not in SHARDINGS or meta not in METAS or not isinstance(min_nodes, int) or min_nodes < 1:
            req._send(422, {"detail": [{"type": "enum", "loc": ["body"], "msg": "Input should be one of "
                                        f"{SHARDINGS} / {METAS}, min_nodes a positive integer"}]})
            return
        card = self._card(req, body.get("model_id"))
        if card is None:
            return
        command_id = str(uuid.uuid4())
        try:
            inst = place(self.app.state(), card, sharding, meta, min_nodes)
            self.app.registry.add(inst, self.app.records())
            self.app.log.info("exo.master.main:_plan:180", f"placed instance {_body(inst)['instanceId']} of "
                              f"{card['modelId']} on {len(_body(inst)['shardAssignments']['nodeToRunner'])} nodes")
        except PlacementError as exc:
            self.app.log.warning("exo.master.main:_plan:180", f"placement of {card['modelId']} failed: {exc}")
        req._send(200, {"message": "Command received.", "command_id": command_id, "model_card": card})

    def instance(self, req: Any, method: str, iid: str) -> None:
        instances = self.app.state()["instances"]
        if iid not in instances:
            req._error(404, "Instance not found", "Not Found")
        elif method == "GET":
            req._send(200, instances[iid])
        elif iid not in placed(self.app.records()):  # the stand-in's own instance is never deleted: GUESS
            req._error(404, "Instance not found", "Not Found")
        else:
            self.app.registry.delete(iid)
            req._send(200, {"message": "Command received.", "command_id": str(uuid.uuid4()), "instance_id": iid})

    def await_instance(self, req: Any, query: dict) -> None:
        model_id = query.get("model_id") or ""
        try:
            timeout = float(query.get("timeout_seconds") or 0)
        except ValueError:
            timeout = -1
        if not model_id or not 0 <= timeout <= 300:
            req._send(422, {"detail": [{"type": "less_than_equal", "loc": ["query", "timeout_seconds"],
                                        "msg": "model_id required, timeout_seconds 0..300"}]})
            return
        self._sse_start(req)
        deadline = None if timeout == 0 else time.monotonic() + timeout
        keepalive = time.monotonic() + 10
        while True:
            found = self._instance_of(model_id)
            if found is not None:
                self._write(req, f"data: {json.dumps({'type': 'ready', 'instance': found[1]['instance']})}\n\n")
                return
            if deadline is not None and time.monotonic() >= deadline:
                msg = {"type": "timeout", "message": f"No instance found for model {model_id}"}
                self._write(req, f"data: {json.dumps(msg)}\n\n")
                return
            if time.monotonic() >= keepalive:
                self._write(req, ": keep-alive\n\n")
                keepalive = time.monotonic() + 10
            time.sleep(0.1)

    def _instance_of(self, model_id: str) -> tuple[str, dict] | None:
        """The first instance of the model (exo answers through any instance of it; 404 only when none)."""
        records = self.app.records()
        entries = placed(records)
        own = own_entry(self.app, records)
        if own is not None:
            entries[own[0]] = own[1]
        return next(((iid, e) for iid, e in sorted(entries.items(), key=lambda kv: kv[1]["at"])
                     if _body(e["instance"])["shardAssignments"]["modelId"] == model_id), None)

    # ---- generation

    def chat(self, req: Any, _query: dict) -> None:
        self._generate(req, bench=False)

    def bench(self, req: Any, _query: dict) -> None:
        self._generate(req, bench=True)

    def _generate(self, req: Any, *, bench: bool) -> None:
        body = self._body(req)
        if body is None:
            return
        model = body.get("model")
        if not isinstance(model, str) or not isinstance(body.get("messages"), list):
            req._send(422, {"detail": [{"type": "missing", "loc": ["body", "model|messages"],
                                        "msg": "Field required"}]})
            return
        found = self._instance_of(model)
        if found is None:
            req._error(404, f"No instance found for model {model}", "Not Found")
            return
        limit = body.get("max_tokens") or body.get("max_completion_tokens") or DEFAULT_MAX_TOKENS
        run = Generation(self.app, found[0], model, _words(body["messages"]), int(limit) if str(limit).isdigit()
                         else DEFAULT_MAX_TOKENS)
        if body.get("stream"):
            self._stream(req, run)
        elif bench:
            self._collect(req, run, bench=True)
        else:
            self._collect(req, run, bench=False)

    def _stream(self, req: Any, run: Generation) -> None:
        self._sse_start(req)
        try:
            for kind, value in run.events():
                if kind == "token":
                    self._write(req, f"data: {json.dumps(value)}\n\n")
                elif kind == "error":
                    err = {"error": {"message": value, "type": "InternalServerError", "code": 500}}
                    self._write(req, f"data: {json.dumps(err)}\n\ndata: [DONE]\n\n")
                    return
                else:
                    self._write(req, f": generation_stats {json.dumps(value)}\n\ndata: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            return

    def _collect(self, req: Any, run: Generation, *, bench: bool) -> None:
        text, usage, stats = [], None, None
        for kind, value in run.events():
            if kind == "error":
                req._error(500, value, "Internal Server Error")
                return
            if kind == "token":
                text.append(value["choices"][0]["delta"]["content"])
                usage = value.get("usage") or usage
            else:
                stats = value
        resp = {"id": run.command_id, "object": "chat.completion", "created": int(time.time()), "model": run.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(text)},
                             "finish_reason": "stop" if len(text) < run.limit else "length"}]}
        if bench:
            resp.update(generation_stats=stats, power_usage=None)
        else:
            resp["usage"] = usage
        req._send(200, resp)


class Generation:
    """One request's tokens, paced by the instance's links; events ("token", chunk) ... ("stats", stats), or
    ("error", message) when a runner cannot run (at once, or when it fails mid-answer)."""

    def __init__(self, app: Any, iid: str, model: str, prompt: list[str], limit: int) -> None:
        self.app, self.iid, self.model, self.prompt, self.limit = app, iid, model, prompt, limit
        self.command_id = str(uuid.uuid4())

    def _entry(self) -> tuple[dict | None, dict]:
        records = self.app.records()
        entry = placed(records).get(self.iid)
        if entry is None and (own := own_entry(self.app, records)) is not None and own[0] == self.iid:
            entry = own[1]
        return entry, records

    def _problem(self) -> str | None:
        """Why the instance cannot answer now; None when it can; "" while it loads."""
        entry, records = self._entry()
        if entry is None:
            return "instance was deleted"
        failed = failure(entry, records, self.app.state()["topology"]["connections"])
        if failed:
            return next(iter(failed.values()))
        return "" if loading(entry, records, time.time()) else None

    def events(self):
        deadline = time.monotonic() + READY_WAIT_S
        while (why := self._problem()) == "" and time.monotonic() < deadline:
            time.sleep(0.1)
        if why:
            yield "error", why
            return
        if why == "":
            yield "error", f"instance {self.iid} did not become ready within {READY_WAIT_S:g}s"
            return
        entry, records = self._entry()
        factor = link_factor(entry, records)
        n_nodes = len(_body(entry["instance"])["shardAssignments"]["nodeToRunner"])
        tokens = answer(self.prompt, n_nodes, self.limit)
        prompt_tps, gen_tps = BASE_PROMPT_TPS * factor, BASE_GENERATION_TPS * factor
        started = time.monotonic()
        time.sleep(max(1, len(self.prompt)) / prompt_tps)
        first = time.monotonic()
        for i, tok in enumerate(tokens):
            if i and i % 8 == 0 and (why := self._problem()) is not None:
                yield "error", why or "instance is loading again"
                return
            time.sleep(1 / gen_tps)
            last = i == len(tokens) - 1
            chunk = {"id": self.command_id, "object": "chat.completion", "created": int(time.time()),
                     "model": self.model, "choices": [{"index": 0, "delta": {"role": "assistant", "content": tok},
                                                       "finish_reason": None}]}
            if last:
                finish = "stop" if len(tokens) < self.limit else "length"
                chunk["choices"][0]["finish_reason"] = finish
                chunk["usage"] = {"prompt_tokens": len(self.prompt), "completion_tokens": len(tokens),
                                  "total_tokens": len(self.prompt) + len(tokens)}
            yield "token", chunk
        gen_s = max(1e-6, time.monotonic() - first)
        yield "stats", {"prompt_tps": len(self.prompt) / max(1e-6, first - started),
                        "generation_tps": len(tokens) / gen_s, "prompt_tokens": len(self.prompt),
                        "generation_tokens": len(tokens), "peak_memory_usage": {"inBytes": 0},
                        "prefix_cache_hit": "none"}
