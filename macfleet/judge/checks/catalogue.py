"""The catalogue: every family's probes and checks, gathered. A check is judged in `order` (after the checks it
depends on); its probes are named by key. Nothing else lists checks or probes: doctor, the healer, reboot's
verification, rollout's health gate and the bench all run `flow/checks.run_checks` over this.

A new check is one `Check` in its family's CHECKS (a new fact, one `Probe` in its PROBES and a NodeFacts field);
a new family is a module here and in FAMILIES.
"""

from __future__ import annotations

from macfleet.judge.checks import bench, exo, llama, models, network, rdma, system, updates
from macfleet.judge.checks.base import Check, CheckSpec, Probe

FAMILIES = (system, network, rdma, exo, models, updates, llama, bench)

CHECKS: tuple[Check, ...] = tuple(sorted((c for f in FAMILIES for c in f.CHECKS), key=lambda c: c.order))
CHECK_CODES: tuple[str, ...] = tuple(c.code for c in CHECKS)
BY_CODE: dict[str, Check] = {c.code: c for c in CHECKS}
PROBES: dict[str, Probe] = {p.key: p for f in FAMILIES for p in f.PROBES}


def select_checks(only: list[str] | None) -> list[Check]:
    """The checks to run, in catalogue order; `reachable` always runs (every other check needs it)."""
    if not only:
        return list(CHECKS)
    return [c for c in CHECKS if c.code in only or c.code == "reachable"]


def probes_for(checks: list[Check]) -> list[Probe]:
    """The probes these checks read, each once, in catalogue order."""
    keys = {k for c in checks for k in c.reads}
    return [p for p in PROBES.values() if p.key in keys]


def catalogue_specs() -> list[CheckSpec]:
    """`doctor --list`: every check with its stable code."""
    return [c.spec for c in CHECKS]
