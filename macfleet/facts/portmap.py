"""A node's port map: receptacle N ↔ hardware port "Thunderbolt N" ↔ enX ↔ rdma_enX, joined from its facts.

Every link in the chain is READ from a capture, never derived: enX comes from
`networksetup -listallhardwareports` (the M5 Max's Thunderbolt 2 is en6), rdma_enX is listed only when
`ibv_devices`/`ibv_devinfo` shows a device of that name. A fact that was not collected stays None (unknown).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from macfleet.facts._common import Facts
from macfleet.facts.network import HardwarePortsFacts, IfconfigFacts
from macfleet.facts.rdma import IbvDevicesFacts, IbvDevinfoFacts
from macfleet.facts.thunderbolt import ThunderboltAttached, ThunderboltFacts


class PortPeer(Facts):
    kind: Literal["mac", "device"]
    name: str
    model: str | None = None
    domain_uuid: str | None = None
    rdma_service: bool  # the peer advertises protocol 64087 (shown only when the PEER has RDMA on)


class PortMapEntry(Facts):
    receptacle: int
    bus: int
    domain_uuid: str | None = None
    hardware_port: str | None = None  # "Thunderbolt N"; None: no such port in -listallhardwareports (or not given)
    device: str | None = None  # enX, read from -listallhardwareports
    rdma_device: str | None = None  # "rdma_enX" when ibv_devices/ibv_devinfo lists it
    connected: bool
    speed_gbps: float | None = None
    max_speed_gbps: float | None = None
    capability: str | None = None
    peer: PortPeer | None = None  # the first thing attached (a Mac or a device); None when nothing is
    link_status: Literal["active", "inactive"] | None = None  # enX's ifconfig status; None: not collected
    ipv4: list[str] | None = None  # enX's IPv4 addresses; None: ifconfig not collected or enX not in it
    bridge_member: bool | None = None  # enX is a member of a bridge (IP over Thunderbolt bridge); None: unknown
    rdma_state: str | None = None  # "PORT_ACTIVE"/"PORT_DOWN"; None: not collected
    has_ipv4_gid: bool | None = None  # None: no `ibv_devinfo -v` GID table for this device


class PortMap(Facts):
    entries: list[PortMapEntry]  # by receptacle
    notes: list[str] = Field(default_factory=list)  # joins that could not be made, said plainly

    def entry(self, receptacle: int) -> PortMapEntry | None:
        return next((e for e in self.entries if e.receptacle == receptacle), None)


def _peer(attached: list[ThunderboltAttached]) -> PortPeer | None:
    if not attached:
        return None
    a = next((x for x in attached if x.kind == "mac"), attached[0])
    return PortPeer(kind=a.kind, name=a.name, model=a.model, domain_uuid=a.domain_uuid,
                    rdma_service="rdma" in a.services)


def build_port_map(
    thunderbolt: ThunderboltFacts,
    hardware_ports: HardwarePortsFacts | None = None,
    ifconfig: IfconfigFacts | None = None,
    ibv_devices: IbvDevicesFacts | None = None,
    ibv_devinfo: IbvDevinfoFacts | None = None,
) -> PortMap:
    """Join one node's facts into its port map. Pure; any argument but `thunderbolt` may be None."""
    notes: list[str] = []
    tb_ports = hardware_ports.by_thunderbolt() if hardware_ports is not None else {}
    rdma_names: set[str] | None = None
    if ibv_devices is not None or ibv_devinfo is not None:
        rdma_names = set()
        if ibv_devices is not None:
            rdma_names |= {d.name for d in ibv_devices.devices}
        if ibv_devinfo is not None:
            rdma_names |= {d.name for d in ibv_devinfo.devices}
    devinfo = {d.name: d for d in ibv_devinfo.devices} if ibv_devinfo is not None else {}
    bridged: set[str] = set()
    if ifconfig is not None:
        for i in ifconfig.interfaces:
            bridged |= set(i.members)

    entries: list[PortMapEntry] = []
    for p in thunderbolt.ports:
        hp = tb_ports.get(p.receptacle)
        if hardware_ports is not None and hp is None:
            notes.append(f"receptacle {p.receptacle}: no 'Thunderbolt {p.receptacle}' in -listallhardwareports")
        device = hp.device if hp else None
        rdma_device = None
        if device is not None and rdma_names is not None:
            candidate = f"rdma_{device}"
            if candidate in rdma_names:
                rdma_device = candidate
            else:
                notes.append(f"receptacle {p.receptacle} ({device}): no {candidate} RDMA device listed")
        iface = ifconfig.get(device) if (ifconfig is not None and device is not None) else None
        info = devinfo.get(rdma_device) if rdma_device else None
        entries.append(
            PortMapEntry(
                receptacle=p.receptacle,
                bus=p.bus,
                domain_uuid=p.domain_uuid,
                hardware_port=hp.name if hp else None,
                device=device,
                rdma_device=rdma_device,
                connected=p.connected,
                speed_gbps=p.speed_gbps,
                max_speed_gbps=p.max_speed_gbps,
                capability=p.capability,
                peer=_peer(p.attached),
                link_status=iface.status if iface else None,
                ipv4=[a.address for a in iface.inet] if iface else None,
                bridge_member=(device in bridged) if (ifconfig is not None and device is not None) else None,
                rdma_state=info.state if info else None,
                has_ipv4_gid=info.has_ipv4_gid if info else None,
            )
        )
    known = {p.receptacle for p in thunderbolt.ports}
    for n, hp in sorted(tb_ports.items()):
        if n not in known:
            notes.append(f"hardware port {hp.name!r} ({hp.device}) has no receptacle {n} in the Thunderbolt facts")
    return PortMap(entries=sorted(entries, key=lambda e: e.receptacle), notes=notes)
