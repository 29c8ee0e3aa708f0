"""Small builders for judge tests: a mesh from names, and per-node `SPThunderboltDataType -json` /
`networksetup -listallhardwareports` text in the shape real Macs print (see tests/fixtures/captures/),
parsed by the real parsers, so the judge is tested on what it will really be given."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from macfleet.facts.network import parse_hardware_ports
from macfleet.facts.thunderbolt import parse_thunderbolt
from macfleet.inventory.model import MAC_MODELS, Mesh, Node, Settings
from macfleet.judge.topology import NodeTopologyFacts

STUDIO = MAC_MODELS["mac-studio-m3-ultra"]


def mesh(*names: str, model: str | None = "Mac15,14", name: str = "mesh1") -> Mesh:
    return Mesh(name=name, nodes=tuple(Node(name=n, mesh=name, address=f"{n}.example", model=model) for n in names),
                settings=Settings())


def uuid(node: str, receptacle: int) -> str:
    h = sum(ord(c) * (i + 1) for i, c in enumerate(node)) % 0xFFFF
    return f"{h:08X}-0000-4000-8000-{receptacle:012X}"


@dataclass
class Rig:
    """Cables between nodes (and odd things on ports), turned into each node's captures."""

    nodes: list[str]
    ports: int = 6
    # (node, receptacle) -> list of attached JSON items
    items: dict[tuple[str, int], list[dict]] = field(default_factory=dict)
    speeds: dict[tuple[str, int], str] = field(default_factory=dict)

    def _mac_item(self, far_node: str, far_r: int) -> dict:
        return {
            "_name": "Mac Studio", "device_id_key": "0xA", "device_name_key": "Mac15,14",
            "domain_uuid_key": uuid(far_node, far_r),
            "services_title": [{"_name": "service_ip", "protocol_id_key": 1, "protocol_revision_key": 1,
                                "protocol_version_key": 1, "service_uuid_key": "S"}],
            "vendor_id_key": "0x0A27", "vendor_name_key": "Apple Inc.",
        }

    def cable(self, a: str, ra: int, b: str, rb: int, speed: str = "80 Gb/s") -> Rig:
        self.items.setdefault((a, ra), []).append(self._mac_item(b, rb))
        self.items.setdefault((b, rb), []).append(self._mac_item(a, ra))
        self.speeds[(a, ra)] = self.speeds[(b, rb)] = speed
        return self

    def one_way(self, a: str, ra: int, b: str, rb: int) -> Rig:
        """a sees b; b's port rb is connected but shows nothing."""
        self.items.setdefault((a, ra), []).append(self._mac_item(b, rb))
        self.speeds[(a, ra)] = self.speeds[(b, rb)] = "80 Gb/s"
        self.items.setdefault((b, rb), [])
        return self

    def hub(self, a: str, ra: int, b: str, rb: int) -> Rig:
        """a -> dock -> b: a sees the dock with b nested; b sees a directly."""
        dock = {"_name": "TS5 Plus", "device_name_key": "TS5 Plus", "mode_key": "usb_four_v2",
                "route_string_key": "1", "switch_uid_key": "0x0001", "vendor_name_key": "CalDigit",
                "receptacle_upstream_ambiguous_tag": {"current_speed_key": "80 Gb/s",
                                                       "receptacle_status_key": "receptacle_connected"},
                "_items": [self._mac_item(b, rb)]}
        self.items.setdefault((a, ra), []).append(dock)
        self.items.setdefault((b, rb), []).append(self._mac_item(a, ra))
        self.speeds[(a, ra)] = self.speeds[(b, rb)] = "80 Gb/s"
        return self

    def stranger(self, a: str, ra: int) -> Rig:
        self.items.setdefault((a, ra), []).append(self._mac_item("stranger", 2))
        self.speeds[(a, ra)] = "80 Gb/s"
        return self

    def thunderbolt_json(self, node: str) -> str:
        buses = []
        for r in range(self.ports, 0, -1):
            key = (node, r)
            connected = key in self.items
            bus = {
                "_name": f"thunderboltusb4_bus_{r - 1}",
                "device_name_key": "Mac Studio",
                "domain_uuid_key": uuid(node, r),
                "receptacle_1_tag": {
                    "current_speed_key": self.speeds.get(key, "Up to 120 Gb/s") if connected else "Up to 120 Gb/s",
                    "link_status_key": "0x2" if connected else "0x100",
                    "receptacle_id_key": str(r),
                    "receptacle_status_key": "receptacle_connected" if connected
                    else "receptacle_no_devices_connected",
                },
                "route_string_key": "0",
                "switch_uid_key": f"0x05AC0000000000{r - 1:02X}",
                "vendor_name_key": "Apple Inc.",
            }
            if self.items.get(key):
                bus = {"_items": self.items[key], **bus}
            buses.append(bus)
        return json.dumps({"SPThunderboltDataType": buses}, indent=2)

    def hardware_ports_text(self) -> str:
        blocks = ["", "Hardware Port: Ethernet", "Device: en0", "Ethernet Address: 1c:f6:4c:00:00:01", ""]
        for r in range(1, self.ports + 1):
            blocks += [f"Hardware Port: Thunderbolt {r}", f"Device: en{r + 1}",
                       f"Ethernet Address: 36:00:00:00:00:{r * 4:02x}", ""]
        blocks += ["VLAN Configurations", "==================="]
        return "\n".join(blocks) + "\n"

    def facts(self, skip: tuple[str, ...] = ()) -> dict[str, NodeTopologyFacts]:
        return {
            n: NodeTopologyFacts(thunderbolt=parse_thunderbolt(self.thunderbolt_json(n)),
                                 hardware_ports=parse_hardware_ports(self.hardware_ports_text()))
            for n in self.nodes if n not in skip
        }


def healthy(names: list[str]) -> Rig:
    """Cabled exactly as the cabling plan says (k-th other Mac on the k-th RDMA port, ports 2..6)."""
    rig = Rig(list(names))
    for j in range(len(names)):
        for i in range(j):
            rig.cable(names[i], 2 + (j - 1), names[j], 2 + i)
    return rig
