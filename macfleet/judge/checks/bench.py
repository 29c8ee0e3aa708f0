"""The latest `bench links` against the saved baseline (read from the controller's files, not the nodes)."""

from __future__ import annotations

from macfleet.judge.checks.base import (
    Check,
    HealthContext,
    HealthFinding,
    Unknown,
    Verdict,
)
from macfleet.judge.links_bench import links_bench_findings


def check_links_bench(ctx: HealthContext, node: str) -> Verdict:
    """The latest `bench links` against the saved baseline (doctor runs no iperf3): each link's finding is
    reported on its first node. Nothing to say where no baseline was saved."""
    mesh = ctx.mesh_of(node)
    bench = ctx.links_bench.get(mesh.name)
    if bench is None:
        return []
    if bench.problem:
        return Unknown(reason=bench.problem)
    return [HealthFinding(node=node, check="links-bench", severity=f.severity, message=f.message, fix=f.fix,
                          evidence="; ".join(f.evidence))
            for f in links_bench_findings(bench, mesh.name, mesh.settings.bench.min_fraction) if f.nodes[0] == node]


# ------------------------------------------------------------------------------------------- declarations

PROBES = ()
CHECKS = (
    # Read from the controller's files, but a node that does not answer now is not judged on old figures.
    Check(code="links-bench", title="the latest `bench links` has every link at or above its share of the saved "
          "baseline (where one was saved)", order=260, judge=check_links_bench, depends=("reachable",),
          mesh_wide=True),
)
