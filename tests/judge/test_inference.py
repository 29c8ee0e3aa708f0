"""Inference as health on plain data: declared models not placed, a completion's verdict, tokens/s against the
baseline `bench exo` saved."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from macfleet.facts.exoapi import ExoCluster, ExoInstance, ExoShard
from macfleet.inventory.model import Fleet, KeepPlaced, Mesh, ModelToStage, Settings
from macfleet.judge.checks.base import HealthContext, NodeFacts, Unknown
from macfleet.judge.checks.models import check_inference, check_model_placed
from macfleet.judge.inference import (
    Completion,
    InferenceBaselines,
    InferenceInput,
    MeshInferenceBaseline,
    ModelFigures,
    baseline_of,
    completion_finding,
    inference_findings,
    not_placed,
    not_placed_findings,
    place_command,
    slow_finding,
)
from macfleet.judge.placement import InstanceView, ShardView

from .builders import mesh

LLAMA = "mlx-community/Llama-3.2-1B-Instruct-4bit"
QWEN = "mlx-community/Qwen3-0.6B-4bit"


def declaring(*models: ModelToStage) -> Mesh:
    m = mesh("a", "b", "c")
    return m.model_copy(update={"settings": Settings(models=list(models))})


def inst(model: str = LLAMA, nodes=("a", "b", "c"), transport="rdma") -> InstanceView:
    return InstanceView(instance_id=f"i-{model[-4:]}", model=model, sharding="pipeline", transport=transport,
                        ready=True, shards=[ShardView(node=n, rank=r, status="RunnerReady")
                                            for r, n in enumerate(nodes)])


def test_a_declared_model_without_an_instance_is_named_with_the_command_that_places_it() -> None:
    m = declaring(ModelToStage(name=LLAMA, place=KeepPlaced(sharding="tensor", min_nodes=2)),
                  ModelToStage(name=QWEN, place=KeepPlaced()),
                  ModelToStage(name="org/staged-only"))
    assert [d.name for d in not_placed(m, [inst(QWEN)])] == [LLAMA]
    (f,) = not_placed_findings(m, [inst(QWEN)])
    assert (f.code, f.severity, f.nodes) == ("model-not-placed", "error", ["a", "b", "c"])
    assert f"macfleet exo place {LLAMA} --sharding tensor --over rdma --min-nodes 2 --wait" in f.fix
    assert f.evidence == [f"instances: {QWEN}"]


def test_a_model_placed_by_hand_with_another_cut_counts_as_placed_and_undeclared_ones_need_no_instance() -> None:
    m = declaring(ModelToStage(name=LLAMA, place=KeepPlaced(transport="rdma")))
    assert not_placed(m, [inst(LLAMA, transport="ring")]) == []
    assert not_placed_findings(declaring(), []) == []


def test_place_command_without_min_nodes() -> None:
    assert place_command(ModelToStage(name=QWEN, place=KeepPlaced())) == (
        f"macfleet exo place {QWEN} --sharding pipeline --over rdma --wait")


def test_a_completion_with_a_token_is_health_and_one_without_is_a_failure() -> None:
    assert completion_finding(Completion(model_id=LLAMA, tokens=1, seconds=0.4), ["a"], 60) is None
    none = completion_finding(Completion(model_id=LLAMA, tokens=0), ["a", "b"], 60)
    assert none is not None and (none.code, none.severity, none.nodes) == ("inference-failed", "error", ["a", "b"])
    assert "no token within 60 s" in none.message
    err = completion_finding(Completion(model_id=LLAMA, tokens=3, error="HTTP 500: runner failed"), ["a"], 60)
    assert err is not None and "HTTP 500: runner failed" in err.message  # tokens then an error: not an answer


BASE = MeshInferenceBaseline(saved_at="2026-12-01T10:00:00+00:00", models={
    LLAMA: ModelFigures(prompt_tps=900.0, generation_tps=60.0, sharding="pipeline", transport="rdma")})


def test_a_model_at_a_third_of_its_usual_speed_is_a_finding_and_one_at_its_usual_speed_is_not() -> None:
    slow = Completion(model_id=LLAMA, tokens=8, prompt_tps=850.0, generation_tps=20.0)
    f = slow_finding(slow, ["a", "b"], BASE, 0.5)
    assert f is not None and (f.code, f.severity) == ("inference-below-baseline", "warning")
    assert f.evidence == ["generation 20.0 tokens/s, 33% of its baseline 60.0"]
    assert "2026-12-01T10:00:00+00:00" in f.message
    usual = Completion(model_id=LLAMA, tokens=8, prompt_tps=880.0, generation_tps=58.0)
    assert slow_finding(usual, ["a"], BASE, 0.5) is None


def test_no_baseline_or_no_figures_compare_nothing() -> None:
    slow = Completion(model_id=LLAMA, tokens=8, prompt_tps=1.0, generation_tps=1.0)
    assert slow_finding(slow, ["a"], None, 0.5) is None
    assert slow_finding(slow.model_copy(update={"model_id": QWEN}), ["a"], BASE, 0.5) is None  # not measured then
    assert slow_finding(Completion(model_id=LLAMA, tokens=8), ["a"], BASE, 0.5) is None  # exo gave no rates


def test_a_baseline_is_made_from_the_answers_with_both_rates() -> None:
    good = Completion(model_id=LLAMA, tokens=64, prompt_tps=900.0, generation_tps=60.0)
    made = baseline_of([(inst(LLAMA), good)], "2026-12-02T12:00:00+00:00")
    assert made is not None and made.models[LLAMA].generation_tps == 60.0
    assert made.models[LLAMA].nodes == ["a", "b", "c"]
    with_a_failure = baseline_of([(inst(LLAMA), good), (inst(QWEN), Completion(model_id=QWEN, tokens=0))], "t")
    assert with_a_failure is not None and list(with_a_failure.models) == [LLAMA]  # QWEN is named by its finding
    assert baseline_of([(inst(QWEN), Completion(model_id=QWEN, tokens=0))], "t") is None
    assert baseline_of([], "t") is None
    round_trip = InferenceBaselines(meshes={"mesh1": made})
    assert InferenceBaselines.model_validate_json(round_trip.model_dump_json()) == round_trip


def test_doctor_names_a_placed_model_that_gave_no_token_on_its_nodes_and_a_slow_one_against_the_baseline() -> None:
    inp = InferenceInput(placed=[inst(LLAMA, nodes=("a", "b")), inst(QWEN, nodes=("c",))], baseline=BASE, answers={
        LLAMA: Completion(model_id=LLAMA, tokens=16, prompt_tps=900.0, generation_tps=19.0),
        QWEN: Completion(model_id=QWEN, tokens=0, error="HTTP 404: no instance")})
    found = inference_findings(inp, 60, 0.5)
    assert [(f.code, f.nodes) for f in found] == [("inference-below-baseline", ["a", "b"]),
                                                   ("inference-failed", ["c"])]
    healthy = inp.model_copy(update={"answers": {LLAMA: Completion(model_id=LLAMA, tokens=16, prompt_tps=900.0,
                                                                   generation_tps=59.0)}})
    assert inference_findings(healthy, 60, 0.5) == []


# ---------------------------------------------------------------------------------------- doctor's two checks


def _ctx(m: Mesh, cluster: ExoCluster | None, inference=None) -> HealthContext:
    facts = {n: NodeFacts(exo_cluster=cluster, problems={} if cluster else {"exo-state": "curl timed out"})
             for n in m.node_names}
    fleet = Fleet(root=Path("/nonexistent"), meshes=(m,), settings=m.settings)
    return HealthContext(fleet=fleet, meshes=[m], facts=facts, now=datetime.now(UTC), inference=inference or {})


def _cluster(*models: str) -> ExoCluster:
    return ExoCluster(nodes=["id-a", "id-b"], names={"id-a": "a", "id-b": "b"}, instances=[
        ExoInstance(instance_id=f"i{k}", model=model, kind="MlxRing", sharding="Pipeline", shards=[
            ExoShard(node_id="id-a", runner_id="r1", rank=0, status="RunnerReady"),
            ExoShard(node_id="id-b", runner_id="r2", rank=1, status="RunnerReady")]) for k, model in enumerate(models)])


def test_doctor_says_once_on_the_first_node_read_that_a_declared_model_is_not_placed() -> None:
    m = declaring(ModelToStage(name=LLAMA, place=KeepPlaced()))
    ctx = _ctx(m, _cluster(QWEN))
    (f,) = check_model_placed(ctx, "a")
    assert (f.check, f.severity) == ("model-placed", "error") and LLAMA in f.message
    assert check_model_placed(ctx, "b") == []  # mesh-wide: said once
    assert check_model_placed(_ctx(m, _cluster(LLAMA)), "a") == []
    assert check_model_placed(_ctx(declaring(), _cluster()), "a") == []  # nothing declared: nothing to say
    unread = check_model_placed(_ctx(m, None), "a")
    assert unread == Unknown(reason="exo-state: curl timed out")  # could not read is never "not placed"


def test_doctor_reports_the_flows_completions_on_the_node_whose_exo_was_read() -> None:
    m = declaring()
    inp = InferenceInput(node="a", placed=[inst(LLAMA, nodes=("a", "b"))], baseline=BASE, answers={
        LLAMA: Completion(model_id=LLAMA, tokens=16, prompt_tps=900.0, generation_tps=19.0)})
    ctx = _ctx(m, _cluster(LLAMA), {m.name: inp})
    (f,) = check_inference(ctx, "a")
    assert (f.check, f.severity) == ("inference", "warning") and "32% of its baseline" in f.evidence
    assert check_inference(ctx, "b") == []
    broken = {m.name: InferenceInput(node="a", problem="bench-exo.baseline.json is not ours")}
    assert check_inference(_ctx(m, _cluster(), broken), "a") == Unknown(reason="bench-exo.baseline.json is not ours")
