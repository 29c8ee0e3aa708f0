"""Cable matching across nodes, from one collection pass of `system_profiler SPThunderboltDataType`.

A cable joins A's port p and B's port q when the Mac A sees on p carries the domain UUID of B's bus q AND the
Mac B sees on q carries the domain UUID of A's bus p. Domain UUIDs change at every boot, so only captures
from the same pass can be matched. Macs reached through a hub or dock are matched too (`via` names the
devices in between). What is seen but is not a link (a one-sided view, a peer not collected) is returned as
an observation that only describes; what it means and what to do about it is the judge's (judge/links.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field

from macfleet.facts._common import Facts
from macfleet.facts.network import HardwarePortsFacts
from macfleet.facts.thunderbolt import ThunderboltAttached, ThunderboltFacts, ThunderboltPort


class LinkEnd(Facts):
    node: str
    receptacle: int
    device: str | None = None  # enX from that node's -listallhardwareports; None when not given
    domain_uuid: str | None = None
    speed_gbps: float | None = None  # as this end reports it
    peer_services: list[str] = Field(default_factory=list)  # services this end sees the OTHER Mac offer


class Link(Facts):
    a: LinkEnd  # the end whose node name sorts first
    b: LinkEnd
    speed_gbps: float | None  # the lower of the two ends' speeds (they normally agree)
    via: list[str] = Field(default_factory=list)  # hub/dock names between the two Macs; empty for a direct cable


ObservationCode = Literal["one_sided", "peer_not_collected", "speed_mismatch", "duplicate_domain_uuid"]


class LinkObservation(Facts):
    """Something seen in the captures that is not a plain link, described, not judged."""

    code: ObservationCode
    nodes: list[str]
    message: str


class LinksResult(Facts):
    links: list[Link]
    observations: list[LinkObservation] = Field(default_factory=list)


def _macs(attached: list[ThunderboltAttached], via: tuple[str, ...] = ()) -> list[tuple[ThunderboltAttached, tuple]]:
    out: list[tuple[ThunderboltAttached, tuple]] = []
    for a in attached:
        if a.kind == "mac":
            out.append((a, via))
        out.extend(_macs(a.attached, (*via, a.name) if a.kind == "device" else via))
    return out


def match_links(
    nodes: Mapping[str, ThunderboltFacts],
    hardware_ports: Mapping[str, HardwarePortsFacts] | None = None,
) -> LinksResult:
    """The links between `nodes` (name -> its Thunderbolt facts from one pass), each checked both ways."""
    observations: list[LinkObservation] = []
    index: dict[str, tuple[str, ThunderboltPort]] = {}
    for node in sorted(nodes):
        for p in nodes[node].ports:
            if not p.domain_uuid:
                continue
            if p.domain_uuid in index and index[p.domain_uuid][0] != node:
                other = index[p.domain_uuid][0]
                observations.append(LinkObservation(
                        code="duplicate_domain_uuid", nodes=sorted({node, other}),
                    message=f"{node} and {other} report the same bus domain UUID {p.domain_uuid}",
                ))
                continue
            index.setdefault(p.domain_uuid, (node, p))

    def device_of(node: str, receptacle: int) -> str | None:
        if not hardware_ports or node not in hardware_ports:
            return None
        hp = hardware_ports[node].by_thunderbolt().get(receptacle)
        return hp.device if hp else None

    links: dict[tuple, Link] = {}
    for node in sorted(nodes):
        for p in nodes[node].ports:
            for mac, via in _macs(p.attached):
                if not mac.domain_uuid:
                    continue
                target = index.get(mac.domain_uuid)
                if target is None:
                    observations.append(LinkObservation(
                        code="peer_not_collected", nodes=[node],
                        message=(f"{node} receptacle {p.receptacle} sees a Mac ({mac.model or mac.name}, domain "
                                 f"{mac.domain_uuid}) that is not among the captures of this pass"),
                    ))
                    continue
                other, q = target
                if other == node:
                    continue
                back = [(m, v) for m, v in _macs(q.attached) if m.domain_uuid == p.domain_uuid]
                if not back:
                    observations.append(LinkObservation(
                        code="one_sided", nodes=sorted([node, other]),
                        message=(f"{node} receptacle {p.receptacle} sees {other} receptacle {q.receptacle}, "
                                 f"but {other} does not see {node} there"),
                    ))
                    continue
                end_p = LinkEnd(node=node, receptacle=p.receptacle, device=device_of(node, p.receptacle),
                                domain_uuid=p.domain_uuid, speed_gbps=p.speed_gbps, peer_services=list(mac.services))
                end_q = LinkEnd(node=other, receptacle=q.receptacle, device=device_of(other, q.receptacle),
                                domain_uuid=q.domain_uuid, speed_gbps=q.speed_gbps,
                                peer_services=list(back[0][0].services))
                a, b = sorted((end_p, end_q), key=lambda e: (e.node, e.receptacle))
                key = (a.node, a.receptacle, b.node, b.receptacle)
                if key in links:
                    continue
                speeds = [s for s in (a.speed_gbps, b.speed_gbps) if s is not None]
                if len(speeds) == 2 and speeds[0] != speeds[1]:
                    observations.append(LinkObservation(
                        code="speed_mismatch", nodes=[a.node, b.node],
                        message=(f"{a.node} r{a.receptacle} reports {a.speed_gbps:g} Gb/s, "
                                 f"{b.node} r{b.receptacle} reports {b.speed_gbps:g} Gb/s"),
                    ))
                links[key] = Link(a=a, b=b, speed_gbps=min(speeds) if speeds else None,
                                  via=list(via) or list(back[0][1]))
    ordered = [links[k] for k in sorted(links)]
    return LinksResult(links=ordered, observations=observations)
