"""What the judge hands back: findings with their fix, changes to make, and reasons for doing nothing.

Shared by every judge module (topology, IP plan, doctor, reboot). Pure data; no I/O.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Severity = Literal["error", "warning", "info"]
SEVERITY_RANK: dict[str, int] = {"error": 0, "warning": 1, "info": 2}


class _Judged(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Finding(_Judged):
    """Something wrong (or worth knowing), on which nodes, said plainly, with what to do about it."""

    severity: Severity
    code: str  # stable, kebab-case: "missing-pair", "slow-link"...
    nodes: list[str]
    message: str
    fix: str
    evidence: list[str] = Field(default_factory=list)  # the observations behind it, for -v and reports


class Change(_Judged):
    """One change to make on one node: what, from which state, to which."""

    node: str
    what: str  # a short imperative: "set en3 to 10.213.0.1/30"
    before: str | None = None
    after: str | None = None


class Noop(_Judged):
    """Nothing to do, and why (a Noop without a reason is a bug)."""

    node: str
    reason: str


class Refusal(_Judged):
    """The judge will not let this go ahead, and why."""

    reason: str
    nodes: list[str] = Field(default_factory=list)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Errors first, then by code and nodes: a stable order for output and tests."""
    return sorted(findings, key=lambda f: (SEVERITY_RANK[f.severity], f.code, f.nodes, f.message))
