"""`networksetup` (-listallhardwareports, -listnetworkserviceorder, -listallnetworkservices, -getinfo) and
`ifconfig` (all interfaces or one). Layouts: shared/research/macos-outputs.md §6–§7."""

from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import Field

from macfleet.facts._common import Facts, fail, guarded, is_elision, lines_for, nonblank

_TB_PORT = re.compile(r"^Thunderbolt (\d+)$")


def _none_if_null(value: str | None) -> str | None:
    if value is None:
        return None
    v = value.strip()
    return None if v in ("", "N/A", "(null)", "none") else v


# ------------------------------------------------------------------------------ -listallhardwareports


class HardwarePort(Facts):
    name: str  # "Thunderbolt 2", "Wi-Fi", "Thunderbolt Bridge"...
    device: str  # BSD name: "en6", "bridge0"
    mac: str | None = None  # None when absent, "N/A", "(null)" or trimmed from the capture
    thunderbolt: int | None = None  # N of a "Thunderbolt N" port (read from the name, never from the device)


class HardwarePortsFacts(Facts):
    ports: list[HardwarePort]  # in printed order
    notes: list[str] = Field(default_factory=list)

    def by_thunderbolt(self) -> dict[int, HardwarePort]:
        return {p.thunderbolt: p for p in self.ports if p.thunderbolt is not None}

    def by_device(self) -> dict[str, HardwarePort]:
        return {p.device: p for p in self.ports}


@guarded("hardware-ports")
def parse_hardware_ports(text: str) -> HardwarePortsFacts:
    kind = "hardware-ports"
    lines = nonblank(lines_for(kind, text))
    ports: list[HardwarePort] = []
    notes: list[str] = []
    current: dict[str, str] = {}
    start = 0
    seen_footer = False

    def flush() -> None:
        if not current:
            return
        if "Device" not in current:
            notes.append(f"line {start}: port {current.get('Hardware Port')!r} has no 'Device:' line; skipped")
        else:
            name = current["Hardware Port"]
            m = _TB_PORT.match(name)
            ports.append(
                HardwarePort(
                    name=name,
                    device=current["Device"],
                    mac=_none_if_null(current.get("Ethernet Address")),
                    thunderbolt=int(m.group(1)) if m else None,
                )
            )
        current.clear()

    for n, raw in lines:
        t = raw.strip()
        if seen_footer:
            continue  # VLAN entries follow the footer; not needed
        if t == "VLAN Configurations":
            flush()
            seen_footer = True
            continue
        if ":" not in t:
            raise fail(kind, "'Hardware Port:', 'Device:' or 'Ethernet Address:' lines", line=n, found=t)
        key, value = (s.strip() for s in t.split(":", 1))
        if key == "Hardware Port":
            flush()
            current["Hardware Port"] = value
            start = n
        elif not current:
            raise fail(kind, "a 'Hardware Port:' line first", line=n, found=t)
        elif key in ("Device", "Ethernet Address"):
            current[key] = value
        # other keys: tolerated (newer macOS may add some)
    flush()
    if not ports and not seen_footer:
        first = lines[0] if lines else (1, "")
        raise fail(kind, "'Hardware Port: <name>' blocks", line=first[0], found=first[1].strip())
    return HardwarePortsFacts(ports=ports, notes=notes)


# --------------------------------------------------------------------------- -listnetworkserviceorder


class ServiceOrderEntry(Facts):
    order: int | None  # the (N) position; None for a disabled service, shown as (*)
    name: str  # user-editable ("EXO Thunderbolt 1"): map by hardware_port/device, never by name
    enabled: bool
    hardware_port: str | None = None
    device: str | None = None  # None when the service has none (VPNs) or the line was cut off


class ServiceOrderFacts(Facts):
    services: list[ServiceOrderEntry]


_ORDER_LINE = re.compile(r"^\((\d+|\*)\)\s*(.*)$")
_PORT_LINE = re.compile(r"^\(Hardware Port:\s*(.*?),\s*Device:\s*(.*?)\)?$")
_ASTERISK = "An asterisk (*) denotes that a network service is disabled."


@guarded("service-order")
def parse_service_order(text: str) -> ServiceOrderFacts:
    kind = "service-order"
    entries: list[ServiceOrderEntry] = []
    pending: tuple[int | None, str, bool] | None = None
    lines = nonblank(lines_for(kind, text))
    for n, raw in lines:
        t = raw.strip()
        if t.startswith("An asterisk"):
            continue
        m = _ORDER_LINE.match(t)
        if m and not t.startswith("(Hardware Port:"):
            if pending is not None:
                entries.append(ServiceOrderEntry(order=pending[0], name=pending[1], enabled=pending[2]))
            order = None if m.group(1) == "*" else int(m.group(1))
            pending = (order, m.group(2).strip(), m.group(1) != "*")
            continue
        p = _PORT_LINE.match(t)
        if p and pending is not None:
            entries.append(
                ServiceOrderEntry(
                    order=pending[0], name=pending[1], enabled=pending[2],
                    hardware_port=p.group(1).strip() or None, device=p.group(2).strip() or None,
                )
            )
            pending = None
            continue
        raise fail(kind, "'(N) Service' then '(Hardware Port: X, Device: Y)' lines", line=n, found=t)
    if pending is not None:
        entries.append(ServiceOrderEntry(order=pending[0], name=pending[1], enabled=pending[2]))
    if not entries:
        first = lines[0] if lines else (1, "")
        raise fail(kind, "'(N) Service' entries", line=first[0], found=first[1].strip())
    return ServiceOrderFacts(services=entries)


# --------------------------------------------------------------------------- -listallnetworkservices


class NetworkService(Facts):
    name: str
    enabled: bool


class ServicesFacts(Facts):
    services: list[NetworkService]


@guarded("services")
def parse_services(text: str) -> ServicesFacts:
    kind = "services"
    lines = nonblank(lines_for(kind, text))
    if not lines or not lines[0][1].strip().startswith("An asterisk (*)"):
        first = lines[0] if lines else (1, "")
        raise fail(kind, repr(_ASTERISK) + " as the first line", line=first[0], found=first[1].strip())
    out: list[NetworkService] = []
    for n, raw in lines[1:]:
        t = raw.strip()
        if _ORDER_LINE.match(t) or t.startswith("(Hardware Port:"):
            # `-listnetworkserviceorder` starts with the same sentence; its "(1) Wi-Fi" lines give it away
            raise fail(kind, "one service name a line", line=n, found=t)
        if t.startswith("*"):
            out.append(NetworkService(name=t[1:].strip(), enabled=False))
        else:
            out.append(NetworkService(name=t, enabled=True))
    return ServicesFacts(services=out)


# ------------------------------------------------------------------------------------------ -getinfo


class GetInfoFacts(Facts):
    """`networksetup -getinfo <service>`. With no address the IP lines are simply absent (None here)."""

    configuration: Literal["dhcp", "manual", "bootp", "manual_with_dhcp_router", "off", "other"]
    configuration_line: str
    ip_address: str | None = None
    subnet_mask: str | None = None
    router: str | None = None
    client_id: str | None = None
    ipv6: str | None = None  # "Automatic", "Manual", "Off"...
    ipv6_address: str | None = None
    ipv6_router: str | None = None
    ethernet_address: str | None = None
    wifi_id: str | None = None


_CONFIGS = {
    "DHCP Configuration": "dhcp",
    "Manual Configuration": "manual",
    "BOOTP Configuration": "bootp",
    "Manually Using DHCP Router Configuration": "manual_with_dhcp_router",
}
_GETINFO_KEYS = {
    "IP address": "ip_address", "Subnet mask": "subnet_mask", "Router": "router", "Client ID": "client_id",
    "IPv6": "ipv6", "IPv6 IP address": "ipv6_address", "IPv6 Router": "ipv6_router",
    "Ethernet Address": "ethernet_address", "Wi-Fi ID": "wifi_id",
}


@guarded("getinfo")
def parse_getinfo(text: str) -> GetInfoFacts:
    kind = "getinfo"
    lines = nonblank(lines_for(kind, text))
    if not lines:
        raise fail(kind, "'DHCP Configuration' or 'Manual Configuration'", line=1, found="")
    n0, first = lines[0][0], lines[0][1].strip()
    if first in _CONFIGS:
        config = _CONFIGS[first]
    elif first.endswith("Configuration") and ":" not in first:
        config = "other"
    elif first in ("IPv4 is off", "IPv4 Off"):
        config = "off"
    else:
        raise fail(kind, "a '... Configuration' first line", line=n0, found=first)
    values: dict[str, str | None] = {}
    for n, raw in lines[1:]:
        t = raw.strip()
        if ":" not in t:
            raise fail(kind, "'Key: value' lines", line=n, found=t)
        key, value = (s.strip() for s in t.split(":", 1))
        field = _GETINFO_KEYS.get(key)
        if field:
            values[field] = _none_if_null(value)
    return GetInfoFacts(configuration=config, configuration_line=first, **values)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- ifconfig


class Inet4(Facts):
    address: str
    netmask: str | None = None  # dotted ("255.255.0.0"), converted from ifconfig's hex
    prefixlen: int | None = None
    broadcast: str | None = None


class Inet6(Facts):
    address: str  # without the %scope suffix
    prefixlen: int | None = None
    scope: str | None = None  # the %interface suffix of a link-local address
    flags: list[str] = Field(default_factory=list)  # "secured", "autoconf", "temporary"...


class Interface(Facts):
    """One interface. `name` is None only for a grep-filtered capture that lost the header line."""

    name: str | None
    flags: list[str] = Field(default_factory=list)
    flags_hex: str | None = None
    mtu: int | None = None
    options: list[str] = Field(default_factory=list)
    ether: str | None = None
    inet: list[Inet4] = Field(default_factory=list)
    inet6: list[Inet6] = Field(default_factory=list)
    media: str | None = None
    status: Literal["active", "inactive"] | None = None  # None: no status line in the capture
    members: list[str] = Field(default_factory=list)  # bridge members, in order

    @property
    def up(self) -> bool:
        return "UP" in self.flags


class IfconfigFacts(Facts):
    interfaces: list[Interface]

    def get(self, name: str) -> Interface | None:
        return next((i for i in self.interfaces if i.name == name), None)


_IF_HEADER = re.compile(
    r"^(?P<name>[A-Za-z][\w.]*\d*): flags=(?P<hex>[0-9a-fA-F]+)<(?P<flags>[^>]*)>(?:\s+mtu\s+(?P<mtu>\d+))?"
)
_INET = re.compile(
    r"^inet\s+(?P<addr>\d+\.\d+\.\d+\.\d+)(?:\s+-->\s+\S+)?"
    r"(?:\s+netmask\s+(?P<mask>\S+))?(?:\s+broadcast\s+(?P<bc>\S+))?"
)
_INET6 = re.compile(
    r"^inet6\s+(?P<addr>[0-9a-fA-F:.]+)(?:%(?P<scope>\S+))?(?:\s+prefixlen\s+(?P<plen>\d+))?(?P<rest>.*)$"
)
_MEMBER = re.compile(r"^member:\s+(?P<name>\S+)")
_OPTIONS = re.compile(r"^options=[0-9a-fA-F]+<(?P<opts>[^>]*)>")


def _mask(raw: str | None) -> tuple[str | None, int | None]:
    if raw is None:
        return None, None
    try:
        value = int(raw, 16) if raw.lower().startswith("0x") else int(ipaddress.IPv4Address(raw))
        dotted = str(ipaddress.IPv4Address(value & 0xFFFFFFFF))
        bits = bin(value & 0xFFFFFFFF).count("1")
        return dotted, bits
    except ValueError:
        return raw, None


@guarded("ifconfig")
def parse_ifconfig(text: str) -> IfconfigFacts:
    kind = "ifconfig"
    lines = nonblank(lines_for(kind, text))
    interfaces: list[dict] = []
    cur: dict | None = None

    def new(name: str | None, **kw: object) -> dict:
        d: dict = {"name": name, "flags": [], "options": [], "inet": [], "inet6": [], "members": []}
        d.update(kw)
        interfaces.append(d)
        return d

    for n, raw in lines:
        if is_elision(raw):
            continue
        h = _IF_HEADER.match(raw)
        if h:
            cur = new(
                h.group("name"),
                flags=[f for f in h.group("flags").split(",") if f],
                flags_hex=h.group("hex"),
                mtu=int(h.group("mtu")) if h.group("mtu") else None,
            )
            continue
        if raw[:1] not in (" ", "\t"):
            raise fail(kind, "'<name>: flags=...' or an indented detail line", line=n, found=raw.strip())
        t = raw.strip()
        if cur is None:
            cur = new(None)
        if m := _INET.match(t):
            mask, bits = _mask(m.group("mask"))
            cur["inet"].append(Inet4(address=m.group("addr"), netmask=mask, prefixlen=bits, broadcast=m.group("bc")))
        elif m := _INET6.match(t):
            rest = m.group("rest").split()
            flags = [w for w in rest if w.isalpha() and w not in ("scopeid",)]
            cur["inet6"].append(
                Inet6(address=m.group("addr"), prefixlen=int(m.group("plen")) if m.group("plen") else None,
                      scope=m.group("scope"), flags=flags)
            )
        elif t.startswith("ether "):
            cur["ether"] = t.split()[1] if len(t.split()) > 1 else None
        elif m := _OPTIONS.match(t):
            cur["options"] = [o for o in m.group("opts").split(",") if o]
        elif t.startswith("status:"):
            st = t.split(":", 1)[1].strip()
            cur["status"] = st if st in ("active", "inactive") else None
        elif t.startswith("media:"):
            cur["media"] = t.split(":", 1)[1].strip()
        elif m := _MEMBER.match(t):
            cur["members"].append(m.group("name"))
        # anything else (nd6, Configuration:, ifmaxaddr, Address cache, lladdr, type:...) is not needed
    if not interfaces:
        raise fail(kind, "'<name>: flags=...' interface blocks", line=1, found="")
    if all(i["name"] is None for i in interfaces) and not any(
        i["inet"] or i["inet6"] or i.get("ether") or i.get("status") or i["members"] or i.get("media")
        for i in interfaces
    ):
        first = lines[0]
        raise fail(kind, "'<name>: flags=...' interface blocks", line=first[0], found=first[1].strip())
    return IfconfigFacts(interfaces=[Interface(**i) for i in interfaces])


# ------------------------------------------------------------------------------ netstat -rn -f inet


class Route(Facts):
    destination: str  # as printed: "default", "127", "10.10.10/24", "10.10.10.1"
    network: str | None  # the IPv4 network it covers ("10.10.10.0/24"); None when not an IPv4 destination
    gateway: str  # "10.10.10.1", "link#4", a MAC address for an ARP entry
    flags: str
    netif: str
    expire: str | None = None


class RoutesFacts(Facts):
    routes: list[Route]  # the IPv4 ("Internet:") table, in printed order
    notes: list[str] = Field(default_factory=list)


def _route_network(destination: str) -> str | None:
    """BSD's short forms: "127" is 127.0.0.0/8, "169.254" 169.254.0.0/16, "10.10.10/24" as written,
    a full dotted quad without a prefix is a host (/32), "default" is 0.0.0.0/0."""
    if destination == "default":
        return "0.0.0.0/0"
    addr, _, prefix = destination.partition("/")
    parts = addr.split(".")
    if not 1 <= len(parts) <= 4 or not all(p.isdigit() and int(p) <= 255 for p in parts):
        return None
    length = int(prefix) if prefix.isdigit() else 8 * len(parts)
    if length > 32:
        return None
    return str(ipaddress.IPv4Network(".".join(parts + ["0"] * (4 - len(parts))) + f"/{length}", strict=False))


@guarded("netstat-routes")
def parse_netstat_routes(text: str) -> RoutesFacts:
    """`netstat -rn [-f inet]`: the IPv4 routing table. Columns are read from the header, since macOS 11.3
    dropped Refs and Use (`Destination Gateway Flags Netif Expire`)."""
    kind = "netstat-routes"
    lines = nonblank(lines_for(kind, text))
    routes: list[Route] = []
    notes: list[str] = []
    header: list[str] | None = None
    section = None
    for no, raw in lines:
        line = raw.strip()
        if line == "Routing tables":
            continue
        if line in ("Internet:", "Internet6:"):
            section = line[:-1]
            header = None
            continue
        if line.startswith("Destination"):
            header = line.split()
            if header[:3] != ["Destination", "Gateway", "Flags"] or "Netif" not in header:
                raise fail(kind, "a header `Destination Gateway Flags … Netif Expire`", no, line)
            if section is None:
                section = "Internet"  # `netstat -rn -f inet` on some versions prints no section title
            continue
        if header is None:
            if is_elision(line):
                continue
            raise fail(kind, "`Routing tables`, `Internet:` or the column header", no, line)
        if section != "Internet":
            continue
        fields = line.split()
        if len(fields) < 4:
            notes.append(f"line {no}: too few columns; skipped")
            continue
        netif_at = header.index("Netif")
        if len(fields) <= netif_at:  # columns such as Refs/Use can be blank in pasted copies: Netif is last-ish
            netif_at = 3
        routes.append(
            Route(
                destination=fields[0],
                network=_route_network(fields[0]),
                gateway=fields[1],
                flags=fields[2],
                netif=fields[netif_at],
                expire=fields[netif_at + 1] if len(fields) > netif_at + 1 else None,
            )
        )
    if header is None:
        raise fail(kind, "a routing table (`Destination Gateway Flags … Netif`)", lines[0][0] if lines else None)
    return RoutesFacts(routes=routes, notes=notes)
