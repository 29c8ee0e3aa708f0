"""What the observations of an offline cable match (`topology links`) mean, and what to do about each.

Pure: `facts.links` describes what the captures show; this decides how serious it is and names the fix.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from macfleet.facts.links import Link, LinkObservation, LinksResult, ObservationCode
from macfleet.judge.model import Severity


class LinkVerdict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    severity: Severity
    code: ObservationCode
    nodes: list[str]
    message: str
    fix: str | None = None


class LinksReport(BaseModel):
    """The documented `topology links --json` shape: the links, and a verdict on each observation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    links: list[Link]
    findings: list[LinkVerdict] = Field(default_factory=list)


_JUDGEMENT: dict[str, tuple[Severity, str]] = {
    "duplicate_domain_uuid": ("error", "collect each node's own capture, all in one pass"),
    "peer_not_collected": ("info", "collect that Mac too, in the same pass (domain UUIDs change at every boot)"),
    "one_sided": ("warning", "a hub or dock between them, or captures from different passes; cable the two Macs "
                             "directly and collect again"),
    "peer_unidentified": ("warning", "reseat the cable, check the far Mac's Thunderbolt, and collect again"),
    "speed_mismatch": ("warning", "reseat the cable and collect again"),
}


def judge_observation(o: LinkObservation) -> LinkVerdict:
    severity, fix = _JUDGEMENT[o.code]
    return LinkVerdict(severity=severity, code=o.code, nodes=list(o.nodes), message=o.message, fix=fix)


def judge_links(result: LinksResult) -> LinksReport:
    return LinksReport(links=result.links, findings=[judge_observation(o) for o in result.observations])
