"""`macfleet bench exo`'s baseline: prompt and generation tokens/s per declared or placed model, kept beside the
inventory as `bench links` keeps its own, and read by doctor's inference check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from macfleet.errors import EXIT_OK, EXIT_PROBLEMS
from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge.inference import (
    Completion,
    InferenceInput,
    MeshInferenceBaseline,
    baseline_of,
    inference_findings,
    nodes_of,
)
from macfleet.judge.model import Finding
from macfleet.judge.placement import InstanceView

from .placed import (
    BENCH_TOKENS,
    Api,
    by_model,
    inference_baseline_path,
    load_inference_baselines,
    save_inference_baseline,
)


@dataclass
class BenchExoRun:
    mesh: str
    measured: list[tuple[InstanceView, Completion]]
    findings: list[Finding]  # a model that gave no token, one below its baseline
    min_fraction: float
    baseline_path: Path
    baseline: MeshInferenceBaseline | None  # what the figures were compared with
    saved: bool = False
    not_saved: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_PROBLEMS if self.findings or not self.measured else EXIT_OK

    def json_payload(self) -> dict[str, Any]:
        return {
            "mesh": self.mesh,
            "models": [{"model": i.model, "instance": i.instance_id, "sharding": i.sharding,
                        "transport": i.transport, "nodes": nodes_of(i), "tokens": c.tokens, "seconds": c.seconds,
                        "prompt_tps": c.prompt_tps, "generation_tps": c.generation_tps, "error": c.error}
                       for i, c in self.measured],
            "baseline": {"path": str(self.baseline_path), "saved_at": self.baseline.saved_at,
                         "min_fraction": self.min_fraction} if self.baseline else None,
            "findings": [f.model_dump() for f in self.findings],
            "saved": self.saved,
        }


def bench_exo(fleet: Fleet, mesh: Mesh, api: Api, *, save_baseline: bool,
              now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> BenchExoRun:
    """Every placed model's prompt and generation tokens/s through exo's bench endpoint, one model at a time
    (they share the mesh), compared with the saved baseline or saved as it."""
    baselines = load_inference_baselines(fleet)  # a broken file is refused before anything runs
    base = baselines.meshes.get(mesh.name) if baselines else None
    fraction = mesh.settings.bench.inference_min_fraction
    bound = mesh.settings.probes.completion_timeout_s
    placed = list(by_model(api.instances()).values())
    measured = [(i, api.bench(i.model, bound, BENCH_TOKENS)) for i in placed]
    findings = inference_findings(InferenceInput(placed=placed, answers={i.model: c for i, c in measured},
                                                 baseline=base), bound, fraction)  # as doctor judges them
    run = BenchExoRun(mesh=mesh.name, measured=measured, findings=findings, min_fraction=fraction,
                      baseline_path=inference_baseline_path(fleet), baseline=base)
    if save_baseline:
        new = baseline_of(measured, now().isoformat(timespec="seconds"))
        if new is None:
            run.not_saved = "no model is placed" if not measured else "no model gave exo's figures"
        else:
            save_inference_baseline(fleet, mesh.name, new)
            run.saved = True
    return run
