"""Whether a model can be placed as asked, from exo's own placement previews and what `/state` says is on each
node's disk; which instances a `stop` means; a chat's speeds. Pure: no I/O.

exo's `POST /place_instance` answers "Command received." whatever happens and only logs a refusal (exo
b5375f8 src/exo/api/main.py:429-442), so macfleet asks for exo's previews first (main.py:509-632, the same
placement code) and refuses before placing, with exo's reason. macfleet refuses one more case exo would not:
a model missing on a node it needs. exo would download it there from Hugging Face, every node on its own
(research/exo.md section 1.7); macfleet's clusters get their models once, over their own links, by
`macfleet rollout model`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from pydantic import BaseModel, Field

from macfleet.errors import EXIT_OK, EXIT_PROBLEMS, EXIT_UNREACHABLE
from macfleet.facts.exoapi import ExoCluster, ExoInstance, GenerationStats, Preview
from macfleet.inventory.model import Sharding, Transport

# The inventory's words (inventory/model.py) -> exo's InstanceMeta (shared/types/worker/instances.py:15-17) and
# exo's Sharding (shared/types/worker/shards.py:10-12)
TRANSPORTS = dict(zip(get_args(Transport), ("MlxJaccl", "MlxRing"), strict=True))
SHARDINGS = {s: s.capitalize() for s in get_args(Sharding)}
MEMORY_REFUSAL = "sufficient memory"  # exo: "No cycles found with sufficient memory" (placement.py:128)
RDMA_REFUSAL = "RDMA"  # exo: "Requested RDMA (MlxJaccl) but no RDMA-connected cycles available" (placement.py:214)


@dataclass(frozen=True)
class Refusal:
    reason: str
    hint: str


@dataclass(frozen=True)
class Choice:
    preview: Preview


def _hint(error: str, model: str) -> str:
    if MEMORY_REFUSAL in error:
        return (f"{model} does not fit in the memory the nodes have free: place it over more nodes (--min-nodes), "
                "stop another instance (`macfleet exo stop`), or use a smaller quantization")
    if RDMA_REFUSAL in error or "jaccl" in error:
        return "the mesh has no full RDMA connection: `macfleet doctor` says which link or node; or use --over ring"
    return "exo's own reason, as its placement gave it"


def choose(previews: list[Preview], model: str, *, sharding: str, transport: str, min_nodes: int) -> Choice | Refusal:
    """exo's preview for this (sharding, transport) over the fewest nodes >= min_nodes, or why none is possible.
    `sharding`/`transport` are macfleet's words (pipeline|tensor, rdma|ring)."""
    want_sharding, want_kind = SHARDINGS[sharding], TRANSPORTS[transport]
    mine = [p for p in previews if p.sharding == want_sharding and p.kind == want_kind]
    fits = sorted((p for p in mine if p.error is None and len(p.nodes) >= min_nodes), key=lambda p: len(p.nodes))
    if fits:
        return Choice(fits[0])
    error = next((p.error for p in mine if p.error), None)
    if error:
        return Refusal(f"exo will not place {model} ({sharding} over {transport}): {error}", _hint(error, model))
    if not previews:
        return Refusal(f"exo has no placement for {model}: it sees no node", "is exo running? `macfleet exo status`")
    most = max((len(p.nodes) for p in mine), default=0)
    return Refusal(f"exo would place {model} ({sharding} over {transport}) on at most {most} node(s), "
                   f"not the {min_nodes} asked",
                   "lower --min-nodes, or see `macfleet exo status` for the nodes exo sees")


def missing_on(choice: Choice, cluster: ExoCluster, model: str) -> Refusal | None:
    """The nodes of the placement whose disk does not hold the model complete, as a refusal; None: all do."""
    lacking = [cluster.name_of(n) for n in choice.preview.nodes if model not in cluster.models.get(n, [])]
    if not lacking:
        return None
    return Refusal(f"{model} is not on {', '.join(lacking)}: exo would download it from Hugging Face on each "
                   "node by itself", f"push it once to every node: `macfleet rollout model {model} --from DIR` "
                   "(or --hf)")


def node_names(cluster: ExoCluster, inventory: dict[str, str]) -> dict[str, str]:
    """exo node id -> the inventory's name for it (the node whose address exo lists among that node's), else the
    name exo knows it by (its friendlyName, the Mac's ComputerName)."""
    by_address = {address: name for name, address in inventory.items()}
    out = dict(cluster.names)
    for nid, ips in cluster.addresses.items():
        found = next((by_address[ip] for ip in ips if ip in by_address), None)
        if found:
            out[nid] = found
    return out


def no_card(cluster: ExoCluster, model: str, error: str) -> Refusal:
    """exo could not load the model's card (it reads it from the model's files, or from Hugging Face: exo
    src/exo/api/main.py:517-522 answers 400 "Failed to load model card")."""
    held = sorted(cluster.name_of(n) for n, models in cluster.models.items() if model in models)
    where = f"only {', '.join(held)} hold{'s' if len(held) == 1 else ''} it" if held else "no node holds it"
    return Refusal(f"exo cannot place {model}: {error} ({where})",
                   f"push it to every node first: `macfleet rollout model {model} --from DIR` (or --hf)")


def targets(instances: list[ExoInstance], what: str) -> list[ExoInstance]:
    """The instances `stop WHAT` means: the one whose id is WHAT, else every instance of model WHAT."""
    by_id = [i for i in instances if i.instance_id == what]
    return by_id or [i for i in instances if i.model == what]


@dataclass(frozen=True)
class Speeds:
    prompt_tps: float | None
    generation_tps: float | None
    prompt_tokens: int | None
    generation_tokens: int | None
    source: str  # "exo" (its generation_stats) or "timed" (the controller's clock)


def speeds(stats: GenerationStats | None, *, prompt_tokens: int | None, generation_tokens: int | None,
           first_token_s: float | None, last_token_s: float | None) -> Speeds:
    """A chat's prompt and generation tokens/s: exo's own figures when it sent them, else timed here (prompt:
    its tokens over the time to the first token; generation: the tokens after the first over the time after
    it), which counts the SSH round trip too and so errs slow."""
    if stats is not None:
        return Speeds(stats.prompt_tps, stats.generation_tps, stats.prompt_tokens, stats.generation_tokens, "exo")
    p = prompt_tokens / first_token_s if prompt_tokens and first_token_s else None
    span = (last_token_s - first_token_s) if last_token_s is not None and first_token_s is not None else None
    g = (generation_tokens - 1) / span if generation_tokens and generation_tokens > 1 and span else None
    return Speeds(p, g, prompt_tokens, generation_tokens, "timed")


# ------------------------------------------------------------------------------------------------ reports


class NodeExo(BaseModel):
    node: str
    reachable: bool = True
    release: str | None = None  # exo's version, from the release installed (exo's API does not say it)
    running: bool = False
    node_id: str | None = None
    peers: list[str] = Field(default_factory=list)  # the other nodes its /state shows (inventory names)
    problem: str | None = None


class ShardView(BaseModel):
    node: str
    rank: int
    layers: str | None = None
    status: str
    error: str | None = None


class InstanceView(BaseModel):
    instance_id: str
    model: str
    transport: str  # rdma (MlxJaccl) or ring (MlxRing)
    sharding: str
    ready: bool
    shards: list[ShardView]

    @property
    def failed(self) -> bool:
        """A runner of it crashed (exo's RunnerFailed)."""
        return any(s.status == "RunnerFailed" for s in self.shards)


class ExoStatus(BaseModel):
    mesh: str
    nodes: list[NodeExo]
    instances: list[InstanceView] = Field(default_factory=list)

    def exit_code(self) -> int:
        if not all(n.reachable for n in self.nodes):
            return EXIT_UNREACHABLE
        if not all(n.running for n in self.nodes) or any(not i.ready for i in self.instances):
            return EXIT_PROBLEMS
        return EXIT_OK


TRANSPORT_WORD = {kind: word for word, kind in TRANSPORTS.items()}


def view(inst: ExoInstance, names: dict[str, str]) -> InstanceView:
    shards = [ShardView(node=names.get(s.node_id, s.node_id[:8]), rank=s.rank, status=s.status, error=s.error,
                        layers=f"{s.start_layer}-{s.end_layer}" if s.start_layer is not None else None)
              for s in inst.shards]
    return InstanceView(instance_id=inst.instance_id, model=inst.model, sharding=inst.sharding.lower(),
                        transport=TRANSPORT_WORD.get(inst.kind, inst.kind), ready=inst.ready, shards=shards)


class PlaceReport(BaseModel):
    mesh: str
    model: str
    sharding: str
    transport: str
    nodes: list[str]  # where exo's placement puts it, in rank order
    memory_bytes: dict[str, int] = Field(default_factory=dict)
    check: bool = False
    already: bool = False  # an instance of the model was placed before: nothing done
    placed: bool = False
    instance: InstanceView | None = None
    waited_s: float | None = None


class ChatReport(BaseModel):
    mesh: str
    model: str
    node: str  # whose API answered
    answer: str
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    generation_tokens: int | None = None
    prompt_tps: float | None = None
    generation_tps: float | None = None
    speeds_from: str = "exo"  # exo's own generation_stats, or "timed" on the controller
    seconds: float


class StopReport(BaseModel):
    mesh: str
    target: str
    instances: list[InstanceView]
    check: bool = False
    stopped: bool = False
