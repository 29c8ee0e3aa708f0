"""Models kept placed, and inference as health: after a reboot (the operator's or the healer's) and a rollout,
every model the inventory declares (`macfleet_models` with `place`) is placed again if exo has no instance of
it, and every placed model must give a token within the bound before the mesh counts as healthy.

`keep_placed` is the one function the reboot, the healer (through the reboot) and rollout's health gate call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from macfleet.errors import MacfleetError
from macfleet.inventory.model import Mesh, ModelToStage
from macfleet.judge.inference import (
    Completion,
    PlacedInstance,
    completion_finding,
    not_placed,
    not_placed_findings,
)
from macfleet.judge.model import Finding

RETRY_S = 2.0  # between completions while a model just placed warms up


class Api(Protocol):
    """What keeping models placed asks of exo's API (act/exoapi.py on one node of the mesh)."""

    def instances(self) -> list[PlacedInstance]: ...

    def place(self, model: ModelToStage, timeout_s: float) -> None: ...  # placed and ready, or MacfleetError

    def complete(self, model: str, timeout_s: float) -> Completion: ...  # one short completion, bounded

    def bench(self, model: str, timeout_s: float) -> Completion: ...  # exo's bench endpoint: its tokens/s


@dataclass
class KeptPlaced:
    """What keeping the mesh's models placed found and did."""

    placed_now: list[str] = field(default_factory=list)  # declared models macfleet placed again
    answers: dict[str, Completion] = field(default_factory=dict)  # model -> its last completion
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


def by_model(placed: Sequence[PlacedInstance]) -> dict[str, PlacedInstance]:
    """One instance per model: a completion names a model, and exo picks among its instances."""
    out: dict[str, PlacedInstance] = {}
    for i in placed:
        out.setdefault(i.model_id, i)
    return out


def answering(api: Api, placed: Sequence[PlacedInstance], bound_s: float, *, until: float | None = None,
              clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
              ) -> tuple[dict[str, Completion], list[Finding]]:
    """One short completion through every placed model; with `until` (a monotonic deadline), a model that has
    not answered yet is asked again until then (a model just loaded may still be warming up)."""
    answers: dict[str, Completion] = {}
    findings: list[Finding] = []
    for model, inst in by_model(placed).items():
        while True:
            c = api.complete(model, bound_s)
            if c.answered or until is None or clock() + RETRY_S > until:
                break
            sleep(RETRY_S)
        answers[model] = c
        if (f := completion_finding(c, inst.nodes, bound_s)) is not None:
            findings.append(f)
    return answers, findings


def keep_placed(api: Api, mesh: Mesh, *, place_timeout_s: float, say: Callable[[str], None],
                clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
                ) -> KeptPlaced:
    """Place every declared model exo has no instance of, wait until it is ready, then ask every placed model
    for a token (declared or placed by hand: a model exo holds that cannot answer is not health)."""
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
