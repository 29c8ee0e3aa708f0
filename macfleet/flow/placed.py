"""Models kept placed, and inference as health: after a reboot (the operator's or the healer's), the healer's
restart of exo and a rollout, every model the inventory declares (`macfleet_models` with `place`) is placed again
if exo has no instance of it, and every model placed on the mesh (declared or placed by hand: exo serves them
alike) must give a token within the bound before the mesh counts as healthy.

`keep_placed` is the one function the reboot, the healer (its reboot and its exo restart) and rollout's health
gate call; doctor's `inference` check asks the same models (`inference_inputs`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from macfleet.act.files import read_stored, write_text_atomic
from macfleet.errors import MacfleetError
from macfleet.inventory.model import Fleet, KeepPlaced, Mesh, ModelToStage
from macfleet.judge.checks.base import NodeFacts
from macfleet.judge.inference import (
    BASELINE_FILE,
    Completion,
    InferenceBaselines,
    InferenceInput,
    MeshInferenceBaseline,
    completion_finding,
    nodes_of,
    not_placed,
    not_placed_findings,
    placed_on,
)
from macfleet.judge.model import Finding
from macfleet.judge.placement import InstanceView

RETRY_S = 2.0  # between completions while a model just placed warms up
MODELS_PHASE = "models placed and answering"  # the step reboot and rollout report


class Api(Protocol):
    """What keeping models placed asks of exo's API (act/exoapi.py on one node of the mesh)."""

    def instances(self) -> list[InstanceView]: ...

    def place(self, model: ModelToStage, timeout_s: float) -> None: ...  # placed and ready, or MacfleetError

    def complete(self, model: str, timeout_s: float) -> Completion: ...  # one short completion, bounded

    def bench(self, model: str, timeout_s: float, max_tokens: int) -> Completion: ...  # exo's own tokens/s


@dataclass
class KeptPlaced:
    """What keeping the mesh's models placed found and did."""

    placed_now: list[str] = field(default_factory=list)  # declared models macfleet placed again
    answers: dict[str, Completion] = field(default_factory=dict)  # every placed model -> its last completion
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def detail(self) -> str:
        if self.findings:
            return "; ".join(f.message for f in self.findings)
        if not self.answers:
            return "no model declared or placed"
        said = [f"{m}: {c.tokens} token(s) in {c.seconds:.1f} s" if c.seconds is not None else m
                for m, c in self.answers.items()]
        placed = f"placed again: {', '.join(self.placed_now)}; " if self.placed_now else ""
        return placed + "answering: " + "; ".join(said)


def by_model(placed: Sequence[InstanceView]) -> dict[str, InstanceView]:
    """One instance per model: a completion names a model, and exo picks among its instances."""
    out: dict[str, InstanceView] = {}
    for i in placed:
        out.setdefault(i.model, i)
    return out


def answering(api: Api, placed: Sequence[InstanceView], bound_s: float, *, until: float | None = None,
              clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
              ) -> tuple[dict[str, Completion], list[Finding]]:
    """One short completion through every placed model; with `until` (a monotonic deadline), a model that has
    not answered yet is asked again until then (a model just loaded may still be warming up), unless a runner of
    its instance failed (a crashed runner does not come back by waiting: its failure is the answer)."""
    answers: dict[str, Completion] = {}
    findings: list[Finding] = []
    for model, inst in by_model(placed).items():
        while True:
            c = api.complete(model, bound_s)
            if c.answered or until is None or inst.failed or clock() + RETRY_S > until:
                break
            sleep(RETRY_S)
        answers[model] = c
        if (f := completion_finding(c, nodes_of(inst), bound_s)) is not None:
            findings.append(f)
    return answers, findings


def keep_placed(api: Api, mesh: Mesh, *, place_timeout_s: float, say: Callable[[str], None],
                clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
                ) -> KeptPlaced:
    """Place every declared model exo has no instance of, wait until it is ready, then ask every placed model
    (declared or placed by hand) for a token: a model exo holds that cannot answer is not health."""
    out = KeptPlaced()
    until = clock() + place_timeout_s
    refused: dict[str, str] = {}
    for m in not_placed(mesh, api.instances()):
        say(f"placing {m.name} ({m.place.sharding}, over {m.place.transport})…")  # type: ignore[union-attr]
        try:
            api.place(m, max(1.0, until - clock()))
            out.placed_now.append(m.name)
        except MacfleetError as exc:
            refused[m.name] = exc.message
    placed = api.instances()
    out.findings += not_placed_findings(mesh, placed, refused)
    out.answers, failed = answering(api, placed, mesh.settings.probes.completion_timeout_s, until=until,
                                    clock=clock, sleep=sleep)
    out.findings += failed
    return out


def models_answer(fleet: Fleet, mesh: Mesh, say: Callable[[str], None]) -> tuple[bool, str]:
    """The step reboot, the healer (its reboot, its exo restart) and rollout's health gate take once exo is back:
    the declared models placed again, a token through every placed model. (healthy, what it found)."""
    try:
        result = keep_placed(api_for(fleet, mesh), mesh, place_timeout_s=mesh.settings.exo.place_timeout_s, say=say)
    except MacfleetError as exc:  # exo's API could not be asked at all: not healthy, and why
        return False, exc.message
    return result.ok, result.detail


# ------------------------------------------------------------------------------------- the baseline, kept


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


# ------------------------------------------------------------------------------------------- exo's API, for real

PROBE_PROMPT = "Reply with the single word: ready"  # a short completion: is a token coming through at all?
PROBE_TOKENS = 16  # enough tokens for a generation rate, few enough to keep a probe short
BENCH_PROMPT = ("Explain in plain words how a pipeline of computers, each holding some layers of a language model, "
                "passes a request from one to the next and returns the answer, and where time is lost on the way.")
BENCH_TOKENS = 128


@dataclass
class MeshApi:
    """`Api` through `macfleet exo`'s own flows (flow/exo.py): exo's API on the first node of the mesh that logs
    in, over its SSH login."""

    fleet: Fleet
    mesh: Mesh

    def instances(self) -> list[InstanceView]:
        from macfleet.flow import exo

        with exo.api_on(self.fleet, self.mesh) as api:
            return placed_on(self.mesh, exo.cluster(api))

    def place(self, model: ModelToStage, timeout_s: float) -> None:
        from macfleet.flow import exo

        p = model.place or KeepPlaced()
        exo.place(self.fleet, model.name, mesh=self.mesh.name, sharding=p.sharding, transport=p.transport,
                  min_nodes=p.min_nodes or 1, wait=True, timeout_s=timeout_s)

    def complete(self, model: str, timeout_s: float) -> Completion:
        from macfleet.flow import exo

        try:
            r = exo.chat(self.fleet, model, PROBE_PROMPT, mesh=self.mesh.name, max_tokens=PROBE_TOKENS,
                         timeout_s=timeout_s)
        except MacfleetError as exc:
            return Completion(model_id=model, tokens=0, error=exc.message)
        return Completion(model_id=model, tokens=r.generation_tokens or 0, seconds=r.seconds,
                          prompt_tps=r.prompt_tps, generation_tps=r.generation_tps)

    def bench(self, model: str, timeout_s: float, max_tokens: int = BENCH_TOKENS) -> Completion:
        """exo's `/bench/chat/completions`: the tokens/s are exo's own figures, not timed here."""
        from macfleet.facts.exoapi import parse_bench_answer
        from macfleet.flow import exo

        body = {"model": model, "messages": [{"role": "user", "content": BENCH_PROMPT}], "max_tokens": max_tokens}
        started = time.monotonic()
        try:
            with exo.api_on(self.fleet, self.mesh) as api:
                stats = parse_bench_answer(api.json("POST", "/bench/chat/completions", body=body,
                                                    timeout_s=timeout_s))
        except MacfleetError as exc:
            return Completion(model_id=model, tokens=0, error=exc.message)
        return Completion(model_id=model, tokens=stats.generation_tokens, seconds=time.monotonic() - started,
                          prompt_tps=stats.prompt_tps, generation_tps=stats.generation_tps)


def api_for(fleet: Fleet, mesh: Mesh) -> Api:
    return MeshApi(fleet, mesh)


def inference_inputs(fleet: Fleet, meshes: Sequence[Mesh], facts: Mapping[str, NodeFacts]
                     ) -> dict[str, InferenceInput]:
    """Doctor's inference check, per mesh: the instances the pass read on the mesh's reporting node (no second
    read), then one short measured completion through each placed model, declared or placed by hand (exo's bench
    endpoint, the same prompt as `bench exo`, so its figures compare with that baseline). A mesh with nothing
    placed costs nothing."""
    out: dict[str, InferenceInput] = {}
    for mesh in meshes:
        node = next((n for n in mesh.node_names if facts.get(n) is not None and facts[n].exo_cluster is not None),
                    None)
        if node is None:
            continue  # exo's checks say why its /state could not be read
        placed = placed_on(mesh, facts[node].exo_cluster)  # type: ignore[arg-type]
        if not placed:
            continue  # nothing placed: model-placed says so where a declared model should be
        try:
            baselines = load_inference_baselines(fleet)
        except MacfleetError as exc:
            out[mesh.name] = InferenceInput(node=node, placed=placed, problem=exc.message)
            continue
        api, bound = api_for(fleet, mesh), mesh.settings.probes.completion_timeout_s
        answers = {model: api.bench(model, bound, PROBE_TOKENS) for model in by_model(placed)}
        out[mesh.name] = InferenceInput(node=node, placed=placed, answers=answers,
                                        baseline=baselines.meshes.get(mesh.name) if baselines else None)
    return out
