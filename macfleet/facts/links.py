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


ObservationCode = Literal["one_sided", "peer_not_collected", "peer_unidentified", "speed_mismatch",
                          "duplicate_domain_uuid"]


class LinkObservation(Facts):
    """Something seen in the captures that is not a plain link, described, not judged: where it was seen
    (`node`, `receptacle`), what it points at (`far_node`/`far_receptacle` when that is a collected Mac's
    port, else `peer`: the far Mac's model or name) and the hubs/docks in between."""

    code: ObservationCode
    nodes: list[str]
    message: str
    node: str | None = None
    receptacle: int | None = None
    far_node: str | None = None
    far_receptacle: int | None = None
    peer: str | None = None
    via: list[str] = Field(default_factory=list)


class LinksResult(Facts):
    links: list[Link]
    observations: list[LinkObservation] = Field(default_factory=list)


def macs_behind(attached: list[ThunderboltAttached], via: tuple[str, ...] = ()
                ) -> list[tuple[ThunderboltAttached, tuple]]:
    """Every Mac in a port's tree, with the names of the devices (hubs, docks) between it and the port."""
    out: list[tuple[ThunderboltAttached, tuple]] = []
    for a in attached:
        if a.kind == "mac":
            out.append((a, via))
        out.extend(macs_behind(a.attached, (*via, a.name) if a.kind == "device" else via))
    return out


def _bus_index(nodes: Mapping[str, ThunderboltFacts]) -> tuple[dict[str, tuple[str, ThunderboltPort]],
                                                                  list[LinkObservation]]:
    """Each bus domain UUID -> the node and port that own it (the first, when two nodes claim one)."""
    index: dict[str, tuple[str, ThunderboltPort]] = {}
    seen: list[LinkObservation] = []
    for node in sorted(nodes):
        for p in nodes[node].ports:
            if not p.domain_uuid:
                continue
            if p.domain_uuid in index and index[p.domain_uuid][0] != node:
                other = index[p.domain_uuid][0]
                seen.append(LinkObservation(
                    code="duplicate_domain_uuid", nodes=sorted({node, other}),
                    message=f"{node} and {other} report the same bus domain UUID {p.domain_uuid}",
                ))
                continue
            index.setdefault(p.domain_uuid, (node, p))
    return index, seen


def _device_of(hardware_ports: Mapping[str, HardwarePortsFacts] | None, node: str, receptacle: int) -> str | None:
    if not hardware_ports or node not in hardware_ports:
        return None
    hp = hardware_ports[node].by_thunderbolt().get(receptacle)
    return hp.device if hp else None


def _end(hardware_ports: Mapping[str, HardwarePortsFacts] | None, node: str, p: ThunderboltPort,
         peer_services: list[str]) -> LinkEnd:
    return LinkEnd(node=node, receptacle=p.receptacle, device=_device_of(hardware_ports, node, p.receptacle),
                   domain_uuid=p.domain_uuid, speed_gbps=p.speed_gbps, peer_services=list(peer_services))


def _unmatched(node: str, p: ThunderboltPort, mac: ThunderboltAttached, via: tuple,
               target: tuple[str, ThunderboltPort] | None) -> LinkObservation:
    """What a port sees when the Mac on it is not a collected Mac seeing it back."""
    here = {"node": node, "receptacle": p.receptacle, "via": list(via)}
    model = mac.model or mac.name
    if not mac.domain_uuid:
        return LinkObservation(
            code="peer_unidentified", nodes=[node], peer=model, **here,
            message=f"{node} receptacle {p.receptacle} sees a Mac ({model}) without a bus domain UUID, so which "
                    "Mac it is cannot be told")
    if target is None:
        return LinkObservation(
            code="peer_not_collected", nodes=[node], peer=model, **here,
            message=(f"{node} receptacle {p.receptacle} sees a Mac ({model}, domain {mac.domain_uuid}) that is not "
                     "among the captures of this pass"))
    other, q = target
    return LinkObservation(
        code="one_sided", nodes=sorted([node, other]), far_node=other, far_receptacle=q.receptacle, **here,
        message=(f"{node} receptacle {p.receptacle} sees {other} receptacle {q.receptacle}, "
                 f"but {other} does not see {node} there"))


def match_links(
    nodes: Mapping[str, ThunderboltFacts],
    hardware_ports: Mapping[str, HardwarePortsFacts] | None = None,
) -> LinksResult:
    """The links between `nodes` (name -> its Thunderbolt facts from one pass), each checked both ways, and
    what each port sees that is not one, in node and port order."""
    index, observations = _bus_index(nodes)
    links: dict[tuple, Link] = {}
    for node in sorted(nodes):
        for p in nodes[node].ports:
            for mac, via in macs_behind(p.attached):
                target = index.get(mac.domain_uuid) if mac.domain_uuid else None
                if target is not None and target[0] == node:
                    continue  # a port cabled to another port of the same Mac
                back = [(m, v) for m, v in macs_behind(target[1].attached)
                        if m.domain_uuid == p.domain_uuid] if target else []
                if target is None or not back:
                    observations.append(_unmatched(node, p, mac, via, target))
                    continue
                other, q = target
                end_p = _end(hardware_ports, node, p, mac.services)
                end_q = _end(hardware_ports, other, q, back[0][0].services)
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
    return LinksResult(links=[links[k] for k in sorted(links)], observations=observations)
