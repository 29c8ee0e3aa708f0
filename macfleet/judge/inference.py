"""Inference as health: which declared models are not placed, whether a completion through a placed model
answered, and how its speed compares with the baseline `macfleet bench exo` saved.

A model list answering 200 is not health; a token is. A completion that gave no token within its bound is a
failure whatever `/state` says, and one that answers at a fraction of its usual speed (a degraded cable, a
ring where RDMA was) is a finding.

Pure: declared models, placed instances, completion results and baselines in, findings out. No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from macfleet.facts.exoapi import ExoCluster
from macfleet.inventory.model import KeepPlaced, Mesh, ModelToStage, Sharding, Transport
from macfleet.judge.model import Finding
from macfleet.judge.placement import InstanceView, node_names, view

BASELINE_FILE = "bench-exo.baseline.json"  # beside the inventory's hosts.yml, as bench-links.baseline.json
Phase = Literal["prompt", "generation"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Completion(_Model):
    """One completion through a placed model, as the controller saw it. `tokens`: generated tokens received
    before the bound; the rates are exo's own figures (bench endpoint) or None when it gave none."""

    model_id: str
    tokens: int = Field(ge=0)
    seconds: float | None = Field(default=None, ge=0)  # from the request to the last token (None: no answer)
    prompt_tps: float | None = Field(default=None, ge=0)
    generation_tps: float | None = Field(default=None, ge=0)
    error: str | None = None  # what exo or the connection said instead of tokens

    @property
    def answered(self) -> bool:
        return self.error is None and self.tokens >= 1


class ModelFigures(_Model):
    """What `macfleet bench exo` measured for one model: exo's prompt and generation tokens/s."""

    prompt_tps: float = Field(gt=0)
    generation_tps: float = Field(gt=0)
    sharding: Sharding | None = None
    transport: Transport | None = None
    nodes: list[str] = Field(default_factory=list)


class MeshInferenceBaseline(_Model):
    saved_at: str  # ISO 8601, UTC
    models: dict[str, ModelFigures]  # model id -> figures


class InferenceBaselines(_Model):
    """The file beside the inventory: one baseline per mesh."""

    version: Literal[1] = 1
    meshes: dict[str, MeshInferenceBaseline] = Field(default_factory=dict)


class InferenceInput(_Model):
    """What doctor's model checks read for one mesh: the instances exo lists (None: could not be read), one
    short completion through each placed model, the saved baseline."""

    node: str | None = None  # the node whose exo was asked: where doctor says what it found
    placed: list[InstanceView] | None = None
    answers: dict[str, Completion] = Field(default_factory=dict)  # model id -> its completion
    baseline: MeshInferenceBaseline | None = None
    problem: str | None = None  # why the instances could not be read: the checks cannot tell


# ------------------------------------------------------------------------------------------ models kept placed


def nodes_of(instance: InstanceView) -> list[str]:
    """The nodes an instance's shards are on, in rank order (inventory names where exo's ids are known)."""
    return [s.node for s in sorted(instance.shards, key=lambda s: s.rank)]


def placed_on(mesh: Mesh, cluster: ExoCluster) -> list[InstanceView]:
    """exo's instances as `macfleet exo status` shows them: shards on inventory names where exo's ids are known."""
    names = node_names(cluster, {n.name: n.address for n in mesh.nodes})
    return [view(i, names) for i in cluster.instances]


def not_placed(mesh: Mesh, placed: Sequence[InstanceView]) -> list[ModelToStage]:
    """The mesh's declared models with no instance of that model (any cut: one placed by hand counts)."""
    have = {i.model for i in placed}
    return [m for m in mesh.settings.kept_placed if m.name not in have]


def place_command(model: ModelToStage) -> str:
    """The `macfleet exo place` line that puts a declared model where the inventory says."""
    place = model.place or KeepPlaced()
    min_nodes = f" --min-nodes {place.min_nodes}" if place.min_nodes else ""
    return f"macfleet exo place {model.name} --sharding {place.sharding} --over {place.transport}{min_nodes} --wait"


def not_placed_findings(mesh: Mesh, placed: Sequence[InstanceView], refused: Mapping[str, str] | None = None
                        ) -> list[Finding]:
    """One error per declared model with no instance; `refused`: why placing it failed just now, by model."""
    have = ", ".join(sorted({i.model for i in placed})) or "none"
    why = refused or {}
    return [Finding(severity="error", code="model-not-placed", nodes=list(mesh.node_names),
                    message=f"{m.name} is declared to run on mesh {mesh.name} (macfleet_models) but exo has no "
                    "instance of it" + (f"; placing it failed: {why[m.name]}" if m.name in why else ""),
                    fix=f"`{place_command(m)}`; where exo refuses, it says why (a model whose files are missing: "
                    "`macfleet rollout model`)",
                    evidence=[f"instances: {have}"])
            for m in not_placed(mesh, placed)]

# ---------------------------------------------------------------------------------------------- a completion


def completion_finding(completion: Completion, nodes: Sequence[str], bound_s: float) -> Finding | None:
    """A completion that gave no token within `bound_s` (or an error) is a failure of the instance's nodes."""
    if completion.answered:
        return None
    why = completion.error or f"no token within {bound_s:g} s"
    return Finding(severity="error", code="inference-failed", nodes=list(nodes),
                   message=f"{completion.model_id} is placed but a completion through it failed: {why}",
                   fix="`macfleet doctor` for the links and runners under it; `macfleet reboot` releases a wedged "
                   "RDMA stack, and the declared models are placed again after it",
                   evidence=[why])


def below_baseline(completion: Completion, figures: ModelFigures | None, min_fraction: float
                   ) -> list[tuple[Phase, float, float]]:
    """(phase, now, baseline) for each rate measured below `min_fraction` of its baseline."""
    if figures is None:
        return []
    out: list[tuple[Phase, float, float]] = []
    for phase, now, before in (("prompt", completion.prompt_tps, figures.prompt_tps),
                               ("generation", completion.generation_tps, figures.generation_tps)):
        if now is not None and now < min_fraction * before:
            out.append((phase, now, before))  # type: ignore[arg-type]
    return out


def slow_finding(completion: Completion, nodes: Sequence[str], baseline: MeshInferenceBaseline | None,
                 min_fraction: float) -> Finding | None:
    """A warning when the completion's tokens/s fell below `min_fraction` of the saved baseline."""
    figures = baseline.models.get(completion.model_id) if baseline else None
    drops = below_baseline(completion, figures, min_fraction)
    if not drops:
        return None
    said = [f"{phase} {now:.1f} tokens/s, {now / before:.0%} of its baseline {before:.1f}"
            for phase, now, before in drops]
    return Finding(severity="warning", code="inference-below-baseline", nodes=list(nodes),
                   message=f"{completion.model_id} answers below {min_fraction:.0%} of its usual speed: "
                   + "; ".join(said) + f" (baseline of {baseline.saved_at})",  # type: ignore[union-attr]
                   fix="`macfleet bench links` to find the slow cable, reseat or replace it; a model placed over "
                   "ring where it was over RDMA is slower too (`macfleet exo status`)",
                   evidence=said)


def baseline_of(results: Sequence[tuple[InstanceView, Completion]], saved_at: str
                ) -> MeshInferenceBaseline | None:
    """The baseline the models that answered with both rates make (one that did not is named by its own
    finding, and has no figure to compare with later); None when none did."""
    good = [(i, c) for i, c in results if c.answered and c.prompt_tps and c.generation_tps]
    if not good:
        return None
    return MeshInferenceBaseline(saved_at=saved_at, models={
        i.model: ModelFigures(prompt_tps=c.prompt_tps, generation_tps=c.generation_tps,  # type: ignore[arg-type]
                              sharding=i.sharding, transport=i.transport, nodes=nodes_of(i))
        for i, c in good})


def inference_findings(inp: InferenceInput, bound_s: float, min_fraction: float) -> list[Finding]:
    """Doctor's view of a mesh's placed models: each that gave no token within `bound_s`, each below
    `min_fraction` of its baseline."""
    out: list[Finding] = []
    nodes = {i.model: nodes_of(i) for i in inp.placed or []}
    for model, c in inp.answers.items():
        where = nodes.get(model, [])
        f = completion_finding(c, where, bound_s) or slow_finding(c, where, inp.baseline, min_fraction)
        if f is not None:
            out.append(f)
    return out
