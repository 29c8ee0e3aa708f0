"""Small stand-ins: `date` (with the lab's clock-skew fault), `df` (APFS volumes, the disk-full fault),
`plutil -lint`, `route [-n] get|add|change|delete`, `netstat -rn` and `netstat -an -p tcp` (macOS layout),
`ipconfig getifaddr`.

Shapes are best guesses from macOS man pages where no capture exists (docs/lab.md lists them); only the
fields macfleet reads are meant to be exact.
"""

from __future__ import annotations

import os
import sys
import time

from .common import Node, err, ip_json, is_root, mask_to_prefix, prefix_to_mask, run

# ---------------------------------------------------------------------------------------------
# date
# ---------------------------------------------------------------------------------------------


def now(node: Node) -> float:
    return time.time() + float(node.persist.get("clock_skew") or 0)


# Sources (issue 31; samples = shared/samples, GUESS = listed in docs/lab.md "Guesses"):
# - `-u`, `-r SECONDS`, `+FORMAT` with `%s`: date(1) (BSD strftime); the usage text and errors: GUESS
def date(node: Node, args: list[str]) -> int:
    utc = False
    fmt = "%a %b %e %H:%M:%S %Z %Y"
    when = now(node)
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-u":
            utc = True
        elif a == "-r" and i + 1 < len(args):
            try:
                when = float(args[i + 1])
            except ValueError:
                err(f"date: {args[i + 1]}: invalid time")
                return 1
            i += 1
        elif a in ("-j", "-n"):
            pass
        elif a.startswith("+"):
            fmt = a[1:]
        else:
            err("date: settimeofday (timeval): Operation not permitted" if os.geteuid() == 0 else
                "usage: date [-jnRu] [-I[date|hours|minutes|seconds]] [-f input_fmt]\n"
                "            [-r filename|seconds] [-v[+|-]val[y|m|w|d|H|M|S]]\n"
                "            [[[[mm]dd]HH]MM[[cc]yy][.SS] | new_date] [+output_fmt]")
            return 1
        i += 1
    tm = time.gmtime(when) if utc else time.localtime(when)
    fmt = fmt.replace("%s", str(int(when)))
    sys.stdout.write(time.strftime(fmt, tm) + "\n")
    return 0


# ---------------------------------------------------------------------------------------------
# df
# ---------------------------------------------------------------------------------------------

DATA_TOTAL_KB = 1_942_700_360  # a 2 TB internal SSD as APFS reports it
SYSTEM_USED_KB = 10_843_984


def _volumes(node: Node) -> list[tuple[str, int, int, int, str]]:
    """(device, total KiB, used KiB, available KiB, mount point) of the two volumes macfleet cares for."""
    try:
        st = os.statvfs(node.dir)
        host_avail = st.f_bavail * st.f_frsize // 1024
    except OSError:
        host_avail = DATA_TOTAL_KB // 2
    avail = min(host_avail, DATA_TOTAL_KB - SYSTEM_USED_KB - 1)
    if node.persist.get("disk_full"):
        avail = 102_400  # what is left when APFS reports a full Data volume: ~100 MB
    data_used = DATA_TOTAL_KB - SYSTEM_USED_KB - avail
    return [
        ("/dev/disk3s1s1", DATA_TOTAL_KB, SYSTEM_USED_KB, avail, "/"),
        ("/dev/disk3s5", DATA_TOTAL_KB, data_used, avail, "/System/Volumes/Data"),
    ]


def _human(kb: int) -> str:
    size = kb * 1024.0
    for unit in ("B", "Ki", "Mi", "Gi", "Ti"):
        if size < 1024 or unit == "Ti":
            return f"{size:.0f}{unit}" if size >= 10 or unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return f"{size:.0f}Pi"


# - `df -k PATH` columns (Filesystem 1024-blocks Used Available Capacity iused ifree %iused Mounted on): df(1);
#   the APFS volume names and values: GUESS (docs/lab.md)
def df(node: Node, args: list[str]) -> int:
    human = any(a.startswith("-") and "h" in a for a in args)
    paths = [a for a in args if not a.startswith("-")]
    vols = _volumes(node)
    if paths:
        chosen = []
        for p in paths:
            if not os.path.exists(p):
                err(f"df: {p}: No such file or directory")
                return 1
            # a relative path is the login directory's (/Users/…), on the Data volume as on a Mac
            data = os.path.abspath(p).startswith(("/Users", "/opt", "/Library", "/private", "/System/Volumes/Data",
                                                  "/tmp"))
            chosen.append(vols[1] if data else vols[0])
        vols = chosen
    if human:
        out = ["Filesystem        Size    Used   Avail Capacity iused ifree %iused  Mounted on"]
    else:
        out = ["Filesystem     1024-blocks      Used  Available Capacity iused      ifree %iused  Mounted on"]
    for dev, total, used, avail, mount in vols:
        cap = f"{(used * 100 + (used + avail) - 1) // max(used + avail, 1)}%"
        if human:
            out.append(f"{dev:<16} {_human(total):>5} {_human(used):>7} {_human(avail):>7} {cap:>8}    404k  4.3G"
                       f"    0%   {mount}")
        else:
            out.append(f"{dev:<14} {total:>11} {used:>9} {avail:>10} {cap:>8}  404340 4293891820    0%   {mount}")
    sys.stdout.write("\n".join(out) + "\n")
    return 0


# ---------------------------------------------------------------------------------------------
# plutil
# ---------------------------------------------------------------------------------------------


# - `plutil -lint FILE` → `FILE: OK`: plutil(1); the error wording: GUESS
def plutil(node: Node, args: list[str]) -> int:
    import plistlib

    if not args or args[0] != "-lint":
        err("plutil: only -lint is simulated by the macfleet lab")
        return 1
    files = [a for a in args[1:] if a != "-s"]
    silent = "-s" in args[1:]
    if not files:
        err("No files specified.")
        return 1
    rc = 0
    for path in files:
        try:
            with open(path, "rb") as f:
                plistlib.load(f)
        except FileNotFoundError:
            sys.stdout.write(f"{path}: file does not exist or is not readable or is not a regular file "
                             "(Error Domain=NSCocoaErrorDomain Code=260)\n")
            rc = 1
            continue
        except Exception as e:  # plistlib raises several types for a bad document
            sys.stdout.write(f"{path}: {e}\n")
            rc = 1
            continue
        if not silent:
            sys.stdout.write(f"{path}: OK\n")
    return rc


# ---------------------------------------------------------------------------------------------
# route / netstat
# ---------------------------------------------------------------------------------------------


def _mac_dev(dev: str) -> str:
    return "lo0" if dev == "lo" else dev


ROUTE_USAGE = "usage: route [-dnqtv] command [[modifiers] args]"


# - `route [-n] get|add|change|delete`: route(8); messages (`add net …: gateway …`, `writing to routing socket:
#   File exists|not in table`, `must be root to alter routing table`): GUESS after route(8) (docs/lab.md)
def route(node: Node, args: list[str]) -> int:
    """`route [-n] get DEST`, and `route [-n] add|change|delete [-net|-host] DEST[/LEN] [-netmask MASK]
    (-interface IFACE | GATEWAY)`: changes the namespace's routing table only (lost at the next reboot, as
    on a Mac, where route(8) changes are never persisted)."""
    words = [a for a in args if a not in ("-n", "-q", "-v")]
    if len(words) >= 2 and words[0] == "get":
        return _route_get(words)
    if len(words) >= 2 and words[0] in ("add", "change", "delete"):
        return _route_change(words[0], words[1:])
    err(ROUTE_USAGE)
    return 64


def _route_target(words: list[str]) -> tuple[str, str, str, str] | None:
    """(kind net|host, destination as DEST/LEN, iface or "", gateway or "") from route(8)'s arguments."""
    import ipaddress

    kind = "host" if "-host" in words else "net"
    rest = [w for w in words if w not in ("-net", "-host", "-inet", "-static", "-cloning")]
    iface = gateway = mask = ""
    plain: list[str] = []
    i = 0
    while i < len(rest):
        if rest[i] in ("-interface", "-iface", "-netmask") and i + 1 < len(rest):
            if rest[i] == "-netmask":
                mask = rest[i + 1]
            else:
                iface = rest[i + 1]
            i += 2
            continue
        plain.append(rest[i])
        i += 1
    if not plain:
        return None
    dest = "0.0.0.0/0" if plain[0] == "default" else plain[0]
    if "/" not in dest:
        dest += f"/{mask_to_prefix(mask)}" if mask else ("/32" if kind == "host" else "")
    if "/" not in dest:  # a bare network: as BSD, its class decides the mask (10/8, 172.16/16, 192.168/24)
        first = int(dest.split(".")[0])
        dest += "/8" if first < 128 else "/16" if first < 192 else "/24"
    net = ipaddress.IPv4Network(dest, strict=False)
    if net.prefixlen == 32:
        kind = "host"
    if len(plain) > 1:
        gateway = plain[1]
        ipaddress.IPv4Address(gateway)
    return kind, str(net), iface, gateway


def _route_change(verb: str, words: list[str]) -> int:
    try:
        target = _route_target(words)
    except ValueError as e:
        err(f"route: bad address: {e}")
        return 68
    if target is None or (verb != "delete" and not target[2] and not target[3]):
        err(ROUTE_USAGE)
        return 64
    if not is_root():
        err("route: must be root to alter routing table")
        return 1
    kind, dest, iface, gateway = target
    shown = dest.split("/")[0]  # macOS names the destination without its mask ("add net 10.1.0.0: gateway en2")
    via = iface or gateway
    ip_verb = {"add": "add", "change": "change", "delete": "del"}[verb]
    argv = ["route", ip_verb, dest] + (["dev", iface] if iface else []) + (["via", gateway] if gateway else [])
    from .common import IP

    p = run([IP, *argv])
    if p.returncode != 0:
        reason = "File exists" if "exists" in p.stderr else "not in table"
        err(f"route: writing to routing socket: {reason}")
        sys.stdout.write(f"{verb} {kind} {shown}: gateway {via}: {reason}\n" if via else
                         f"{verb} {kind} {shown}: {reason}\n")
        return 1
    sys.stdout.write(f"{verb} {kind} {shown}: gateway {via}\n" if via else f"{verb} {kind} {shown}\n")
    return 0


def _route_get(words: list[str]) -> int:
    dest = words[1] if words[1] not in ("-inet", "-host", "-net") else (words[2] if len(words) > 2 else "")
    dest = "0.0.0.0" if dest == "default" else dest
    got = ip_json("route", "get", dest)
    if not got:
        sys.stdout.write(f"   route to: {dest}\nroute: writing to routing socket: not in table\n")
        return 1
    r = got[0]
    dev = _mac_dev(r.get("dev", ""))
    destination, mask = dest, None
    from .rtnl import ipv4_routes

    for rt in ipv4_routes():
        if rt.get("dev") == r.get("dev") and "/" in rt.get("dst", "") and not r.get("gateway"):
            import ipaddress

            net = ipaddress.IPv4Network(rt["dst"], strict=False)
            if ipaddress.IPv4Address(dest) in net:
                destination, mask = str(net.network_address), prefix_to_mask(net.prefixlen)
                break
    lines = [f"   route to: {dest}", f"destination: {'default' if r.get('gateway') else destination}"]
    if r.get("gateway"):
        lines += ["       mask: default", f"    gateway: {r['gateway']}"]
    elif mask:
        lines.append(f"       mask: {mask}")
    lines += [f"  interface: {dev}", "      flags: <UP,DONE,CLONING>" if not r.get("gateway")
              else "      flags: <UP,GATEWAY,DONE,STATIC,PRCLONING,GLOBAL>",
              " recvpipe  sendpipe  ssthresh  rtt,msec    rttvar  hopcount      mtu     expire",
              "       0         0         0         0         0         0      1500         0"]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


# /proc/net/tcp's st column -> the BSD state names netstat prints
_TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECEIVED", "04": "FIN_WAIT_1", "05": "FIN_WAIT_2",
               "06": "TIME_WAIT", "07": "CLOSED", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN",
               "0B": "CLOSING"}


def _proc_address(hex_addr: str, v6: bool) -> tuple[str, int]:
    import ipaddress
    import struct

    addr, port = hex_addr.split(":")
    raw = bytes.fromhex(addr)
    if v6:
        ip = ipaddress.IPv6Address(b"".join(struct.pack("<I", w) for w in struct.unpack(">4I", raw)))
        text = str(ip.ipv4_mapped) if ip.ipv4_mapped else ("*" if ip.is_unspecified else str(ip))
    else:
        ip4 = ipaddress.IPv4Address(raw[::-1])
        text = "*" if ip4.is_unspecified else str(ip4)
    return text, int(port, 16)


def _tcp_rows() -> list[str]:
    """The node's TCP sockets (its own network namespace's /proc/net/tcp{,6}) as macOS's `netstat -an -p tcp`
    rows: `tcp4`/`tcp6`, or `tcp46` for a socket on every IPv6 address (dual-stack, as on macOS)."""
    rows = []
    for name, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            with open(name) as fh:
                lines = fh.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            (la, lp), (ra, rp) = _proc_address(f[1], v6), _proc_address(f[2], v6)
            proto = ("tcp46" if la == "*" else "tcp6") if v6 else "tcp4"
            local = f"{la}.{lp}"
            foreign = "*.*" if ra == "*" and rp == 0 else f"{ra}.{rp}"
            rows.append(f"{proto:<6}{0:>6} {0:>6}  {local:<22} {foreign:<22} {_TCP_STATES.get(f[3], 'CLOSED'):<11}")
    return rows


# - `netstat -rn`: tests/fixtures/captures/netstat-routes/ (macOS 11.3 and a VMware Mac); `netstat -an -p tcp`:
#   tests/fixtures/captures/netstat-listen/ (Mojave -v, Sonoma); title and header without -v: GUESS
def netstat(node: Node, args: list[str]) -> int:
    flags = "".join(a.lstrip("-") for a in args if a.startswith("-"))
    if "r" not in flags and "a" in flags and "tcp" in args:
        # the shape of tests/fixtures/captures/netstat-listen (title and header lines: docs/lab.md)
        out = ["Active Internet connections (including servers)",
               "Proto Recv-Q Send-Q  Local Address          Foreign Address        (state)    ", *_tcp_rows()]
        sys.stdout.write("\n".join(out) + "\n")
        return 0
    if "r" not in flags:
        err("netstat: only -r (routing tables) and -an -p tcp are simulated by the macfleet lab")
        return 1
    out = ["Routing tables", "", "Internet:",
           f"{'Destination':<19}{'Gateway':<19}{'Flags':<16}{'Netif':>9} Expire"]
    rows = []
    from .rtnl import ipv4_routes

    for rt in ipv4_routes():
        dev = _mac_dev(rt.get("dev", ""))
        dst = rt.get("dst", "")
        if dst == "default":
            rows.append(("default", rt.get("gateway", ""), "UGScg", dev))
        elif rt.get("gateway"):
            rows.append((dst, rt["gateway"], "UGSc", dev))
        else:
            rows.append((dst, f"link#{_ifindex(rt.get('dev', ''))}", "UCS", dev))
    rows.append(("127", "127.0.0.1", "UCS", "lo0"))
    rows.append(("127.0.0.1", "127.0.0.1", "UH", "lo0"))
    for dst, gw, fl, dev in rows:
        out.append(f"{dst:<19}{gw:<19}{fl:<16}{dev:>9}")
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def _ifindex(dev: str) -> str:
    try:
        with open(f"/sys/class/net/{dev}/ifindex") as f:
            return f.read().strip()
    except OSError:
        return "0"


# ---------------------------------------------------------------------------------------------
# ipconfig
# ---------------------------------------------------------------------------------------------


# - `ipconfig getifaddr IFACE`: the first IPv4, nothing and exit 1 without one: ipconfig(8); GUESS otherwise
def ipconfig(node: Node, args: list[str]) -> int:
    """`ipconfig getifaddr IFACE`: the interface's first IPv4 address; nothing and exit 1 without one."""
    if len(args) != 2 or args[0] != "getifaddr":
        err("usage: ipconfig <command> <args>\n(only `ipconfig getifaddr IFACE` is simulated by the macfleet lab)")
        return 64
    from .rtnl import ipv4_addresses

    for address, _prefix in ipv4_addresses().get(args[1], [])[:1]:
        sys.stdout.write(address + "\n")
        return 0
    return 1
