"""`macfleet bench links`: every Thunderbolt link of a mesh measured each way (iperf3) with its latency (ping),
in rounds of links that share no node; compared with the baseline kept beside the inventory, or saved as it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from macfleet.act.bench import LinkRaw, measure_rounds
from macfleet.act.files import read_stored, write_text_atomic
from macfleet.errors import FactsParseError, UnreachableError, UsageError
from macfleet.facts.bench import Iperf3Result, PingSummary, parse_iperf3_json, parse_ping
from macfleet.flow.topology import plan_live
from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge.links_bench import (
    BASELINE_FILE,
    LATEST_FILE,
    Baselines,
    BelowBaseline,
    BenchLink,
    LatestRun,
    LatestRuns,
    LinkResult,
    LinksBenchInput,
    MeshBaseline,
    baseline_of,
    below_baseline,
    bench_exit_code,
    link_result,
    links_to_bench,
    schedule_rounds,
)


@dataclass
class BenchRun:
    mesh: str
    nodes: list[str]
    duration_s: int
    rounds: list[list[str]]  # link keys "a~b", round by round
    results: list[LinkResult]
    below: list[BelowBaseline]
    min_fraction: float
    baseline_path: Path
    baseline: MeshBaseline | None  # what the results were compared with
    saved: bool = False
    not_saved: str | None = None  # why --save-baseline saved nothing
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return bench_exit_code(self.results, self.below)

    def json_payload(self) -> dict[str, Any]:
        return {
            "mesh": self.mesh,
            "duration_s": self.duration_s,
            "rounds": self.rounds,
            "links": [{"a": r.a, "b": r.b, "a_port": r.a_port, "b_port": r.b_port, "a_to_b_gbps": r.a_to_b_gbps,
                       "b_to_a_gbps": r.b_to_a_gbps, "rtt_ms": r.rtt_ms, "problems": list(r.problems)}
                      for r in self.results],
            "baseline": {"path": str(self.baseline_path), "saved_at": self.baseline.saved_at,
                         "min_fraction": self.min_fraction} if self.baseline else None,
            "below_baseline": [{"a": d.a, "b": d.b, "direction": d.direction, "gbps": d.gbps,
                                "baseline_gbps": d.baseline_gbps} for d in self.below],
            "saved": self.saved,
        }


def baseline_path(fleet: Fleet) -> Path:
    return fleet.root / BASELINE_FILE


def latest_path(fleet: Fleet) -> Path:
    return fleet.root / LATEST_FILE


def load_baselines(path: Path) -> Baselines | None:
    """The saved baselines, None when there is no file; UsageError naming the file when it is not one of ours."""
    return read_stored(path, Baselines, "a baseline",
                       "remove it, then `macfleet bench links --save-baseline` on a healthy mesh")


def load_latest(path: Path) -> LatestRuns | None:
    return read_stored(path, LatestRuns, "a bench result", "remove it, then `macfleet bench links`")


def links_bench_inputs(fleet: Fleet, meshes: Sequence[Mesh]) -> dict[str, LinksBenchInput]:
    """What doctor's links-bench check reads, per mesh that has a baseline; a file that cannot be read is the
    check's reason to say it cannot tell, never a crash of doctor."""
    try:
        baselines = load_baselines(baseline_path(fleet))
        latest = load_latest(latest_path(fleet))
    except (UsageError, OSError) as exc:
        why = getattr(exc, "message", None) or str(exc)
        return {m.name: LinksBenchInput(problem=why) for m in meshes}
    if baselines is None:
        return {}
    return {m.name: LinksBenchInput(baselines=baselines, latest=latest.meshes.get(m.name) if latest else None)
            for m in meshes if m.name in baselines.meshes}


def _save_latest(fleet: Fleet, mesh: str, run: LatestRun) -> None:
    """Keep this run as the mesh's latest (atomically; other meshes' runs are kept). A file that is not ours
    is replaced: it only ever holds the last run."""
    try:
        old = load_latest(latest_path(fleet))
    except UsageError:
        old = None
    merged = LatestRuns(meshes={**(old.meshes if old else {}), mesh: run})
    write_text_atomic(latest_path(fleet), merged.model_dump_json(indent=2) + "\n")


def _parsed(link: BenchLink, raw: LinkRaw) -> LinkResult:
    problems = list(raw.problems)
    iperf: Iperf3Result | None = None
    ping: PingSummary | None = None
    if raw.iperf is not None:
        try:
            iperf = parse_iperf3_json(raw.iperf)
        except FactsParseError as exc:
            problems.append(f"iperf3: {exc.message}")
    if raw.ping is not None:
        try:
            ping = parse_ping(raw.ping)
        except FactsParseError as exc:
            problems.append(f"ping: {exc.message}")
    return link_result(link, iperf, ping, problems)


def bench_links(fleet: Fleet, mesh: Mesh, *, duration_s: int, save_baseline: bool,
                on_round: Callable[[int, Sequence[BenchLink]], None] = lambda i, r: None,
                now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> BenchRun:
    path = baseline_path(fleet)
    baselines = load_baselines(path)  # a broken file is refused before anything runs
    live = plan_live(fleet, [mesh])
    if live.gathered.unreachable:
        raise UnreachableError(live.unreachable, hint="no link was measured")
    links, unmeasured = links_to_bench(mesh, live.plan)
    by_key = {lk.key: lk for lk in links}
    rounds = [[by_key[f"{a}~{b}"] for a, b in rnd] for rnd in schedule_rounds([(lk.a, lk.b) for lk in links])]
    raws = measure_rounds(fleet, rounds, mesh.settings.bench.iperf3_port, duration_s, on_round=on_round)
    measured = {lk.key: _parsed(lk, raws[lk.key]) for lk in links}
    order = [f"{lk.a.node}~{lk.b.node}" for lk in live.plan.links if lk.mesh == mesh.name]
    results = sorted([*measured.values(), *unmeasured], key=lambda r: order.index(r.key) if r.key in order else 0)
    base = baselines.meshes.get(mesh.name) if baselines else None
    fraction = mesh.settings.bench.min_fraction
    run = BenchRun(mesh=mesh.name, nodes=mesh.node_names, duration_s=duration_s,
                   rounds=[[lk.key for lk in r] for r in rounds], results=results,
                   below=below_baseline(results, base, fraction), min_fraction=fraction, baseline_path=path,
                   baseline=base)
    measured_at = now().isoformat(timespec="seconds")
    _save_latest(fleet, mesh.name, LatestRun(measured_at=measured_at, duration_s=duration_s, links=results))
    if save_baseline:
        new = baseline_of(results, measured_at, duration_s)
        if new is None:
            run.not_saved = "a link was not measured both ways; a baseline with a gap would hide it later"
        else:
            merged = Baselines(meshes={**(baselines.meshes if baselines else {}), mesh.name: new})
            write_text_atomic(path, merged.model_dump_json(indent=2) + "\n")
            run.saved = True
    return run
