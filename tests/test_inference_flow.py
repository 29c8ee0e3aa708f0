"""Models kept placed (flow/placed.py) and `bench exo` (flow/bench_exo.py) against a scripted exo API: what is
placed again, what must answer, what is said when exo refuses or a model gives no token, the baseline saved and
compared. The API itself is proven against the lab's exo stand-in."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from macfleet.errors import Refused, UsageError
from macfleet.flow.bench_exo import bench_exo, inference_baseline_path
from macfleet.flow.placed import keep_placed
from macfleet.inventory.model import Fleet, KeepPlaced, ModelToStage, Settings
from macfleet.judge.inference import Completion
from macfleet.judge.placement import InstanceView, ShardView

from .judge.builders import mesh

LLAMA = "mlx-community/Llama-3.2-1B-Instruct-4bit"
QWEN = "mlx-community/Qwen3-0.6B-4bit"


@dataclass
class FakeApi:
    """exo as a script: which models have an instance, which refuse placement, how many tokens each gives."""

    have: list[str] = field(default_factory=list)
    refuse: dict[str, str] = field(default_factory=dict)
    tokens: dict[str, list[int]] = field(default_factory=dict)  # model -> tokens of successive completions
    rates: dict[str, tuple[float, float]] = field(default_factory=dict)  # model -> bench (prompt, generation)
    failed: set[str] = field(default_factory=set)  # models whose instance shows a RunnerFailed runner
    placed: list[tuple[str, str, str]] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)

    def instances(self) -> list[InstanceView]:
        return [InstanceView(instance_id=f"i{n}", model=m, sharding="pipeline", transport="rdma",
                             ready=m not in self.failed,
                             shards=[ShardView(node=x, rank=r, status="RunnerFailed" if m in self.failed and r
                                               else "RunnerReady") for r, x in enumerate("ab")])
                for n, m in enumerate(self.have)]

    def place(self, model: ModelToStage, timeout_s: float) -> None:
        if model.name in self.refuse:
            raise Refused(self.refuse[model.name])
        self.placed.append((model.name, model.place.sharding, model.place.transport))
        self.have.append(model.name)

    def complete(self, model: str, timeout_s: float) -> Completion:
        self.asked.append(model)
        script = self.tokens.get(model, [4])
        n = script.pop(0) if len(script) > 1 else script[0]
        return Completion(model_id=model, tokens=n, seconds=0.5 if n else None)

    def bench(self, model: str, timeout_s: float, max_tokens: int) -> Completion:
        c = self.complete(model, timeout_s)
        prompt, gen = self.rates.get(model, (900.0, 60.0))
        return c.model_copy(update={"prompt_tps": prompt, "generation_tps": gen}) if c.tokens else c


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def declaring(*models: ModelToStage):
    return mesh("a", "b").model_copy(update={"settings": Settings(models=list(models))})


def run(api: FakeApi, m, timeout_s: float = 600.0):
    clock, said = Clock(), []
    return keep_placed(api, m, place_timeout_s=timeout_s, say=said.append, clock=clock, sleep=clock.sleep), said


def test_a_declared_model_lost_at_reboot_is_placed_again_as_declared_and_must_answer() -> None:
    api = FakeApi(have=[QWEN])
    m = declaring(ModelToStage(name=LLAMA, place=KeepPlaced(sharding="tensor", transport="ring")),
                  ModelToStage(name=QWEN, place=KeepPlaced()), ModelToStage(name="org/staged-only"))
    result, said = run(api, m)
    assert api.placed == [(LLAMA, "tensor", "ring")]  # QWEN was there; the staged-only model is never placed
    assert result.ok and result.placed_now == [LLAMA]
    assert sorted(api.asked) == [LLAMA, QWEN]  # every declared model gives a token, not only the one placed now
    assert said == [f"placing {LLAMA} (tensor, over ring)…"]
    assert "placed again: " + LLAMA in result.detail


def test_a_model_placed_by_hand_must_answer_too_and_nothing_placed_is_nothing_to_do() -> None:
    """Issue 27: health asks every placed model (exo serves a model placed by hand as any other): one that gives
    no token fails the step, never skipped silently; one that answers is named among the answers."""
    api = FakeApi(have=[QWEN], tokens={QWEN: [0]})
    result, _ = run(api, declaring(), timeout_s=10)
    (f,) = result.findings
    assert f.code == "inference-failed" and QWEN in f.message and not result.ok
    assert api.placed == [] and set(api.asked) == {QWEN}  # asked, never placed: it is not declared
    fine = FakeApi(have=[QWEN])
    result, _ = run(fine, declaring(ModelToStage(name=LLAMA, place=KeepPlaced())))
    assert result.ok and fine.placed == [(LLAMA, "pipeline", "rdma")] and sorted(fine.asked) == [LLAMA, QWEN]
    assert result.detail.startswith(f"placed again: {LLAMA}; answering: {QWEN}: 4 token(s)"), result.detail
    assert run(FakeApi(), declaring())[0].detail == "no model declared or placed"


def test_exo_refusing_a_placement_is_a_finding_with_its_reason() -> None:
    api = FakeApi(refuse={LLAMA: "the model's files are not on studio-2"})
    result, _ = run(api, declaring(ModelToStage(name=LLAMA, place=KeepPlaced())))
    (f,) = result.findings
    assert f.code == "model-not-placed"
    assert "placing it failed: the model's files are not on studio-2" in f.message
    assert not result.ok


def test_a_model_warming_up_is_asked_again_until_it_answers_within_the_deadline() -> None:
    api = FakeApi(tokens={LLAMA: [0, 0, 3]})
    result, _ = run(api, declaring(ModelToStage(name=LLAMA, place=KeepPlaced())))
    assert result.ok and api.asked == [LLAMA] * 3 and result.answers[LLAMA].tokens == 3


def test_a_model_whose_runner_failed_is_asked_once_not_until_the_deadline() -> None:
    """A crashed runner does not come back by waiting: its completion's failure is the answer at once (the healer's
    rung then fails and its ladder climbs, rather than waiting out macfleet_exo.place_timeout_s)."""
    api = FakeApi(have=[QWEN], tokens={QWEN: [0]}, failed={QWEN})
    result, _ = run(api, declaring(), timeout_s=1800)
    assert api.asked == [QWEN] and [f.code for f in result.findings] == ["inference-failed"]


def test_doctor_asks_every_placed_model_declared_or_not_once_through_exos_bench(tmp_path: Path,
                                                                              monkeypatch) -> None:
    """doctor's `inference` (flow/placed.inference_inputs): one bench completion per placed model, a model placed
    by hand included, from the instances the pass already read; nothing placed: no request at all."""
    from macfleet.facts.exoapi import ExoCluster, ExoInstance, ExoShard
    from macfleet.flow import placed
    from macfleet.judge.checks.base import NodeFacts

    m = declaring(ModelToStage(name=LLAMA, place=KeepPlaced()))
    fleet = Fleet(root=tmp_path, meshes=(m,), settings=Settings())
    api = FakeApi(have=[LLAMA, QWEN], tokens={QWEN: [0]})
    monkeypatch.setattr(placed, "api_for", lambda f, mesh: api)

    def facts(*models: str) -> dict[str, NodeFacts]:
        cluster = ExoCluster(nodes=["id-a", "id-b"], names={"id-a": "a", "id-b": "b"}, instances=[
            ExoInstance(instance_id=f"i{k}", model=model, kind="MlxJaccl", sharding="Pipeline", shards=[
                ExoShard(node_id=f"id-{n}", runner_id=f"r{k}{n}", rank=r, status="RunnerReady")
                for r, n in enumerate("ab")]) for k, model in enumerate(models)])
        return {n: NodeFacts(exo_cluster=cluster) for n in m.node_names}

    got = placed.inference_inputs(fleet, [m], facts(LLAMA, QWEN, QWEN))
    inp = got[m.name]
    assert inp.node == "a" and sorted(api.asked) == [LLAMA, QWEN]  # once per model, not per instance
    assert inp.answers[QWEN].tokens == 0 and inp.answers[LLAMA].generation_tps == 60.0
    api.asked.clear()
    assert placed.inference_inputs(fleet, [m], facts()) == {} and api.asked == []


def test_a_model_that_never_answers_fails_at_the_deadline() -> None:
    api = FakeApi(tokens={LLAMA: [0]})
    result, _ = run(api, declaring(ModelToStage(name=LLAMA, place=KeepPlaced())), timeout_s=10)
    (f,) = result.findings
    assert f.code == "inference-failed" and "no token within 60 s" in f.message
    assert len(api.asked) <= 6  # bounded by the deadline, not forever


def fleet_at(root: Path) -> Fleet:
    return Fleet(root=root, meshes=(mesh("a", "b"),), settings=Settings())


def test_bench_exo_saves_a_baseline_then_names_a_model_at_a_third_of_it(tmp_path: Path) -> None:
    fleet = fleet_at(tmp_path)
    first = bench_exo(fleet, fleet.meshes[0], FakeApi(have=[LLAMA]), save_baseline=True)
    assert first.saved and first.exit_code == 0 and first.findings == []
    saved = json.loads(inference_baseline_path(fleet).read_text())
    assert saved["meshes"]["mesh1"]["models"][LLAMA]["generation_tps"] == 60.0
    slow = bench_exo(fleet, fleet.meshes[0], FakeApi(have=[LLAMA], rates={LLAMA: (880.0, 20.0)}),
                     save_baseline=False)
    assert [f.code for f in slow.findings] == ["inference-below-baseline"] and slow.exit_code == 1
    assert slow.json_payload()["models"][0]["generation_tps"] == 20.0
    assert slow.json_payload()["baseline"]["saved_at"] == saved["meshes"]["mesh1"]["saved_at"]


def test_bench_exo_keeps_the_figures_it_has_and_measures_nothing_when_nothing_is_placed(tmp_path: Path) -> None:
    fleet = fleet_at(tmp_path)
    part = bench_exo(fleet, fleet.meshes[0], FakeApi(have=[LLAMA, QWEN], tokens={QWEN: [0]}), save_baseline=True)
    assert part.saved and [f.code for f in part.findings] == ["inference-failed"] and part.exit_code == 1
    assert list(json.loads(inference_baseline_path(fleet).read_text())["meshes"]["mesh1"]["models"]) == [LLAMA]
    inference_baseline_path(fleet).unlink()
    none = bench_exo(fleet, fleet.meshes[0], FakeApi(have=[QWEN], tokens={QWEN: [0]}), save_baseline=True)
    assert not none.saved and none.not_saved == "no model gave exo's figures"
    assert not inference_baseline_path(fleet).exists()
    empty = bench_exo(fleet, fleet.meshes[0], FakeApi(), save_baseline=True)
    assert empty.exit_code == 1 and empty.not_saved == "no model is placed"


def test_a_baseline_file_that_is_not_ours_is_refused_before_anything_runs(tmp_path: Path) -> None:
    fleet = fleet_at(tmp_path)
    inference_baseline_path(fleet).write_text('{"version": 1, "meshes": {"mesh1": {"saved_at": 3}}}')
    api = FakeApi(have=[LLAMA])
    with pytest.raises(UsageError, match="not an inference baseline macfleet wrote"):
        bench_exo(fleet, fleet.meshes[0], api, save_baseline=True)
    assert api.asked == []
