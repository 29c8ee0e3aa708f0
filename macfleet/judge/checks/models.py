"""The models a mesh runs: every model the inventory declares (`macfleet_models` with `place`) has an exo
instance, read from the /state exo's checks read; every placed model answers a short completion within the bound,
at or above its share of the `bench exo` baseline (asked by the flow, flow/placed.inference_inputs). Mesh-wide:
said once, on the node whose exo was read."""

from __future__ import annotations

from macfleet.inventory.model import Mesh
from macfleet.judge.checks.base import Check, HealthContext, HealthFinding, Unknown, Verdict
from macfleet.judge.inference import inference_findings, not_placed_findings, placed_on
from macfleet.judge.model import Finding


def reporter(ctx: HealthContext, mesh: Mesh) -> str | None:
    """The first node of the mesh (inventory order) whose exo /state was read: where mesh-wide findings go."""
    return next((n for n in mesh.node_names if ctx.up(n) and ctx.facts[n].exo_cluster is not None), None)


def _said(node: str, check: str, findings: list[Finding]) -> list[HealthFinding]:
    return [HealthFinding(node=node, check=check, severity=f.severity, message=f.message, fix=f.fix,
                          evidence="; ".join(f.evidence)) for f in findings]


def check_model_placed(ctx: HealthContext, node: str) -> Verdict:
    mesh = ctx.mesh_of(node)
    if not mesh.settings.kept_placed:
        return []
    cluster = ctx.facts[node].exo_cluster
    if cluster is None:
        return Unknown(reason=ctx.facts[node].why("exo-state"))
    if node != reporter(ctx, mesh):
        return []
    return _said(node, "model-placed", not_placed_findings(mesh, placed_on(mesh, cluster)))


def check_inference(ctx: HealthContext, node: str) -> Verdict:
    mesh = ctx.mesh_of(node)
    inp = ctx.inference.get(mesh.name)
    if inp is None or inp.node != node:
        return []
    if inp.problem:
        return Unknown(reason=inp.problem)
    return _said(node, "inference", inference_findings(inp, mesh.settings.probes.completion_timeout_s,
                                                       mesh.settings.bench.inference_min_fraction))


# ------------------------------------------------------------------------------------------- declarations

PROBES = ()
_NEEDS = ("reachable", "exo-running")
CHECKS = (
    Check(code="model-placed", title="every model the inventory declares (macfleet_models with `place`) has an exo "
          "instance", order=156, judge=check_model_placed, reads=("exo-state",), depends=_NEEDS, mesh_wide=True),
    Check(code="inference", title="every placed model gives a token within probes.completion_timeout_s, at or "
          "above its share of the `bench exo` baseline", order=157, judge=check_inference, reads=("exo-state",),
          depends=_NEEDS, mesh_wide=True),
)
