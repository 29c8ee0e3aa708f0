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

from macfleet.facts.exoapi import ExoCluster, ExoInstance, GenerationStats, Preview

TRANSPORTS = {"rdma": "MlxJaccl", "ring": "MlxRing"}  # exo's InstanceMeta (shared/types/worker/instances.py:15-17)
SHARDINGS = {"pipeline": "Pipeline", "tensor": "Tensor"}  # exo's Sharding (shared/types/worker/shards.py:10-12)
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
