"""`macfleet bench exo`'s baseline: prompt and generation tokens/s per declared or placed model, kept beside the
inventory as `bench links` keeps its own, and read by doctor's inference check."""

from __future__ import annotations

from pathlib import Path

from macfleet.act.files import read_stored, write_text_atomic
from macfleet.inventory.model import Fleet
from macfleet.judge.inference import BASELINE_FILE, InferenceBaselines, MeshInferenceBaseline


def inference_baseline_path(fleet: Fleet) -> Path:
    return fleet.root / BASELINE_FILE


def load_inference_baselines(fleet: Fleet) -> InferenceBaselines | None:
    """The saved baselines, None when there is none; UsageError naming the file when it is not one of ours."""
    return read_stored(inference_baseline_path(fleet), InferenceBaselines, "an inference baseline",
                       "remove it, then `macfleet bench exo --save-baseline` on a healthy mesh")


def save_inference_baseline(fleet: Fleet, mesh: str, baseline: MeshInferenceBaseline) -> None:
    """This mesh's baseline replaced (atomically), the other meshes' kept."""
    old = load_inference_baselines(fleet)
    merged = InferenceBaselines(meshes={**(old.meshes if old else {}), mesh: baseline})
    write_text_atomic(inference_baseline_path(fleet), merged.model_dump_json(indent=2) + "\n")
