"""`networksetup` and `ifconfig` stand-ins, and applying persisted network services to the namespace.

networksetup changes are persisted (persist.json "services") and applied to the node's interfaces;
ifconfig changes only touch the live interfaces (lost at reboot, as on macOS).
Shapes: shared/samples/macos__networksetup_*, macos__ifconfig_* (copies in tests/fixtures/captures/).
"""

from __future__ import annotations

import sys

from .common import (
    Links,
    Node,
    broadcast,
    err,
    eui64_fe80,
    ip_batch,
    is_root,
    mask_to_prefix,
    prefix_to_mask,
    secured_fe80,
    sha256,
)

MGMT_DEV = "en0"
WIFI_DEV = "en1"
BRIDGE = "bridge0"


# ---------------------------------------------------------------------------------------------
# Hardware ports and services
# ---------------------------------------------------------------------------------------------


def hardware_ports(node: Node) -> list[tuple[str, str, str]]:
    """(Hardware Port, Device, Ethernet Address) in the order a Mac Studio lists them."""
    info = node.info
    out = [("Ethernet", MGMT_DEV, info["mgmt_mac"])]
    out.append(("Thunderbolt Bridge", BRIDGE, node.mac(node.ports[0]["receptacle"])))
    out.append(("Wi-Fi", WIFI_DEV, info["wifi_mac"]))
    for p in node.ports:
        out.append((f"Thunderbolt {p['receptacle']}", p["device"], node.mac(p["receptacle"])))
    return out


def port_device(node: Node, hardware_port: str) -> str | None:
    for hp, dev, _mac in hardware_ports(node):
        if hp == hardware_port:
            return dev
    return None


def default_services(node: Node, *, fresh: bool, addresses: dict[int, tuple[str, int]]) -> list[dict]:
    """Services of a Mac out of the box (fresh) or as a careful sysadmin leaves it today."""
    svcs = [
        {"name": "Ethernet", "port": "Ethernet", "enabled": True, "config": "dhcp"},
        {"name": "Thunderbolt Bridge", "port": "Thunderbolt Bridge", "enabled": fresh, "config": "dhcp"},
        {"name": "Wi-Fi", "port": "Wi-Fi", "enabled": True, "config": "dhcp"},
    ]
    if not fresh:
        for p in node.ports:
            r = p["receptacle"]
            svc = {"name": f"Thunderbolt {r}", "port": f"Thunderbolt {r}", "enabled": True, "config": "dhcp"}
            if r in addresses:
                ip, prefix = addresses[r]
                svc.update(config="manual", ip=ip, mask=prefix_to_mask(prefix))
            svcs.append(svc)
    return svcs


def bridge_address(node: Node) -> str:
    n = node.info["index"]
    return f"169.254.{(n * 37) % 254 + 1}.{(n * 11) % 250 + 2}"


def apipa_address(node: Node, device: str) -> str:
    """A self-assigned 169.254/16 address (what macOS picks for a DHCP service with no server)."""
    h = sha256(f"{node.info['mac_base']}/{device}".encode())
    return f"169.254.{h[0] % 254 + 1}.{h[1] % 253 + 1}"


def apply(node: Node, devices: set[str] | None = None) -> None:
    """Make the namespace match the persisted services (for `devices`, or all Thunderbolt ones).

    With the Thunderbolt Bridge on, every Thunderbolt port is a member of bridge0 and has no IPv4 of its own
    (the bridge has the 169.254 address); turning the bridge on or off re-applies every port. With the
    lab fault `apipa` (persist "apipa"), a DHCP service on a port with carrier self-assigns 169.254/16."""
    persist = node.persist
    links = Links()
    tb_devs = [p["device"] for p in node.ports]
    services = persist.get("services", [])
    bridge_on = any(port_device(node, s["port"]) == BRIDGE and s.get("enabled") for s in services)
    whole = devices is None or bridge_on != links.exists(BRIDGE)
    scope = set(tb_devs) | {BRIDGE} if whole else set(devices)
    want: dict[str, list[tuple[str, int]]] = {d: [] for d in tb_devs}
    for svc in services:
        dev = port_device(node, svc["port"])
        if dev not in want or not svc.get("enabled") or bridge_on:
            continue
        if svc.get("config") == "manual" and svc.get("ip"):
            want[dev].append((svc["ip"], mask_to_prefix(svc["mask"])))
        elif persist.get("apipa") and links.carrier(dev):
            want[dev].append((apipa_address(node, dev), 16))
    lines: list[str] = []
    mtus = persist.get("mtu", {})
    if BRIDGE in scope and not bridge_on and links.exists(BRIDGE):
        lines.append(f"link del {BRIDGE}")
    for dev in tb_devs:
        if dev not in scope or not links.exists(dev):
            continue
        have = set(links.ipv4(dev))
        wanted = set(want[dev])
        for ip, prefix in have - wanted:
            lines.append(f"addr del {ip}/{prefix} dev {dev}")
        for ip, prefix in wanted - have:
            lines.append(f"addr add {ip}/{prefix} dev {dev}")
        if str(links.mtu(dev)) != str(mtus.get(dev, 1500)):
            lines.append(f"link set dev {dev} mtu {mtus.get(dev, 1500)}")
        if bridge_on and links.exists(BRIDGE) and links.master(dev) != BRIDGE:
            lines.append(f"link set dev {dev} master {BRIDGE}")
    if BRIDGE in scope and bridge_on and not links.exists(BRIDGE):
        lines.append(f"link add {BRIDGE} type bridge stp_state 1 forward_delay 200")
        lines += [f"link set dev {d} master {BRIDGE}" for d in tb_devs if links.exists(d)]
        lines.append(f"addr add {bridge_address(node)}/16 dev {BRIDGE}")
        lines.append(f"link set dev {BRIDGE} up")
    ip_batch(lines)


# ---------------------------------------------------------------------------------------------
# networksetup
# ---------------------------------------------------------------------------------------------

HEADER = "An asterisk (*) denotes that a network service is disabled."


def _find(services: list[dict], name: str) -> dict | None:
    for s in services:
        if s["name"] == name:
            return s
    return None


# Sources (issue 31; samples = shared/samples, GUESS = listed in docs/lab.md "Guesses"):
# - `NAME is not a recognized network service.` + `** Error: The parameters were not valid.` on stdout, exit 4:
#   crc-org/crc#1990 (a capture of -setnetworkserviceenabled, docs/lab.md)
def _not_a_service(name: str) -> int:
    sys.stdout.write(f"{name} is not a recognized network service.\n** Error: The parameters were not valid.\n")
    return 4


# - GUESS: the non-admin message and exit 14 (docs/lab.md: networksetup errors for non-admins)
def _need_root() -> int:
    sys.stdout.write("** Error: Command requires admin privileges.\n")
    return 14


# - `Manual Configuration` (no Client ID line) / `DHCP Configuration`, IP/Subnet/Router only with an address,
#   IPv6 lines, `Ethernet Address:`: samples macos__networksetup_getinfo_manual_1.txt,
#   macos__networksetup_getinfo_thunderbolt_bridge_noip_1.txt; `Router: (null)`, `Wi-Fi ID:`: GUESS
def _getinfo(node: Node, svc: dict) -> str:
    dev = port_device(node, svc["port"])
    links = Links()
    lines = ["Manual Configuration" if svc.get("config") == "manual" else "DHCP Configuration"]
    ip, mask, router = None, None, None
    if svc.get("enabled"):
        if svc.get("config") == "manual":
            ip, mask, router = svc.get("ip"), svc.get("mask"), svc.get("router")
        elif dev and links.ipv4(dev):
            a, p = links.ipv4(dev)[0]
            ip, mask = a, prefix_to_mask(p)
            if dev == MGMT_DEV:
                router = node.lab.spec["controller_address"]
    if ip:
        lines.append(f"IP address: {ip}")
        lines.append(f"Subnet mask: {mask}")
        lines.append(f"Router: {router}" if router else "Router: (null)")
    if svc.get("config") != "manual":
        lines.append("Client ID:")
    lines += ["IPv6: Automatic", "IPv6 IP address: none", "IPv6 Router: none"]
    if dev == WIFI_DEV:
        lines.append(f"Wi-Fi ID: {node.info['wifi_mac']}")
    elif dev:
        mac = dict((d, m) for _hp, d, m in hardware_ports(node)).get(dev, "(null)")
        lines.append(f"Ethernet Address: {mac}")
    return "\n".join(lines) + "\n"


# -- reads: anyone ---------------------------------------------------------------------------


# - leading blank line, `Hardware Port/Device/Ethernet Address` blocks, `VLAN Configurations` footer: samples
#   macos__networksetup_listallhardwareports_studio_m4max_1.txt, …_macmini_m4_1.txt; no Thunderbolt Bridge
#   port once the bridge is gone: …_macmini_m4pro_no_bridge_1.txt
def _list_hardware_ports(node: Node, rest: list[str]) -> int:
    """A Mac lists the "Thunderbolt Bridge" port exactly when it has the bridge0 interface (a Mac whose bridge
    was deleted, as exo's setup script does, lists neither: macos__networksetup_listallhardwareports_macmini_
    m4pro_no_bridge_1.txt). `ifconfig bridge0 down` keeps the interface, so the port stays listed."""
    out = [""]
    bridge = Links().exists(BRIDGE)
    for hp, dev, mac in hardware_ports(node):
        if dev == BRIDGE and not bridge:
            continue
        out += [f"Hardware Port: {hp}", f"Device: {dev}", f"Ethernet Address: {mac}", ""]
    out += ["VLAN Configurations", "==================="]
    sys.stdout.write("\n".join(out) + "\n")
    return 0


# - the asterisk header, one name per line: samples macos__networksetup_listallnetworkservices_1.txt; the `*`
#   before a disabled one: networksetup(8)
def _list_services(node: Node, rest: list[str]) -> int:
    names = [s["name"] if s.get("enabled") else "*" + s["name"] for s in node.persist.get("services", [])]
    sys.stdout.write("\n".join([HEADER, *names]) + "\n")
    return 0


# - `(N) Name` / `(*) Name` and `(Hardware Port: X, Device: enN)`: samples
#   macos__networksetup_listnetworkserviceorder_exo_services_1.txt, …_stock_1.txt
def _list_service_order(node: Node, rest: list[str]) -> int:
    blocks = []
    n = 0
    for s in node.persist.get("services", []):
        dev = port_device(node, s["port"])
        if s.get("enabled"):
            n += 1
            tag = f"({n})"
        else:
            tag = "(*)"
        blocks.append(f"{tag} {s['name']}\n(Hardware Port: {s['port']}, Device: {dev})\n")
    sys.stdout.write(HEADER + "\n" + "\n".join(blocks))
    return 0


def _get_info(node: Node, rest: list[str]) -> int:
    svc = _find(node.persist.get("services", []), rest[0]) if rest else None
    if svc is None:
        return _not_a_service(rest[0] if rest else "")
    sys.stdout.write(_getinfo(node, svc))
    return 0


# - `Enabled` / `Disabled`: read the same way by exo (src/exo/utils/info_gatherer/info_gatherer.py:168-180);
#   no capture: GUESS
def _get_enabled(node: Node, rest: list[str]) -> int:
    svc = _find(node.persist.get("services", []), rest[0]) if rest else None
    if svc is None:
        return _not_a_service(rest[0] if rest else "")
    sys.stdout.write("Enabled\n" if svc.get("enabled") else "Disabled\n")
    return 0


# - GUESS: `Active MTU: N (Current Setting: N)`
def _get_mtu(node: Node, rest: list[str]) -> int:
    mtu = Links().mtu(rest[0] if rest else "")
    sys.stdout.write(f"Active MTU: {mtu} (Current Setting: {mtu})\n")
    return 0


# - GUESS: these verbs change nothing in the lab (IPv6 is not modelled)
def _root_no_op(node: Node, rest: list[str]) -> int:
    return 0 if is_root() else _need_root()


READS = {"-listallhardwareports": _list_hardware_ports, "-listallnetworkservices": _list_services,
         "-listnetworkserviceorder": _list_service_order, "-getinfo": _get_info,
         "-getnetworkserviceenabled": _get_enabled, "-getmtu": _get_mtu, "-detectnewhardware": _root_no_op,
         "-setv6off": _root_no_op, "-setv6automatic": _root_no_op, "-setv6linklocal": _root_no_op}


# -- changes: root only, persisted, then applied to the ports they touch ---------------------
# Each takes (node, persisted data, arguments, set of touched devices) and returns the exit code.


def _named_service(svcs: list[dict], rest: list[str], need: int = 1) -> tuple[dict | None, int]:
    svc = _find(svcs, rest[0]) if rest else None
    if svc is None or len(rest) < need:
        return None, _not_a_service(rest[0] if rest else "")
    return svc, 0


# - the changes (-setmanual, -setdhcp, -createnetworkservice, -removenetworkservice, -renamenetworkservice,
#   -setnetworkserviceenabled, -ordernetworkservices, -setmtu) and that they persist: networksetup(8)
# - GUESS: their error lines (`is not a valid hardware port.`, `already exists.`) and exit codes but the
#   unknown service's; that -createnetworkservice works as root (issue 31 item 10: reported to fail on macOS 26)
def _set_manual(node: Node, data: dict, rest: list[str], touched: set[str]) -> int:
    if len(rest) < 3:
        return 4
    svc = _find(data["services"], rest[0])
    if svc is None:
        return _not_a_service(rest[0])
    import ipaddress

    try:
        ipaddress.IPv4Address(rest[1])
        mask_to_prefix(rest[2])
    except ValueError:
        sys.stdout.write("** Error: The parameters were not valid.\n")
        return 4
    svc.update(config="manual", ip=rest[1], mask=rest[2], router=rest[3] if len(rest) > 3 else None)
    touched.add(port_device(node, svc["port"]) or "")
    return 0


def _set_dhcp(node: Node, data: dict, rest: list[str], touched: set[str]) -> int:
    svc, rc = _named_service(data["services"], rest)
    if svc is not None:
        svc.update(config="dhcp", ip=None, mask=None, router=None)
        touched.add(port_device(node, svc["port"]) or "")
    return rc


# macOS 26 refuses `networksetup -createnetworkservice` as root, even on a port outside bridge0: "Unable to access
# the System Configuration database" (dryvist/nix-darwin docs/TB5-RDMA-CLUSTER.md, "verified 2026-07-18,
# dryvist/nix-darwin#1750"; exo's RCA notes the same on one machine), while other Macs create services (exo's own
# "EXO Thunderbolt N", shared/samples). A node with persist "sc_create_refused" refuses so (its exit status and
# stream are not reported: stdout and exit 1 are guesses, docs/lab.md); the others create.
SC_REFUSED = "Unable to access the System Configuration database."


def _create_service(node: Node, data: dict, rest: list[str], touched: set[str]) -> int:
    if data.get("sc_create_refused"):
        sys.stdout.write(f"** Error: {SC_REFUSED}\n")
        return 1
    if len(rest) < 2 or port_device(node, rest[1]) is None:
        sys.stdout.write(f"{rest[1] if len(rest) > 1 else ''} is not a valid hardware port.\n")
        return 4
    if _find(data["services"], rest[0]) is not None:
        sys.stdout.write(f"{rest[0]} already exists.\n** Error: The parameters were not valid.\n")
        return 4
    data["services"].append({"name": rest[0], "port": rest[1], "enabled": True, "config": "dhcp"})
    touched.add(port_device(node, rest[1]) or "")
    return 0


def _remove_service(node: Node, data: dict, rest: list[str], touched: set[str]) -> int:
    svc, rc = _named_service(data["services"], rest)
    if svc is not None:
        data["services"].remove(svc)
        touched.add(port_device(node, svc["port"]) or "")
    return rc


def _rename_service(node: Node, data: dict, rest: list[str], touched: set[str]) -> int:
    svc, rc = _named_service(data["services"], rest, need=2)
    if svc is not None:
        svc["name"] = rest[1]
    return rc


def _set_enabled(node: Node, data: dict, rest: list[str], touched: set[str]) -> int:
    svc, rc = _named_service(data["services"], rest, need=2)
    if svc is not None:
        svc["enabled"] = rest[1].lower() in ("on", "yes", "1", "true")
        touched.add(port_device(node, svc["port"]) or "")
    return rc


def _order_services(node: Node, data: dict, rest: list[str], touched: set[str]) -> int:
    order = {name: i for i, name in enumerate(rest)}
    data["services"].sort(key=lambda s: order.get(s["name"], len(order)))
    return 0


def _set_mtu(node: Node, data: dict, rest: list[str], touched: set[str]) -> int:
    if len(rest) < 2 or not rest[1].isdigit():
        return 4
    data.setdefault("mtu", {})[rest[0]] = int(rest[1])
    touched.add(rest[0])
    return 0


CHANGES = {"-setmanual": _set_manual, "-setdhcp": _set_dhcp, "-createnetworkservice": _create_service,
           "-removenetworkservice": _remove_service, "-renamenetworkservice": _rename_service,
           "-setnetworkserviceenabled": _set_enabled, "-ordernetworkservices": _order_services,
           "-setmtu": _set_mtu}


# - reads need no admin, changes need root: networksetup(8); an unknown verb's message: GUESS
def networksetup(node: Node, args: list[str]) -> int:
    if not args:
        sys.stdout.write("networksetup: no command given; see `networksetup -help`\n")
        return 0
    cmd, rest = args[0], args[1:]
    lc = cmd.lower()
    if lc in READS:
        return READS[lc](node, rest)
    if not is_root():
        return _need_root()
    change = CHANGES.get(lc)
    if change is None:
        sys.stdout.write(f"{cmd}: not simulated by the macfleet lab\n** Error: The parameters were not valid.\n")
        return 4
    touched: set[str] = set()
    rc = 0

    def mutate(data: dict) -> None:
        nonlocal rc
        data.setdefault("services", [])
        rc = change(node, data, rest, touched)

    node.update("persist", mutate)
    if rc == 0 and touched - {""}:
        apply(node, touched - {""})
    return rc


# ---------------------------------------------------------------------------------------------
# ifconfig
# ---------------------------------------------------------------------------------------------


def _names(node: Node, links: Links) -> list[str]:
    names = ["lo0", "gif0", "stf0"]
    names += [p["device"] for p in node.ports if links.exists(p["device"])]
    if links.exists(BRIDGE):
        names.append(BRIDGE)
    names += [MGMT_DEV, WIFI_DEV]
    return names


def _linux(name: str) -> str:
    return "lo" if name == "lo0" else name


def _hexmask(prefix: int) -> str:
    return f"0x{(0xFFFFFFFF << (32 - prefix)) & 0xFFFFFFFF if prefix else 0:08x}"


# - TAB-indented blocks, lo0/gif0/stf0, flags and options words, `ether`, a bridge member's PROMISC flag and no
#   address, `media: autoselect <full-duplex>`, `status: active|inactive`: samples
#   macos__ifconfig_full_macbook_bridge_inactive_1.txt; a Thunderbolt port with its own inet, netmask in hex and
#   a `secured` fe80: mlx__apple-tn3205_ifconfig_en2_thunderbolt-ip.txt; bridge0's Configuration, `member:`
#   and `ifmaxaddr … port N` lines: mlx__apple-tn3205_ifconfig_bridge0_default.txt
# - GUESS: en0's `10GbaseT` media and options, en1 (Wi-Fi) inactive, bridge member port numbers 10+i
def _block(node: Node, links: Links, name: str, scope: int) -> str:
    if name == "lo0":
        return (
            "lo0: flags=8049<UP,LOOPBACK,RUNNING,MULTICAST> mtu 16384\n"
            "\toptions=1203<RXCSUM,TXCSUM,TXSTATUS,SW_TIMESTAMP>\n"
            "\tinet 127.0.0.1 netmask 0xff000000\n"
            "\tinet6 ::1 prefixlen 128\n"
            "\tinet6 fe80::1%lo0 prefixlen 64 scopeid 0x1\n"
            "\tnd6 options=201<PERFORMNUD,DAD>\n"
        )
    if name == "gif0":
        return "gif0: flags=8010<POINTOPOINT,MULTICAST> mtu 1280\n"
    if name == "stf0":
        return "stf0: flags=0<> mtu 1280\n"
    if name == WIFI_DEV:
        return (
            f"en1: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500\n"
            f"\toptions=400<CHANNEL_IO>\n\tether {node.info['wifi_mac']}\n"
            f"\tnd6 options=201<PERFORMNUD,DAD>\n\tmedia: autoselect (<unknown type>)\n\tstatus: inactive\n"
        )
    up = links.up(name)
    member = links.master(name) == BRIDGE
    if up:
        flags = "8963<UP,BROADCAST,SMART,RUNNING,PROMISC,SIMPLEX,MULTICAST>" if member else (
            "8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST>"
        )
    else:
        flags = "8822<BROADCAST,SMART,SIMPLEX,MULTICAST>"
    mac = links.mac(name) or "00:00:00:00:00:00"
    lines = [f"{name}: flags={flags} mtu {links.mtu(name)}"]
    if name == BRIDGE:
        lines.append("\toptions=63<RXCSUM,TXCSUM,TSO4,TSO6>")
    elif name == MGMT_DEV:
        lines.append("\toptions=50b<RXCSUM,TXCSUM,VLAN_HWTAGGING,AV,CHANNEL_IO>")
    else:
        lines.append("\toptions=460<TSO4,TSO6,CHANNEL_IO>")
    lines.append(f"\tether {mac}")
    v4 = links.ipv4(name)
    if up and (v4 or links.carrier(name)) and not member:
        lines.append(f"\tinet6 {secured_fe80(mac + node.boot.get('boot_id', ''))}%{name} prefixlen 64 secured "
                     f"scopeid 0x{scope:x}")
    for ip, prefix in v4:
        lines.append(f"\tinet {ip} netmask {_hexmask(prefix)} broadcast {broadcast(ip, prefix)}")
    if name == BRIDGE:
        lines += [
            "\tConfiguration:",
            "\t\tid 0:0:0:0:0:0 priority 0 hellotime 0 fwddelay 0",
            "\t\tmaxage 0 holdcnt 0 proto stp maxaddr 100 timeout 1200",
            "\t\troot id 0:0:0:0:0:0 priority 0 ifcost 0 port 0",
            "\t\tipfilter disabled flags 0x0",
        ]
        for i, p in enumerate(node.ports):
            if links.master(p["device"]) == BRIDGE:
                lines.append(f"\tmember: {p['device']} flags=3<LEARNING,DISCOVER>")
                lines.append(f"\t        ifmaxaddr 0 port {10 + i} priority 0 path cost 0")
    lines.append("\tnd6 options=201<PERFORMNUD,DAD>")
    if name == BRIDGE:
        lines.append("\tmedia: <unknown type>")
    elif name == MGMT_DEV:
        lines.append("\tmedia: autoselect (10GbaseT <full-duplex>)")
    else:
        lines.append("\tmedia: autoselect <full-duplex>")
    active = links.carrier(name) if name != BRIDGE else any(links.carrier(p["device"]) for p in node.ports)
    lines.append(f"\tstatus: {'active' if active and up else 'inactive'}")
    return "\n".join(lines) + "\n"


def _parse_addr(words: list[str]) -> tuple[str, int | None]:
    import ipaddress

    addr = words[0]
    prefix = None
    if "/" in addr:
        addr, p = addr.split("/", 1)
        prefix = int(p)
    if "netmask" in words:
        prefix = mask_to_prefix(words[words.index("netmask") + 1])
    ipaddress.IPv4Address(addr)
    return addr, prefix


# - `-l`, `-a`, `-u`, one interface, `inet ADDR netmask M [alias]`, `-alias`, up/down, mtu: ifconfig(8);
#   its changes are runtime only (networksetup's persist: networksetup(8))
# - GUESS: the error messages
def ifconfig(node: Node, args: list[str]) -> int:
    links = Links()
    names = _names(node, links)
    if args and args[0] == "-l":
        sys.stdout.write(" ".join(names) + "\n")
        return 0
    if not args or args[0] in ("-a", "-u", "-v", "-au"):
        only_up = bool(args) and "u" in args[0]
        out = []
        for i, n in enumerate(names):
            if only_up and n not in ("lo0",) and not links.up(_linux(n)):
                continue
            out.append(_block(node, links, _linux(n) if n != "lo0" else "lo0", i + 1))
        sys.stdout.write("".join(out))
        return 0
    name, rest = args[0], args[1:]
    if name not in names:
        err(f"ifconfig: interface {name} does not exist")
        return 1
    if not rest:
        sys.stdout.write(_block(node, links, name, names.index(name) + 1))
        return 0
    if name in ("lo0", "gif0", "stf0", WIFI_DEV):
        err(f"ifconfig: {name}: not simulated by the macfleet lab")
        return 1
    if not is_root():
        err("ifconfig: ioctl (SIOCAIFADDR): Operation not permitted")
        return 1
    lines: list[str] = []
    words = [w for w in rest if w != "inet"]
    try:
        if words[0] in ("up", "down"):
            lines.append(f"link set dev {name} {words[0]}")
        elif words[0] == "mtu":
            lines.append(f"link set dev {name} mtu {int(words[1])}")
        elif words[0] in ("-alias", "delete"):
            ip, _ = _parse_addr(words[1:])
            for a, p in links.ipv4(name):
                if a == ip:
                    lines.append(f"addr del {a}/{p} dev {name}")
        else:
            alias = "alias" in words or "add" in words
            words = [w for w in words if w not in ("alias", "add")]  # BSD takes `alias` anywhere
            ip, prefix = _parse_addr(words)
            if prefix is None:
                prefix = 8 if ip.startswith("10.") else 16 if ip.startswith(("169.254.", "172.")) else 24
            if not alias:
                lines += [f"addr del {a}/{p} dev {name}" for a, p in links.ipv4(name)]
            import ipaddress

            net = ipaddress.IPv4Network(f"{ip}/{prefix}", strict=False)
            lines.append(f"addr replace {ip}/{prefix} broadcast {net.broadcast_address} dev {name}")
            if "down" in words:
                lines.append(f"link set dev {name} down")
            elif "up" in words:
                lines.append(f"link set dev {name} up")
    except (ValueError, IndexError):
        err("ifconfig: bad value")
        return 1
    ip_batch(lines)
    return 0


def fe80_of(mac: str) -> str:
    return eui64_fe80(mac)
