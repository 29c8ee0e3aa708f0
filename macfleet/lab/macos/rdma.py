"""`ibv_devices`, `ibv_devinfo`, `ioclasscount`, `rdma_ctl` and `nvram` stand-ins.

Shapes: rdma-core's tab layout as in shared/samples/macos__ibv_devices_*, mlx__apple-tn3205_ibv_devinfo_*,
macos__ibv_devinfo_v_* (copies in tests/fixtures/captures/). One rdma_enX per Thunderbolt port while RDMA is
enabled (none while disabled, exit 0). A port is PORT_ACTIVE only when the cable is up, both ends have RDMA
on, both ports are RDMA-capable and the cable is TB5; GID[1] (IPv4-mapped) appears only when enX has an IPv4.
"""

from __future__ import annotations

import os
import sys

from .common import Links, Node, err, eui64_fe80, read_json, secured_fe80

# `ibv_devinfo -v`'s max_pd and max_qp on every device: 11, reported by dryvist/nix-ai
# docs/runbooks/rdma-protection-domains.md at 0109b839359efebde2b08d10ab9db4ec4af0cccd (`max_pd: 11  max_qp: 11`)
MAX_PD = MAX_QP = 11


# Sources (issue 31; samples = shared/samples, GUESS = listed in docs/lab.md "Guesses"):
# - no rdma_enX on a Thunderbolt 4 Mac although `rdma_ctl status` says enabled: samples
#   mlx__omlx-issue-3037_rdma_ctl_status_ibv_devices_empty_tb4.txt (and the reporter of
#   exo__mlx-issue-3777_exo1071_distributed_config_rdma_not_enabled.txt, M4 Mac mini)
def has_devices(node: Node) -> bool:
    """RDMA devices exist only while RDMA is on, and only on a Thunderbolt 5 Mac: on a Thunderbolt 4 Mac
    `rdma_ctl enable` succeeds but `ibv_devices` stays empty (as reported on an M4 Mac mini in
    github.com/jundot/omlx/issues/3037)."""
    return node.rdma_enabled and any(p["max_speed_gbps"] >= 80 for p in node.ports)


# - GUESS: the GUID's value (its 16-hex shape: samples macos__ibv_devices_studio_m3ultra_1.txt)
def node_guid(node: Node, receptacle: int) -> str:
    return f"{0xD0 + receptacle - 1:02x}{node.info['guid_base']}ac05"


# - PORT_ACTIVE on every cabled port of a mesh with RDMA on: samples mlx__apple-tn3205_ibv_devinfo_4-node-m4-pro-
#   cluster.txt; PORT_DOWN while the peer has RDMA off, through a hub or over a non-TB5 cable: GUESS (reported,
#   not captured: research/macos-outputs.md sections 8 and 10)
def port_active(node: Node, port: dict, links: Links) -> bool:
    if not node.rdma_enabled or not port["rdma_capable"] or not links.carrier(port["device"]):
        return False
    hit = node.peer(port["receptacle"])
    if hit is None:
        return False
    cable, peer, far = hit
    if cable.get("kind", "tb5") != "tb5" or cable.get("hub"):
        return False
    far_port = peer.port(far["receptacle"])
    return bool(
        peer.rdma_enabled and far_port and far_port["rdma_capable"] and peer.boot.get("power") == "on"
        and not peer.boot.get("rdma_wedged") and not node.boot.get("rdma_wedged")
    )


# - header and one `rdma_enX<TAB>GUID` row per port: samples macos__ibv_devices_studio_m3ultra_1.txt,
#   mlx__apple-tn3205_ibv_devices_m4-pro-mac-mini.txt; header only, exit 0, with RDMA off:
#   macos__ibv_devices_rdma_disabled_1.txt
# - GUESS: rows in receptacle order (a real Mac lists kernel order, e.g. M5 Max en1, en6, en2)
def ibv_devices(node: Node, args: list[str]) -> int:
    out = ["    device          \t   node GUID", "    ------          \t----------------"]
    if has_devices(node):
        for p in node.ports:
            out.append(f"    {'rdma_' + p['device']:<16}\t{node_guid(node, p['receptacle'])}")
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def _guid_groups(guid: str) -> str:
    return ":".join(guid[i : i + 4] for i in range(0, 16, 4))


# - per-device block (hca_id … link_layer, TAB layout, transport Thunderbolt (100), port_lid = index): samples
#   mlx__apple-tn3205_ibv_devinfo_4-node-m4-pro-cluster.txt, macos__ibv_devinfo_elided_macmini_m4pro_tn3205_1.txt
# - `-v`: GID[0] EUI-64 fe80 of enX's MAC, GID[1] ::ffff:<IPv4> only with an IPv4, then the secured fe80:
#   mlx__apple-tn3205_ibv_devinfo_-d_rdma_en2_-v.txt, macos__ibv_devinfo_v_rdma_en2_elided_tn3205_1.txt;
#   active_width 8X idle / 4X active, active_speed 10.0 Gbps: macos__ibv_devinfo_v_grep_tb4_mac_3ports_1.txt,
#   macos__ibv_devinfo_v_grep_peer_en9_1.txt; max_pd/max_qp 11: reported by dryvist/nix-ai's runbook
#   (`max_pd: 11  max_qp: 11  max_cq: 11`, /work/shared/research/users-2026-12.md); max_mr 100: GUESS
# - "No IB devices found": the reporter's words in exo__mlx-issue-3777_…_rdma_not_enabled.txt; its exit 255,
#   `-l`'s "N HCAs found:", the unknown `-d` message, max_mr_size/page_size_cap/max_qp_wr/max_cqe/max_msg_sz
#   values and the phys_state strings: GUESS
# - hanging while the rdma-wedge fault is on: GUESS (a lab fault)
def ibv_devinfo(node: Node, args: list[str]) -> int:
    verbose = "-v" in args or "--verbose" in args
    want = None
    for i, a in enumerate(args):
        if a in ("-d", "--ib-dev") and i + 1 < len(args):
            want = args[i + 1]
        elif a.startswith("--ib-dev="):
            want = a.split("=", 1)[1]
    if "-l" in args or "--list" in args:
        devs = [f"rdma_{p['device']}" for p in node.ports] if has_devices(node) else []
        sys.stdout.write(f"{len(devs)} HCA{'s' if len(devs) != 1 else ''} found:\n")
        sys.stdout.write("".join(f"\t{d}\n" for d in devs))
        return 0
    if not has_devices(node):
        sys.stdout.write("No IB devices found\n")
        return 255
    if node.boot.get("rdma_hang"):  # fault hook: ibv_devinfo hangs while the RDMA stack is wedged
        import time

        time.sleep(3600)
    links = Links()
    blocks = []
    found = False
    for p in node.ports:
        dev = p["device"]
        hca = f"rdma_{dev}"
        if want and want != hca:
            continue
        found = True
        guid = _guid_groups(node_guid(node, p["receptacle"]))
        active = port_active(node, p, links)
        lines = [
            f"hca_id:\t{hca}",
            "\ttransport:\t\t\tThunderbolt (100)",
            f"\tnode_guid:\t\t\t{guid}",
            f"\tsys_image_guid:\t\t\t{guid}",
            "\tvendor_id:\t\t\t0x0000",
            "\tvendor_part_id:\t\t\t0",
            "\thw_ver:\t\t\t\t0x0",
            "\tphys_port_cnt:\t\t\t1",
        ]
        if verbose:
            lines += [
                "\tmax_mr_size:\t\t\t0x100000000",
                "\tpage_size_cap:\t\t\t0x4000",
                f"\tmax_qp:\t\t\t\t{MAX_QP}",
                "\tmax_qp_wr:\t\t\t8192",
                "\tmax_sge:\t\t\t1",
                "\tmax_cq:\t\t\t\t11",
                "\tmax_cqe:\t\t\t8192",
                "\tmax_mr:\t\t\t\t100",
                f"\tmax_pd:\t\t\t\t{MAX_PD}",
            ]
        lines += [
            "\t\tport:\t1",
            f"\t\t\tstate:\t\t\t{'PORT_ACTIVE (4)' if active else 'PORT_DOWN (1)'}",
            "\t\t\tmax_mtu:\t\t4096 (5)",
            "\t\t\tactive_mtu:\t\t4096 (5)",
            "\t\t\tsm_lid:\t\t\t0",
            f"\t\t\tport_lid:\t\t{p['receptacle'] - 1}",
            "\t\t\tport_lmc:\t\t0x00",
            "\t\t\tlink_layer:\t\tThunderbolt",
        ]
        if verbose:
            mac = links.mac(dev) or node.mac(p["receptacle"])
            lines += [
                "\t\t\tmax_msg_sz:\t\t0x40000000",
                f"\t\t\tactive_width:\t\t{'4X (2)' if active else '8X (4)'}",
                "\t\t\tactive_speed:\t\t10.0 Gbps (4)",
                f"\t\t\tphys_state:\t\t{'LINK_UP (5)' if active else 'DISABLED (3)'}",
                f"\t\t\tGID[  0]:\t\t{eui64_fe80(mac)}",
            ]
            v4 = links.ipv4(dev)
            n = 1
            if v4:
                lines.append(f"\t\t\tGID[  1]:\t\t::ffff:{v4[0][0]}")
                n = 2
            if links.carrier(dev):
                lines.append(f"\t\t\tGID[{n:>3}]:\t\t{secured_fe80(mac + node.boot.get('boot_id', ''))}")
        blocks.append("\n".join(lines) + "\n")
    if want and not found:
        err(f"IB device '{want}' wasn't found")
        return 255
    sys.stdout.write("\n".join(blocks) + "\n")
    return 0


# The Thunderbolt RDMA driver's classes the kernel counts: dryvist/nix-ai docs/runbooks/cluster-link-truths.md at
# af5aedae5636f2d473b2fed3bea2843ee203aa14 ("`ioclasscount AppleThunderboltRDMAProtectionDomain` (and
# `AppleThunderboltRDMAQueuePair` for mesh state)")
PD_CLASS = "AppleThunderboltRDMAProtectionDomain"
QP_CLASS = "AppleThunderboltRDMAQueuePair"
# Where the exo stand-in keeps the runner starts that hold their resources (lab/exo/runner.py Leak), in the admin's
# home: the exo stand-in's name for it (tests/test_lab_ioclasscount.py holds the two the same)
EXO_LEAK_FILE = ".exo/lab_rdma_leak.json"


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it lives
        return True
    return True


def runner_shares(node: Node) -> int:
    """Runner starts holding one protection domain and one queue pair on each active device now: exo's failed
    starts since this boot (lab/exo/runner.py Leak) and its runner while it holds (its pid noted, alive)."""
    from .system import kern_boottime

    try:
        leak = read_json(node.dir / "fs" / "Users" / node.lab.spec["user"] / EXO_LEAK_FILE, None)
    except ValueError:
        leak = None
    if not isinstance(leak, dict) or str(leak.get("boot", "")).strip() != kern_boottime(node.boot).strip():
        return 0  # none written this boot: a reboot releases everything
    failed = leak.get("failed")
    held = failed if isinstance(failed, int) and not isinstance(failed, bool) and failed > 0 else 0
    return held + int(_alive(leak.get("runner")))


# - `NAME = N` for each class named, in the order named, `, ` between and a newline after the last;
#   `NAME = <no such class>` for a class the kernel does not know: Apple's IOKitTools/ioclasscount.tproj/
#   ioclasscount.c at 04b1b654a84a3c15e1420ab7913cbf701fa74cbc (`printInstanceCount`, `main`); ioclasscount(8)
#   ("a comma-separated list in the order specified"). No real capture on an RDMA Mac is known.
# - the two RDMA classes (dryvist/nix-ai, above); the node-wide count = the runner starts holding (runner_shares)
#   x the active RDMA devices, each device capped at max_pd domains and max_qp - 1 queue pairs (ml-explore/mlx#4209:
#   the 11th queue pair is refused): GUESS (one of each per device per start is the lab's model, lab/exo/runner.py)
# - the classes known, counting 0, with RDMA off or no active device (the driver loaded): GUESS
# - no class named: only these two, one a line (a Mac lists every class it knows, sorted); any option: refused
#   with a usage line, exit 1 (a Mac's own options need a DEVELOPMENT kernel): GUESS
def ioclasscount(node: Node, args: list[str]) -> int:
    if any(a.startswith("-") for a in args):
        err("usage: ioclasscount [classname] [...] (the lab models instance counts only)")
        return 1
    links = Links()
    active = sum(1 for p in node.ports if port_active(node, p, links)) if has_devices(node) else 0
    shares = runner_shares(node) if active else 0
    counts = {PD_CLASS: min(shares, MAX_PD) * active, QP_CLASS: min(shares, MAX_QP - 1) * active}
    if not args:
        sys.stdout.write("".join(f"{n} = {counts[n]}\n" for n in sorted(counts, key=str.lower)))
        return 0
    sys.stdout.write(", ".join(f"{n} = {counts.get(n, '<no such class>')}" for n in args) + "\n")
    return 0


RECOVERY_ENV = "MACFLEET_LAB_RECOVERY"


RDMA_CTL_NOT_IN_RECOVERY = "This tool needs to be executed from Recovery OS"


# - `status` prints one word: samples macos__rdma_ctl_status_enabled_1.txt, _enabled_2.txt; `disabled`: GUESS
#   (no capture; exo matches the word, src/exo/utils/info_gatherer/info_gatherer.py)
# - enable/disable refused outside Recovery with RDMA_CTL_NOT_IN_RECOVERY, exit 77: dryvist/nix-darwin
#   docs/TB5-RDMA-CLUSTER.md (jundot/omlx reports exit 0 with the same words); the stream: GUESS; working in
#   Recovery: the exo README's "Enabling RDMA" and Apple TN3205 (Recovery Terminal, then restart)
def rdma_ctl(node: Node, args: list[str]) -> int:
    sub = args[0] if args else ""
    if sub == "status":
        sys.stdout.write("enabled\n" if node.rdma_enabled else "disabled\n")
        return 0
    if sub in ("enable", "disable"):
        if os.environ.get(RECOVERY_ENV) != "1":
            # macOS refuses outside Recovery, even as root: "This tool needs to be executed from Recovery OS", exit
            # 77 (dryvist/nix-darwin docs/TB5-RDMA-CLUSTER.md, "verified 2026-07-10"; SQCU/mesh README). jundot/omlx
            # reports the same text with exit 0, so a reader must judge the text, not the exit code. The stream is
            # not reported: stderr is a guess (docs/lab.md).
            err(RDMA_CTL_NOT_IN_RECOVERY)
            return 77
        node.update("persist", lambda d: d.__setitem__("rdma", sub == "enable"))
        sys.stdout.write(f"RDMA {'enabled' if sub == 'enable' else 'disabled'}. Restart to apply.\n")
        return 0
    err("usage: rdma_ctl enable | disable | status")
    return 64


# - `rdma-enable 1` once RDMA is on: the reporter's words in exo__mlx-issue-3777_…_rdma_not_enabled.txt
# - `name<TAB>value` lines: nvram(8); its error messages: GUESS
def nvram(node: Node, args: list[str]) -> int:
    persist = node.persist
    variables = {"boot-args": ""}
    if persist.get("rdma"):
        variables["rdma-enable"] = "1"
    if not args or args[0] in ("-p", "-xp"):
        sys.stdout.write("".join(f"{k}\t{v}\n" for k, v in variables.items()))
        return 0
    if "=" in args[0] or args[0] == "-d":
        if os.geteuid() != 0:
            err(f"nvram: Error setting variable - '{args[0].split('=')[0]}': (iokit/common) not permitted")
            return 1
        return 0
    name = args[0]
    if name not in variables:
        err(f"nvram: Error getting variable - '{name}': (iokit/common) data was not found")
        return 1
    sys.stdout.write(f"{name}\t{variables[name]}\n")
    return 0
