"""`system_profiler SPThunderboltDataType` in its three forms (`-json`, `-xml`, text) -> ThunderboltFacts.

One `ThunderboltPort` per host receptacle, with what is attached to it: another Mac (`kind="mac"`, its model
identifier, the domain UUID of ITS bus at the far end of the cable, the XDomain services it advertises) or a
device (dock, SSD, display), nested for daisy chains. Layouts: shared/research/macos-outputs.md §1–§5.
"""

from __future__ import annotations

import json
import plistlib
import re
from typing import Any, Literal

from pydantic import Field

from macfleet.facts._common import Facts, Line, fail, guarded, is_elision, lines_for, parse_speed

KIND = "thunderbolt"
RDMA_PROTOCOL_ID = 64087
IP_PROTOCOL_ID = 1

_MODEL_ID = re.compile(r"^[A-Za-z]+\d+,\d+$")
_BUS_NAME = re.compile(r"^thunderbolt(?:usb4)?_bus(?:_(\d+))?$")
_BUS_HEADER = re.compile(r"^(?:Thunderbolt(?:/USB4)?|USB4) Bus(?: (\d+))?$")
_RECEPTACLE_TAG = re.compile(r"^receptacle_(\d+)_tag$")
_MODES = {
    "thunderbolt_one": "Thunderbolt 1",
    "thunderbolt_two": "Thunderbolt 2",
    "thunderbolt_three": "Thunderbolt 3",
    "thunderbolt_four": "Thunderbolt 4",
    "usb_four": "USB4",
    "usb_four_v2": "USB4 v2",
}

ServiceName = str  # "ip", "rdma", or "protocol-<id>" for any other XDomain service


class ThunderboltService(Facts):
    """One XDomain service a Mac peer advertises. RDMA is protocol 64087; its Service Key is opaque
    (`rdma` on early macOS 26, mojibake like `ˇˇˇˇˇˇAD` later) and never interpreted."""

    name: ServiceName
    protocol_id: int | None = None
    service_key: str | None = None
    service_uuid: str | None = None


class ThunderboltAttached(Facts):
    """Something at the far end of a port: a Mac (`kind="mac"`) or a device (dock, SSD, display...).

    A Mac entry has no Mode, switch UID or route string (macos-outputs.md §2); anything that has one is a
    device, whatever its link speed (an 80 Gb/s SSD is never a Mac).
    """

    kind: Literal["mac", "device"]
    name: str  # marketing name for a Mac ("MacBook Pro"), product name for a device
    model: str | None = None  # a Mac's model identifier ("Mac17,6"); None for devices or when not shown
    domain_uuid: str | None = None  # a Mac's bus domain UUID at the far end of the cable
    services: list[ServiceName] = Field(default_factory=list)  # "ip", "rdma", ...
    service_details: list[ThunderboltService] = Field(default_factory=list)
    vendor: str | None = None
    mode: str | None = None  # devices: "Thunderbolt 3", "USB4", "USB4 v2"...
    switch_uid: str | None = None
    route_string: str | None = None
    speed_gbps: float | None = None  # devices: current speed of their upstream link
    attached: list[ThunderboltAttached] = Field(default_factory=list)


class ThunderboltHost(Facts):
    name: str | None = None  # the host bus's Device Name ("Mac mini"; "iOS" on base-M4 Macs)
    vendor: str | None = None


class ThunderboltPort(Facts):
    """One host Thunderbolt port (receptacle). `speed_gbps` is the live link speed (None when idle);
    `max_speed_gbps` the idle port's "Up to N Gb/s" (None while a link is up: macOS then shows the live speed).
    `capability`: "tb5" (idle Up to 120, or a live 80/120 Gb/s link), "tb4" (idle Up to 40), "tb3"/"tb2"/"tb1"
    for older idle strings, None when it cannot be told (a live 40 Gb/s link on a TB5 port looks like TB4)."""

    receptacle: int
    bus: int
    switch_uid: str | None = None
    domain_uuid: str | None = None
    connected: bool
    speed_gbps: float | None = None
    max_speed_gbps: float | None = None
    capability: Literal["tb5", "tb4", "tb3", "tb2", "tb1"] | None = None
    link_status: str | None = None
    attached: list[ThunderboltAttached] = Field(default_factory=list)


class ThunderboltFacts(Facts):
    host: ThunderboltHost
    ports: list[ThunderboltPort]  # sorted by receptacle
    source_format: Literal["json", "xml", "text"]
    notes: list[str] = Field(default_factory=list)  # what was skipped (incomplete port at a cut-off...)

    def port(self, receptacle: int) -> ThunderboltPort | None:
        return next((p for p in self.ports if p.receptacle == receptacle), None)


@guarded("thunderbolt")
def parse_thunderbolt(text: str) -> ThunderboltFacts:
    """Parse any form of `system_profiler SPThunderboltDataType` output."""
    lines = lines_for(KIND, text)
    body = "\n".join(t for _, t in lines)
    stripped = body.strip()
    if stripped.startswith("{"):
        return _from_json(body, lines)
    if stripped.startswith("<?xml") or stripped.startswith("<plist") or stripped.startswith("<!DOCTYPE"):
        return _from_xml(body)
    return _from_text(lines)


# ------------------------------------------------------------------------------------------------ helpers


def _capability(max_speed: float | None, speed: float | None) -> str | None:
    if max_speed is not None:
        return {120.0: "tb5", 80.0: "tb5", 40.0: "tb4", 20.0: "tb2", 10.0: "tb1"}.get(max_speed)
    if speed is not None and speed >= 80:
        return "tb5"
    return None


def _service_name(label: str | None, protocol_id: int | None) -> str:
    if protocol_id == RDMA_PROTOCOL_ID:
        return "rdma"
    if protocol_id == IP_PROTOCOL_ID or label in ("service_ip", "Internet Protocol"):
        return "ip"
    if protocol_id is not None:
        return f"protocol-{protocol_id}"
    return (label or "unknown").strip().lower().replace(" ", "-")


def _to_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdecimal() and len(value.strip()) < 10:
        return int(value.strip())
    return None


def _str(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def _is_mac(*, mode: Any, switch_uid: Any, route: Any, domain_uuid: Any, has_services: bool, model: Any) -> bool:
    if mode is not None or switch_uid is not None or route is not None:
        return False
    return bool(domain_uuid) or has_services or (isinstance(model, str) and bool(_MODEL_ID.match(model)))


def _port(receptacle: int, bus: int, status: bool | None, speed_text: str | None, notes: list[str],
          **fields: Any) -> ThunderboltPort | None:
    """One host port from any of the three forms. `status` is the Status line read as connected or not
    (None when absent); without it, a live speed ("80 Gb/s") means connected and "Up to …" means idle."""
    speed = parse_speed(speed_text)
    if status is None and speed is None:
        notes.append(f"receptacle {receptacle}: no status and no speed; skipped")
        return None
    connected = status if status is not None else not speed[1]  # type: ignore[index]
    cur = speed[0] if speed and not speed[1] else None
    mx = speed[0] if speed and speed[1] else None
    return ThunderboltPort(receptacle=receptacle, bus=bus, connected=connected, speed_gbps=cur, max_speed_gbps=mx,
                           capability=_capability(mx, cur), **fields)  # type: ignore[arg-type]


def _finish(host: ThunderboltHost, ports: list[ThunderboltPort], fmt: str, notes: list[str]) -> ThunderboltFacts:
    ports = sorted(ports, key=lambda p: (p.receptacle, p.bus))
    return ThunderboltFacts(host=host, ports=ports, source_format=fmt, notes=notes)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- JSON / XML


def _repair_json(body: str) -> Any:
    """Parse a JSON capture cut off at the end: keep every complete value, close what was left open."""
    stack: list[str] = []
    in_str = esc = False
    cuts: list[tuple[int, str]] = []  # (cut position, closers needed)
    for i, ch in enumerate(body):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
            cuts.append((i + 1, "".join(reversed(stack))))
        elif ch in "}]":
            if stack:
                stack.pop()
            cuts.append((i + 1, "".join(reversed(stack))))
        elif ch == ",":
            cuts.append((i, "".join(reversed(stack))))
    for pos, closers in reversed(cuts[-200:]):
        try:
            return json.loads(body[:pos] + closers)
        except ValueError:
            continue
    return None


def _from_json(body: str, lines: list[Line]) -> ThunderboltFacts:
    notes: list[str] = []
    try:
        doc, _end = json.JSONDecoder().raw_decode(body.lstrip())
    except ValueError as e:
        doc = _repair_json(body.lstrip())
        if doc is None:
            raise fail(KIND, "a JSON document", line=getattr(e, "lineno", None), found=str(e)) from None
        notes.append("the JSON capture was cut off; kept what was complete")
    if not isinstance(doc, dict) or "SPThunderboltDataType" not in doc:
        keys = ", ".join(list(doc)[:3]) if isinstance(doc, dict) else type(doc).__name__
        raise fail(KIND, 'a JSON object with key "SPThunderboltDataType"', line=1, found=keys)
    buses = doc["SPThunderboltDataType"]
    if not isinstance(buses, list):
        raise fail(KIND, '"SPThunderboltDataType" to be a list of buses', line=1, found=type(buses).__name__)
    return _from_items(buses, "json", notes)


def _from_xml(body: str) -> ThunderboltFacts:
    try:
        doc = plistlib.loads(body.strip().encode("utf-8"))
    except Exception as e:  # plistlib raises ExpatError, ValueError, InvalidFileException...
        raise fail(KIND, "an XML property list", line=1, found=f"{type(e).__name__}: {e}") from None
    entries = doc if isinstance(doc, list) else [doc]
    for entry in entries:
        if isinstance(entry, dict) and entry.get("_dataType") == "SPThunderboltDataType":
            items = entry.get("_items", [])
            if not isinstance(items, list):
                raise fail(KIND, "_items to be a list of buses", found=type(items).__name__)
            return _from_items(items, "xml", [])
    found = ", ".join(str(e.get("_dataType")) for e in entries if isinstance(e, dict)) or type(doc).__name__
    raise fail(KIND, "a plist entry with _dataType SPThunderboltDataType", line=1, found=found)


def _services_from_json(raw: Any) -> list[ThunderboltService]:
    out: list[ThunderboltService] = []
    if not isinstance(raw, list):
        return out
    for s in raw:
        if not isinstance(s, dict):
            continue
        pid = _to_int(s.get("protocol_id_key"))
        out.append(
            ThunderboltService(
                name=_service_name(_str(s.get("_name")), pid),
                protocol_id=pid,
                service_key=_str(s.get("service_key_key")),
                service_uuid=_str(s.get("service_uuid_key")),
            )
        )
    return out


def _attached_from_json(item: Any, depth: int = 0) -> ThunderboltAttached | None:
    if not isinstance(item, dict) or depth > 32:
        return None
    mode = item.get("mode_key")
    switch_uid = item.get("switch_uid_key")
    route = item.get("route_string_key")
    domain = _str(item.get("domain_uuid_key"))
    device_name = _str(item.get("device_name_key"))
    services = _services_from_json(item.get("services_title"))
    name = _str(item.get("_name")) or device_name or "unknown"
    children_raw = item.get("_items")
    children = [
        a for a in (_attached_from_json(c, depth + 1) for c in (children_raw if isinstance(children_raw, list) else []))
        if a is not None
    ]
    mac = _is_mac(mode=mode, switch_uid=switch_uid, route=route, domain_uuid=domain,
                  has_services=bool(services), model=device_name)
    upstream = item.get("receptacle_upstream_ambiguous_tag")
    speed = parse_speed(_str(upstream.get("current_speed_key"))) if isinstance(upstream, dict) else None
    return ThunderboltAttached(
        kind="mac" if mac else "device",
        name=name,
        model=device_name if (mac and device_name and _MODEL_ID.match(device_name)) else None,
        domain_uuid=domain,
        services=[s.name for s in services],
        service_details=services,
        vendor=_str(item.get("vendor_name_key")),
        mode=_MODES.get(mode, mode) if isinstance(mode, str) else None,
        switch_uid=_str(switch_uid),
        route_string=_str(route),
        speed_gbps=speed[0] if speed and not speed[1] else None,
        attached=children,
    )


def _bus_number(name: Any) -> int | None:
    if not isinstance(name, str):
        return None
    m = _BUS_NAME.match(name)
    if not m:
        return None
    return int(m.group(1)) if m.group(1) is not None else 0


def _from_items(buses: list[Any], fmt: str, notes: list[str]) -> ThunderboltFacts:
    host = ThunderboltHost()
    ports: list[ThunderboltPort] = []
    for idx, bus in enumerate(buses):
        if not isinstance(bus, dict):
            raise fail(KIND, "each bus to be an object", found=f"bus #{idx}: {type(bus).__name__}")
        bus_no = _bus_number(bus.get("_name"))
        if bus_no is None:
            raise fail(KIND, '"_name" like "thunderboltusb4_bus_N"', found=f"bus #{idx}: {bus.get('_name')!r}")
        if host.name is None and _str(bus.get("device_name_key")):
            host = ThunderboltHost(name=_str(bus.get("device_name_key")), vendor=_str(bus.get("vendor_name_key")))
        items = bus.get("_items")
        attached = [
            a for a in (_attached_from_json(i) for i in (items if isinstance(items, list) else [])) if a is not None
        ]
        tags = sorted(
            ((int(m.group(1)), v) for k, v in bus.items() if (m := _RECEPTACLE_TAG.match(k)) and isinstance(v, dict)),
            key=lambda kv: kv[0],
        )
        connected_tags = [t for t in tags if t[1].get("receptacle_status_key") == "receptacle_connected"]
        # Items belong to the connected receptacle (a bus has one on Apple silicon; old Intel buses had two).
        owner = connected_tags[0][0] if connected_tags else (tags[0][0] if tags else None)
        for tag_no, tag in tags:
            receptacle = _to_int(tag.get("receptacle_id_key"))
            if receptacle is None:
                notes.append(f"bus {bus_no} receptacle_{tag_no}_tag has no receptacle_id_key; skipped")
                continue
            status = {"receptacle_connected": True, "receptacle_no_devices_connected": False}.get(
                tag.get("receptacle_status_key"))
            port = _port(receptacle, bus_no, status, _str(tag.get("current_speed_key")), notes,
                         switch_uid=_str(bus.get("switch_uid_key")), domain_uuid=_str(bus.get("domain_uuid_key")),
                         link_status=_str(tag.get("link_status_key")),
                         attached=attached if tag_no == owner else [])
            if port is not None:
                ports.append(port)
    return _finish(host, ports, fmt, notes)


# ------------------------------------------------------------------------------------------------- text


class _Node:
    __slots__ = ("children", "fields", "indent", "line", "name")

    def __init__(self, name: str, indent: int, line: int):
        self.name = name
        self.indent = indent
        self.line = line
        self.fields: dict[str, str] = {}
        self.children: list[_Node] = []


_PORT_HEADER = re.compile(r"^Port(?: \(.*\))?$")


def _tree(lines: list[Line]) -> tuple[_Node, list[str]]:
    root = _Node("", -1, 0)
    stack = [root]
    notes: list[str] = []
    content = [(n, t.expandtabs(4).rstrip()) for n, t in lines if t.strip() and not is_elision(t)]
    for pos, (n, t) in enumerate(content):
        indent = len(t) - len(t.lstrip(" "))
        s = t.strip()
        while stack[-1] is not root and stack[-1].indent >= indent:
            stack.pop()
        if s.endswith(":"):
            node = _Node(s[:-1].strip(), indent, n)
            stack[-1].children.append(node)
            stack.append(node)
        elif ": " in s:
            key, value = s.split(": ", 1)
            stack[-1].fields.setdefault(key.strip(), value.strip())
        elif pos == len(content) - 1:
            notes.append(f"line {n} is incomplete (capture cut off); ignored")
        else:
            raise fail(KIND, "'Name:' or 'Key: Value' lines", line=n, found=s)
    return root, notes


def _find_buses(node: _Node) -> list[_Node]:
    out: list[_Node] = []
    for c in node.children:
        if _BUS_HEADER.match(c.name):
            out.append(c)
        else:
            out.extend(_find_buses(c))
    return out


def _services_from_text(node: _Node) -> list[ThunderboltService]:
    out: list[ThunderboltService] = []
    for s in node.children:
        pid = _to_int(s.fields.get("Protocol ID"))
        out.append(
            ThunderboltService(
                name=_service_name(s.name, pid),
                protocol_id=pid,
                service_key=s.fields.get("Service Key"),
                service_uuid=s.fields.get("Service UUID"),
            )
        )
    return out


def _attached_from_text(node: _Node) -> ThunderboltAttached:
    f = node.fields
    services: list[ThunderboltService] = []
    children: list[ThunderboltAttached] = []
    upstream_speed = None
    for c in node.children:
        if c.name == "Services":
            services.extend(_services_from_text(c))
        elif _PORT_HEADER.match(c.name):
            if "Upstream" in c.name:
                upstream_speed = parse_speed(c.fields.get("Speed"))
            children.extend(_attached_from_text(d) for d in c.children)
        else:
            children.append(_attached_from_text(c))
    device_name = f.get("Device Name")
    mac = _is_mac(mode=f.get("Mode"), switch_uid=f.get("UID"), route=f.get("Route String"),
                  domain_uuid=f.get("Domain UUID"), has_services=bool(services), model=device_name)
    return ThunderboltAttached(
        kind="mac" if mac else "device",
        name=node.name,
        model=device_name if (mac and device_name and _MODEL_ID.match(device_name)) else None,
        domain_uuid=f.get("Domain UUID"),
        services=[s.name for s in services],
        service_details=services,
        vendor=f.get("Vendor Name"),
        mode=f.get("Mode"),
        switch_uid=f.get("UID"),
        route_string=f.get("Route String"),
        speed_gbps=upstream_speed[0] if upstream_speed and not upstream_speed[1] else None,
        attached=children,
    )


def _from_text(lines: list[Line]) -> ThunderboltFacts:
    root, notes = _tree(lines)
    buses = _find_buses(root)
    if not buses:
        first = next(((n, t.strip()) for n, t in lines if t.strip()), (1, ""))
        raise fail(KIND, "a 'Thunderbolt/USB4 Bus N:' section", line=first[0], found=first[1])
    host = ThunderboltHost()
    ports: list[ThunderboltPort] = []
    for bus in buses:
        m = _BUS_HEADER.match(bus.name)
        bus_no = int(m.group(1)) if m and m.group(1) is not None else 0
        if host.name is None and bus.fields.get("Device Name"):
            host = ThunderboltHost(name=bus.fields.get("Device Name"), vendor=bus.fields.get("Vendor Name"))
        port_nodes = [c for c in bus.children if _PORT_HEADER.match(c.name)]
        loose = [c for c in bus.children if not _PORT_HEADER.match(c.name)]
        for i, p in enumerate(port_nodes):
            receptacle = _to_int(p.fields.get("Receptacle"))
            if receptacle is None:
                notes.append(f"bus {bus_no} line {p.line}: port without 'Receptacle:'; skipped")
                continue
            status = {"Device connected": True, "No device connected": False}.get(p.fields.get("Status", ""))
            attached = [_attached_from_text(c) for c in p.children]
            if i == 0:
                attached += [_attached_from_text(c) for c in loose]
            port = _port(receptacle, bus_no, status, p.fields.get("Speed"), notes,
                         switch_uid=bus.fields.get("UID"), domain_uuid=bus.fields.get("Domain UUID"),
                         link_status=p.fields.get("Link Status"), attached=attached)
            if port is not None:
                ports.append(port)
    return _finish(host, ports, "text", notes)
