"""`bench links`: which Thunderbolt links to measure and in which rounds, what a measurement says, and how it
compares with the saved baseline.

A round measures links that share no node, so each Mac runs one iperf3 at a time and a link's figure is its
own, not its share of a busy Mac: a full mesh of n Macs takes n-1 rounds (n even) or n (n odd), not n(n-1)/2.

Pure: plan and outputs in, results, comparisons and findings out. No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from macfleet.facts.bench import Iperf3Result, PingSummary
from macfleet.inventory.model import Mesh
from macfleet.judge.ipplan import IpPlan
from macfleet.judge.model import Finding

Direction = Literal["a_to_b", "b_to_a"]
BASELINE_FILE = "bench-links.baseline.json"  # beside the inventory's hosts.yml
LATEST_FILE = "bench-links.latest.json"  # the last run of each mesh, beside it (what doctor reports)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BenchLink(_Model):
    """A cabled pair to measure: `a` comes first in the inventory; each end's port and planned address."""

    a: str
    b: str
    a_port: str
    b_port: str
    a_address: str
    b_address: str

    @property
    def key(self) -> str:
        return f"{self.a}~{self.b}"


class LinkResult(_Model):
    a: str
    b: str
    a_port: str | None = None
    b_port: str | None = None
    a_to_b_gbps: float | None = None  # None: not measured (see problems)
    b_to_a_gbps: float | None = None
    rtt_ms: float | None = None
    problems: list[str] = Field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.a}~{self.b}"

    def gbps(self, direction: Direction) -> float | None:
        return self.a_to_b_gbps if direction == "a_to_b" else self.b_to_a_gbps


class BaselineLink(_Model):
    a_to_b_gbps: float
    b_to_a_gbps: float
    rtt_ms: float | None = None


class MeshBaseline(_Model):
    saved_at: str  # ISO 8601, UTC
    duration_s: float
    links: dict[str, BaselineLink]  # "a~b" -> figures


class Baselines(_Model):
    """The file beside the inventory: one baseline per mesh."""

    version: Literal[1] = 1
    meshes: dict[str, MeshBaseline] = Field(default_factory=dict)


class LatestRun(_Model):
    measured_at: str  # ISO 8601, UTC
    duration_s: float
    links: list[LinkResult]


class LatestRuns(_Model):
    """The file beside the inventory: the latest `bench links` of each mesh."""

    version: Literal[1] = 1
    meshes: dict[str, LatestRun] = Field(default_factory=dict)


class LinksBenchInput(_Model):
    """What doctor's links-bench check reads: the saved baselines and the mesh's latest run (None: no run)."""

    baselines: Baselines = Field(default_factory=Baselines)
    latest: LatestRun | None = None
    problem: str | None = None  # why the files could not be read: the check cannot tell


class BelowBaseline(_Model):
    a: str
    b: str
    direction: Direction
    gbps: float
    baseline_gbps: float

    @property
    def fraction(self) -> float:
        return self.gbps / self.baseline_gbps if self.baseline_gbps > 0 else 0.0

    @property
    def text(self) -> str:
        src, dst = (self.a, self.b) if self.direction == "a_to_b" else (self.b, self.a)
        return (f"{src} → {dst}: {self.gbps:.2f} Gb/s, {self.fraction:.0%} of its baseline "
                f"{self.baseline_gbps:.2f} Gb/s")


# ------------------------------------------------------------------------------------------------ what to run


def links_to_bench(mesh: Mesh, plan: IpPlan) -> tuple[list[BenchLink], list[LinkResult]]:
    """Every pair of the mesh whose live cable the plan is bound to; the others as results that say why they
    were not measured (a pair with no cable is never a clean result)."""
    out: list[BenchLink] = []
    unmeasured: list[LinkResult] = []
    for lk in plan.links:
        if lk.mesh != mesh.name:
            continue
        if lk.a.port is None or lk.b.port is None:
            unmeasured.append(LinkResult(a=lk.a.node, b=lk.b.node, problems=["no live cable between them: "
                                                                            "not measured"]))
            continue
        out.append(BenchLink(a=lk.a.node, b=lk.b.node, a_port=lk.a.port, b_port=lk.b.port,
                             a_address=lk.a.address, b_address=lk.b.address))
    return out, unmeasured


def schedule_rounds(pairs: Sequence[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Rounds of pairs in which no node appears twice, every pair exactly once, in few rounds: the circle
    method (one node fixed, the others rotating) gives a full mesh its minimum, n-1 rounds for n even and n for
    n odd; pairs it does not place (a second cable between two nodes) go first-fit after. Order is stable."""
    nodes = list(dict.fromkeys(n for p in pairs for n in p))
    todo = list(pairs)
    circle = nodes + ([None] if len(nodes) % 2 else [])
    rounds: list[list[tuple[str, str]]] = []
    for r in range(max(len(circle) - 1, 0)):
        ring = [circle[0], *(circle[1:][r:] + circle[1:][:r])]
        wanted = {frozenset((ring[i], ring[-1 - i])) for i in range(len(ring) // 2)}
        this = [p for p in todo if frozenset(p) in wanted and p[0] != p[1]]
        seen: set[frozenset] = set()
        this = [p for p in this if not (frozenset(p) in seen or seen.add(frozenset(p)))]  # one cable per pair
        for p in this:
            todo.remove(p)
        rounds.append(this)
    for p in todo:  # leftovers: first round where neither node is busy
        for rnd in rounds:
            if not any(set(p) & set(q) for q in rnd):
                rnd.append(p)
                break
        else:
            rounds.append([p])
    return [r for r in rounds if r]


# ------------------------------------------------------------------------------------------ what it measured


def link_result(link: BenchLink, iperf: Iperf3Result | None, ping: PingSummary | None,
                problems: Sequence[str] = ()) -> LinkResult:
    """One link's figures; anything missing is None with the reason in `problems`."""
    problems = list(problems)
    fwd = rev = None
    if iperf is not None:
        if iperf.error:
            problems.append(f"iperf3: {iperf.error}")
        fwd = iperf.forward_bps / 1e9 if iperf.forward_bps is not None else None
        rev = iperf.reverse_bps / 1e9 if iperf.reverse_bps is not None else None
        if not iperf.error and (fwd is None or rev is None):
            problems.append("iperf3 gave no figure for one direction")
    rtt = None
    if ping is not None:
        rtt = ping.avg_ms
        if ping.received == 0:
            problems.append(f"ping {link.b_address} from {link.a}: no reply to {ping.transmitted}")
    return LinkResult(a=link.a, b=link.b, a_port=link.a_port, b_port=link.b_port, a_to_b_gbps=fwd, b_to_a_gbps=rev,
                      rtt_ms=rtt, problems=problems)


def below_baseline(results: Sequence[LinkResult], baseline: MeshBaseline | None, min_fraction: float
                   ) -> list[BelowBaseline]:
    """Each direction of each link measured below `min_fraction` of its baseline (links the baseline does
    not know are not compared; a direction not measured is a problem of its own, said by its result)."""
    if baseline is None:
        return []
    out = []
    for r in results:
        base = baseline.links.get(r.key)
        if base is None:
            continue
        for direction, before in (("a_to_b", base.a_to_b_gbps), ("b_to_a", base.b_to_a_gbps)):
            now = r.gbps(direction)  # type: ignore[arg-type]
            if now is not None and now < min_fraction * before:
                out.append(BelowBaseline(a=r.a, b=r.b, direction=direction, gbps=now,  # type: ignore[arg-type]
                                         baseline_gbps=before))
    return out


def baseline_of(results: Sequence[LinkResult], saved_at: str, duration_s: float) -> MeshBaseline | None:
    """The baseline these results make, or None when a link was not measured both ways (a baseline with a gap
    would later hide that link)."""
    if not results or any(r.a_to_b_gbps is None or r.b_to_a_gbps is None for r in results):
        return None
    return MeshBaseline(saved_at=saved_at, duration_s=duration_s, links={
        r.key: BaselineLink(a_to_b_gbps=r.a_to_b_gbps, b_to_a_gbps=r.b_to_a_gbps, rtt_ms=r.rtt_ms)  # type: ignore
        for r in results})


def baseline_findings(results: Sequence[LinkResult], baselines: Baselines | None, mesh: str,
                      min_fraction: float) -> list[Finding]:
    """For a doctor check: one finding per link below its baseline, and per link that could not be measured."""
    base = baselines.meshes.get(mesh) if baselines else None
    out = []
    by_link: dict[tuple[str, str], list[BelowBaseline]] = {}
    for d in below_baseline(results, base, min_fraction):
        by_link.setdefault((d.a, d.b), []).append(d)
    for (a, b), drops in by_link.items():
        out.append(Finding(severity="warning", code="link-below-baseline", nodes=[a, b],
                           message=f"the Thunderbolt link {a} ↔ {b} is below {min_fraction:.0%} of its baseline: "
                           + "; ".join(d.text for d in drops),
                           fix=f"reseat or replace the cable between {a} and {b} (a Thunderbolt 5 cable, 80 Gb/s), "
                           "then `macfleet bench links` again", evidence=[d.text for d in drops]))
    for r in results:
        if r.problems:
            out.append(Finding(severity="warning", code="link-not-measured", nodes=[r.a, r.b],
                               message=f"the Thunderbolt link {r.a} ↔ {r.b} could not be measured: "
                               + "; ".join(r.problems),
                               fix=f"`macfleet topology check` for the cable, and check that iperf3 is installed on "
                               f"{r.a} and {r.b} (`brew install iperf3`)", evidence=list(r.problems)))
    return out


def bench_exit_code(results: Sequence[LinkResult], below: Sequence[BelowBaseline]) -> int:
    return 1 if below or any(r.problems for r in results) else 0


def results_by_pair(results: Sequence[LinkResult]) -> Mapping[frozenset, LinkResult]:
    return {frozenset((r.a, r.b)): r for r in results}


def links_bench_findings(bench: LinksBenchInput, mesh: str, min_fraction: float) -> list[Finding]:
    """Doctor's view of the latest run: its baseline findings, each saying when it was measured; none when the
    mesh has no baseline or no run (doctor measures nothing itself)."""
    if bench.latest is None or mesh not in bench.baselines.meshes:
        return []
    when = f"`macfleet bench links` at {bench.latest.measured_at}"
    return [f.model_copy(update={"message": f"{f.message} ({when})", "evidence": [*f.evidence, when]})
            for f in baseline_findings(bench.latest.links, bench.baselines, mesh, min_fraction)]
