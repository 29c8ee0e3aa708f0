"""Lab faults: every failure a real Thunderbolt mesh shows, on demand (`macfleet lab fault`, docs/lab-faults.md).

A fault is a small change of the lab's state — the plan (`lab.json` cables), a node's `persist.json` /
`boot.json`, the exo stand-in's overlay `~/.exo/lab_faults.json` — plus the matching namespace change (veth
moved or down, tc rate, addresses), so the macOS stand-ins and the exo stand-in show it where a Mac would,
and nowhere else. Active faults are recorded in `<state>/faults.json` with what `--clear` needs to undo
exactly what was done. Reboots keep or clear them as a Mac would (`on_boot`, called by every boot):

  kept    cabling, bridge-on, apipa, ip-drift saved, rdma-off, slow-boot, slow-shutdown, os-mismatch, filevault-on,
          disk-full, sleep-on, clock-skew, exo-version, exo-networksetup (settings, disk, hardware, an installed
          daemon: until --clear)
  cleared ip-drift live, hang, qp-exhausted, wired-limit-lost, exo-down, exo-runner-failed, runner-ignores-term,
          rdma-leak, exo-split, exo-coordinator (at the node's boot)
  rdma-wedge  only once every node of its mesh has booted within WEDGE_WINDOW_S of each other, after the
              fault; rebooting the wedged node alone leaves it wedged.

Every argument is checked before anything changes (UsageError, exit 2).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import math
import os
import shlex
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from macfleet.constants import EXO_LABEL
from macfleet.errors import LabError, UsageError

from . import netns, state
from . import spec as specmod
from .macos import common as userland

WEDGE_WINDOW_S = 600.0  # rdma-wedge clears when all nodes of the mesh booted within 10 minutes of each other
OTHER_BUILD = {"version": "26.4.1", "build": "25E253"}  # an older macOS 26 build seen on clusters
OTHER_BUILD_2 = {"version": "26.2", "build": "25C56"}
QP_EBUSY = "[jaccl] Creating the queue pair failed with errno 16"
DOCK = {"name": "Thunderbolt 4 Docking Station (8-in-1)", "vendor": "Ugreen Group Limited", "device_id": "0x708",
        "speed": "40 Gb/s"}  # shape of shared/samples/macos__sp_thunderbolt_json_mbp_tb5_dock_1.json


# ---------------------------------------------------------------------------------------------
# State: lab dir, records, node files
# ---------------------------------------------------------------------------------------------


class LoadedLab:
    """A lab loaded for one fault operation: its plan, paths, and helpers to read and change its nodes."""

    def __init__(self, name: str):
        self.name = name
        self.dir = state.lab_dir(name)
        self.lab = state.load(name)

    def reload(self) -> None:
        self.lab = state.load(self.name)

    def save_plan(self) -> None:
        userland.write_json(self.dir / "lab.json", self.lab)

    def node(self, node: str) -> userland.Node:
        return userland.Node(userland.Lab(self.dir), node)

    def ns(self, node: str) -> str:
        return self.lab["nodes"][node]["ns"]

    def power(self, node: str) -> str:
        return userland.read_json(self.dir / "nodes" / node / "boot.json", {}).get("power", "off")

    def on(self, node: str) -> bool:
        return self.power(node) == "on"

    def exo_overlay(self, node: str) -> str:
        return os.path.join(self.dir, "nodes", node, "fs", "Users", self.lab["user"], ".exo", "lab_faults.json")

    def set_overlay(self, node: str, key: str, value: object) -> None:
        path = self.exo_overlay(node)
        data = userland.read_json(path, {}) or {}
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
        if data:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            userland.write_json(path, data)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def netapply(self, node: str, devices: list[str] | None = None) -> None:
        """Re-apply the node's persisted network services in its namespace (as configd does)."""
        if self.power(node) in ("on", "booting"):
            netns.reapply_services(self.lab, node, devices)

    def ssh(self, node: str, command: str, *, input: str | None = None) -> subprocess.CompletedProcess:
        argv = state.ssh_argv(self.name, node, command)
        return subprocess.run(argv, input=input, capture_output=True, text=True, timeout=30)

    def admin_password(self) -> str:
        return (self.dir / "admin-password").read_text().strip()


@contextlib.contextmanager
def _locked(d):
    with open(os.path.join(d, "faults.lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def records(d) -> list[dict]:
    return userland.read_json(os.path.join(d, "faults.json"), []) or []


def _save_records(d, recs: list[dict]) -> None:
    userland.write_json(os.path.join(d, "faults.json"), recs)


def active_by_node(name: str) -> dict[str, list[str]]:
    """{node: ["kind arg…", …]} for `lab status` (a pair fault shows on both nodes)."""
    out: dict[str, list[str]] = {}
    for r in records(state.lab_dir(name)):
        text = " ".join([r["kind"], *r["args"]])
        for node in r.get("nodes", []):
            out.setdefault(node, []).append(text)
    return out


# ---------------------------------------------------------------------------------------------
# Cabling helpers
# ---------------------------------------------------------------------------------------------


def _ends(cable: dict) -> set[str]:
    return {cable["a"]["node"], cable["b"]["node"]}


def _cable_between(lab: dict, a: str, b: str) -> dict:
    for c in lab["cables"]:
        if _ends(c) == {a, b} and not c.get("hub") and not c.get("foreign"):
            return c
    raise UsageError(f"no cable between {a} and {b}", hint="see the plan: `macfleet lab status`; "
                     "cabling faults need an existing direct cable")


def _used(lab: dict, node: str) -> set[int]:
    return {e["receptacle"] for c in lab["cables"] for e in (c["a"], c["b"]) if e["node"] == node}


def _reserved(target: LoadedLab, node: str) -> set[int]:
    """Ports an active fault will need back on --clear (an unplugged cable, a moved end)."""
    out = set()
    for r in records(target.dir):
        for cable in (r["data"].get("cable"), r["data"].get("before")):
            if isinstance(cable, dict) and "a" in cable:
                out |= {e["receptacle"] for e in (cable["a"], cable["b"]) if e["node"] == node}
    return out


def _free_rdma_port(target: LoadedLab, node: str) -> int:
    lab = target.lab
    model = lab["models"][lab["nodes"][node]["model"]]
    used = _used(lab, node) | _reserved(target, node)
    for p in model["ports"]:
        if p["rdma_capable"] and p["receptacle"] not in used:
            return p["receptacle"]
    raise UsageError(f"{node} has no free RDMA-capable Thunderbolt port")


def _same(c1: dict, c2: dict) -> bool:
    return c1["a"] == c2["a"] and c1["b"] == c2["b"]


def _find_cable(lab: dict, cable: dict) -> dict:
    for c in lab["cables"]:
        if _same(c, cable):
            return c
    raise LabError("the faulted cable is no longer in lab.json", hint="lab.json was edited by hand?")


def _tb_rate_half(lab: dict) -> str:
    bits = specmod.rate_bits(lab["tb_rate"]) // 2
    return f"{max(bits // 1000, 8)}kbit"


def _shape(target: LoadedLab, cable: dict, rate: str) -> None:
    for end in (cable["a"], cable["b"]):
        dev = specmod.device_of(target.lab, end["node"], end["receptacle"])
        netns.batch([netns.tbf(dev, rate)], ns=target.ns(end["node"]), tool=netns.TC, check=False)


# ---------------------------------------------------------------------------------------------
# The faults
# ---------------------------------------------------------------------------------------------


def unplug_apply(target: LoadedLab, a: str, b: str) -> dict:
    cable = _cable_between(target.lab, a, b)
    target.lab["cables"].remove(cable)
    target.save_plan()
    netns.unplug(target.lab, cable)
    return {"cable": cable}


def _ports_free(target: LoadedLab, cable: dict) -> None:
    for end in (cable["a"], cable["b"]):
        if end["receptacle"] in _used(target.lab, end["node"]):
            raise UsageError(f"{end['node']} port {end['receptacle']} is taken by another cable",
                             hint="clear the fault that put it there first")


def unplug_clear(target: LoadedLab, data: dict, a: str, b: str) -> None:
    _ports_free(target, data["cable"])
    target.lab["cables"].append(data["cable"])
    target.save_plan()
    netns.plug(target.lab, data["cable"])


def slow_apply(target: LoadedLab, a: str, b: str) -> dict:
    cable = _cable_between(target.lab, a, b)
    if cable.get("kind", "tb5") != "tb5":
        raise UsageError(f"the cable between {a} and {b} is already a {cable['kind']} cable")
    cable["kind"] = "tb4"
    target.save_plan()
    _shape(target, cable, _tb_rate_half(target.lab))
    return {"cable": {"a": cable["a"], "b": cable["b"]}}


def slow_clear(target: LoadedLab, data: dict, a: str, b: str) -> None:
    cable = _find_cable(target.lab, data["cable"])
    cable["kind"] = "tb5"
    target.save_plan()
    _shape(target, cable, target.lab["tb_rate"])


def wrong_port_apply(target: LoadedLab, a: str, b: str) -> dict:
    cable = _cable_between(target.lab, a, b)
    model = target.lab["models"][target.lab["nodes"][a]["model"]]
    bad = [p["receptacle"] for p in model["ports"] if not p["rdma_capable"]]
    if not bad:
        raise UsageError(f"every Thunderbolt port of {a} ({model['slug']}) can do RDMA: there is no wrong port")
    if bad[0] in _used(target.lab, a):
        raise UsageError(f"{a} port {bad[0]} is already cabled")
    end = "a" if cable["a"]["node"] == a else "b"
    before = {"a": dict(cable["a"]), "b": dict(cable["b"])}
    target.lab["cables"].remove(cable)
    target.save_plan()
    netns.unplug(target.lab, cable)
    moved = {**cable, end: {"node": a, "receptacle": bad[0]}}
    target.lab["cables"].append(moved)
    target.save_plan()
    netns.plug(target.lab, moved)
    return {"before": before, "after": {"a": moved["a"], "b": moved["b"]}}


def wrong_port_clear(target: LoadedLab, data: dict, a: str, b: str) -> None:
    moved = _find_cable(target.lab, data["after"])
    end = "a" if data["before"]["a"]["node"] == a else "b"
    old = data["before"][end]
    if old["receptacle"] in _used(target.lab, a):
        raise UsageError(f"{a} port {old['receptacle']} is taken by another cable", hint="clear that fault first")
    target.lab["cables"].remove(moved)
    target.save_plan()
    netns.unplug(target.lab, moved)
    back = {**moved, **data["before"]}
    target.lab["cables"].append(back)
    target.save_plan()
    netns.plug(target.lab, back)


def double_apply(target: LoadedLab, a: str, b: str) -> dict:
    _cable_between(target.lab, a, b)
    ra, rb = _free_rdma_port(target, a), _free_rdma_port(target, b)
    cable = {"a": {"node": a, "receptacle": ra}, "b": {"node": b, "receptacle": rb}, "kind": "tb5", "hub": None}
    target.lab["cables"].append(cable)
    target.save_plan()
    netns.plug(target.lab, cable)
    return {"cable": cable}


def double_clear(target: LoadedLab, data: dict, a: str, b: str) -> None:
    cable = _find_cable(target.lab, data["cable"])
    target.lab["cables"].remove(cable)
    target.save_plan()
    netns.unplug(target.lab, cable)


def hub_apply(target: LoadedLab, a: str, b: str) -> dict:
    cable = _cable_between(target.lab, a, b)
    uid = hashlib.sha256(f"{target.name}/{a}/{b}/dock".encode()).hexdigest()[:16].upper()
    cable["hub"] = {**DOCK, "switch_uid": f"0x{uid}", "sees": a}
    target.save_plan()
    return {"cable": {"a": cable["a"], "b": cable["b"]}}


def hub_clear(target: LoadedLab, data: dict, a: str, b: str) -> None:
    _find_cable(target.lab, data["cable"])["hub"] = None
    target.save_plan()


def unknown_apply(target: LoadedLab, a: str) -> dict:
    r = _free_rdma_port(target, a)
    stranger = f"unknown-mac-{a}"
    model = target.lab["models"][target.lab["nodes"][a]["model"]]
    cable = {"a": {"node": a, "receptacle": r}, "b": {"node": stranger, "receptacle": 2}, "kind": "tb5",
             "hub": None,
             "foreign": {"marketing_name": model["marketing_name"], "model_identifier": model["model_identifier"],
                         "domain_uuid": str(uuid.uuid4()).upper(), "ip_uuid": str(uuid.uuid4()).upper(),
                         "rdma_uuid": str(uuid.uuid4()).upper()}}
    target.lab["cables"].append(cable)
    target.save_plan()
    dev = specmod.device_of(target.lab, a, r)
    # the dangling peer of enX comes up: carrier, as if another Mac were at the far end
    netns.batch([f"link set tbp-{dev} up"], ns=target.ns(a))
    return {"cable": {"a": cable["a"], "b": cable["b"]}, "device": dev}


def unknown_clear(target: LoadedLab, data: dict, a: str) -> None:
    cable = _find_cable(target.lab, data["cable"])
    target.lab["cables"].remove(cable)
    target.save_plan()
    netns.batch([f"link set tbp-{data['device']} down"], ns=target.ns(a), check=False)


def _update_services(target: LoadedLab, node: str, fn: Callable[[dict], None]) -> dict:
    return target.node(node).update("persist", fn)


def bridge_apply(target: LoadedLab, node: str) -> dict:
    prev = {}

    def mutate(p: dict) -> None:
        for s in p.get("services", []):
            if s["port"] == "Thunderbolt Bridge":
                prev["enabled"] = s.get("enabled", False)
                s["enabled"] = True
        if "enabled" not in prev:
            prev["enabled"] = None
            p.setdefault("services", []).insert(1, {"name": "Thunderbolt Bridge", "port": "Thunderbolt Bridge",
                                                    "enabled": True, "config": "dhcp"})

    services = target.node(node).persist.get("services", [])
    if any(s["port"] == "Thunderbolt Bridge" and s.get("enabled") for s in services):
        raise UsageError(f"the Thunderbolt Bridge of {node} is already on")
    _update_services(target, node, mutate)
    target.netapply(node)
    return prev


def bridge_clear(target: LoadedLab, data: dict, node: str) -> None:
    def mutate(p: dict) -> None:
        svcs = p.get("services", [])
        for s in list(svcs):
            if s["port"] == "Thunderbolt Bridge":
                if data.get("enabled") is None:
                    svcs.remove(s)
                else:
                    s["enabled"] = data["enabled"]

    _update_services(target, node, mutate)
    target.netapply(node)


def _first_addressed_port(target: LoadedLab, node: str) -> tuple[str, str, int]:
    import json

    lab = target.lab
    for r in sorted(_used(lab, node)):
        dev = specmod.device_of(lab, node, r)
        out = netns.run(["ip", "-n", target.ns(node), "-j", "-4", "addr", "show", "dev", dev], check=False).stdout
        for link in json.loads(out or "[]"):
            for a in link.get("addr_info", []):
                return dev, a["local"], a["prefixlen"]
    raise UsageError(f"no Thunderbolt port of {node} has an IPv4 address to drift")


def drift_apply(target: LoadedLab, node: str, mode: str = "live") -> dict:
    if mode not in ("live", "saved"):
        raise UsageError(f"bad ip-drift mode {mode!r}", hint="live (ifconfig: lost at reboot) or saved "
                         "(networksetup: kept)")
    dev, ip, prefix = _first_addressed_port(target, node)
    idx = target.lab["nodes"][node]["index"]
    new = str(ipaddress.IPv4Address("10.213.254.0") + (idx % 64) * 4 + 1)
    if mode == "live":
        netns.batch([f"addr del {ip}/{prefix} dev {dev}", f"addr add {new}/30 dev {dev}"], ns=target.ns(node))
        return {"dev": dev, "old": [ip, prefix], "new": [new, 30], "boot_id": target.node(node).boot.get("boot_id")}
    port = next(p["receptacle"] for p in target.lab["models"][target.lab["nodes"][node]["model"]]["ports"]
                if p["device"] == dev)
    old_svc: dict = {}

    def mutate(p: dict) -> None:
        for s in p.get("services", []):
            if s["port"] == f"Thunderbolt {port}" and s.get("ip") == ip:
                old_svc.update(s)
                s["ip"], s["mask"] = new, "255.255.255.252"

    _update_services(target, node, mutate)
    if not old_svc:
        raise UsageError(f"{node} {dev} has no saved manual service to change", hint="use `ip-drift NODE live`")
    target.netapply(node, [dev])
    return {"dev": dev, "service": old_svc}


def drift_clear(target: LoadedLab, data: dict, node: str, mode: str = "live") -> None:
    dev = data["dev"]
    if "service" in data:
        old = data["service"]

        def mutate(p: dict) -> None:
            for s in p.get("services", []):
                if s["name"] == old["name"]:
                    s.clear()
                    s.update(old)

        _update_services(target, node, mutate)
        target.netapply(node, [dev])
        return
    (ip, prefix), (new, nprefix) = data["old"], data["new"]
    netns.batch([f"addr del {new}/{nprefix} dev {dev}"], ns=target.ns(node), check=False)
    netns.batch([f"addr replace {ip}/{prefix} dev {dev}"], ns=target.ns(node), check=False)


def apipa_apply(target: LoadedLab, node: str) -> dict:
    saved: list[dict] = []

    def mutate(p: dict) -> None:
        for s in p.get("services", []):
            if s["port"].startswith("Thunderbolt ") and s["port"] != "Thunderbolt Bridge" \
                    and s.get("config") == "manual":
                saved.append(dict(s))
                s.update(config="dhcp", ip=None, mask=None, router=None)
        p["apipa"] = True

    _update_services(target, node, mutate)
    target.netapply(node)
    return {"services": saved}


def apipa_clear(target: LoadedLab, data: dict, node: str) -> None:
    by_name = {s["name"]: s for s in data["services"]}

    def mutate(p: dict) -> None:
        p.pop("apipa", None)
        for s in p.get("services", []):
            saved = by_name.get(s["name"])
            if saved is not None:
                s.clear()
                s.update(saved)

    _update_services(target, node, mutate)
    target.netapply(node)


def _foreign_plan(target: LoadedLab, node: str) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """What a hand-run cluster script puts on NODE: a 192.168.x.y/30 per cabled Thunderbolt port (x from the
    node, one /30 per port), and a route to each peer's 192.168.x.0/24 through the port cabled to it."""
    lab = target.lab
    mine = 200 + lab["nodes"][node]["index"] % 50
    addresses: dict[str, str] = {}
    routes: list[tuple[str, str]] = []
    for cable in lab["cables"]:
        ends = {cable["a"]["node"]: cable["a"], cable["b"]["node"]: cable["b"]}
        if node not in ends or len(ends) != 2:
            continue
        dev = specmod.device_of(lab, node, ends[node]["receptacle"])
        peer = next(n for n in ends if n != node)
        addresses[dev] = f"192.168.{mine}.{4 * len(addresses) + 1}"
        routes.append((f"192.168.{200 + lab['nodes'][peer]['index'] % 50}.0/24", dev))
    return dict(sorted(addresses.items())), routes


def _run_on(target: LoadedLab, node: str, commands: list[list[str]]) -> None:
    # the admin types the password once (sudo -S reads it), as such a script's user does at the Mac
    inner = " && ".join(" ".join(shlex.quote(w) for w in c) for c in commands)
    script = f"sudo -S -p '' sh -c {shlex.quote(inner)}"
    p = target.ssh(node, script, input=target.admin_password() + "\n")
    if p.returncode != 0:
        raise LabError(f"{node}: {p.stderr.strip() or p.stdout.strip()}", hint=f"the commands were: {script}")


def foreign_apply(target: LoadedLab, node: str) -> dict:
    if not target.on(node):
        raise UsageError(f"{node} is {target.power(node)}: only a running Mac takes ifconfig and route changes")
    addresses, routes = _foreign_plan(target, node)
    commands = [["ifconfig", dev, "inet", ip, "netmask", "255.255.255.252"] for dev, ip in addresses.items()]
    commands += [["route", "-n", "add", "-net", net, "-interface", dev] for net, dev in routes]
    bridge = "bridge0" in target.ssh(node, "ifconfig -l").stdout.split()
    if bridge:
        commands.append(["ifconfig", "bridge0", "down"])
    _run_on(target, node, commands)
    return {"addresses": addresses, "routes": routes, "bridge_down": bridge}


def foreign_clear(target: LoadedLab, data: dict, node: str) -> None:
    """Undo by hand what the script did (its changes are volatile: a reboot drops the fault by itself)."""
    if not target.on(node):
        return
    commands = [["route", "-n", "delete", "-net", net, "-interface", dev] for net, dev in data["routes"]]
    if data.get("bridge_down"):
        commands.append(["ifconfig", "bridge0", "up"])
    if commands:
        _run_on(target, node, commands)
    target.netapply(node)  # the persisted services put the plan's addresses back, as at the next boot


def _persist_set(key: str, value_of: Callable[[LoadedLab, list[str]], object]):
    """A fault that sets persist[key]; clear puts back what was there (or removes it)."""

    def apply(target: LoadedLab, node: str, *rest: str) -> dict:
        prev = {}
        value = value_of(target, [node, *rest])

        def mutate(p: dict) -> None:
            prev["had"] = key in p
            prev["value"] = p.get(key)
            p[key] = value

        target.node(node).update("persist", mutate)
        return prev

    def clear(target: LoadedLab, data: dict, node: str, *rest: str) -> None:
        def mutate(p: dict) -> None:
            if data.get("had"):
                p[key] = data.get("value")
            else:
                p.pop(key, None)

        target.node(node).update("persist", mutate)

    return apply, clear


def _other_build(target: LoadedLab, args: list[str]) -> dict:
    cur = target.node(args[0]).persist.get("os", {})
    return dict(OTHER_BUILD_2 if cur.get("build") == OTHER_BUILD["build"] else OTHER_BUILD)


# A macOS update's install, download to restart into the new build: 20 min, a guess (docs/lab.md; Apple gives no
# figure, and it depends on the download), scaled by the lab's latency setting; an offer may name its own.
UPDATE_SECONDS = 1200.0


def _offer(target: LoadedLab, args: list[str]) -> dict:
    import re

    from .macos import latency

    _node, build, version, *secs = args
    if not re.fullmatch(r"\d{2}[A-Z]\d{1,5}[a-z]?", build):
        raise UsageError(f"bad build {build!r}", hint="a macOS build as sw_vers -buildVersion prints it, e.g. 25C56")
    if not re.fullmatch(r"\d{2}(\.\d{1,2}){1,2}", version):
        raise UsageError(f"bad version {version!r}", hint="a macOS version, e.g. 26.2 or 26.5.1")
    seconds = _secs(secs[0], hi=7200) if secs else UPDATE_SECONDS * latency.scale_of(target.lab)
    return {"build": build, "version": version, "seconds": seconds}


def _secs(text: str, *, signed: bool = False, hi: float = 3600) -> float:
    try:
        v = float(text)
    except ValueError:
        raise UsageError(f"bad number of seconds {text!r}") from None
    if not math.isfinite(v) or (v < 0 and not signed) or abs(v) > (hi if not signed else 10 * 365 * 86400):
        raise UsageError(f"seconds out of range: {text}")
    return v


rdma_off_apply, rdma_off_clear = _persist_set("rdma", lambda target, a: False)
slow_boot_apply, slow_boot_clear = _persist_set("lab_boot_seconds", lambda target, a: _secs(a[1], hi=600))
# A Mac that stalls in shutdown for minutes (issue 28: "reboots are reported to stall in shutdown for minutes";
# a process holding the RDMA device in uninterruptible wait): the lab keeps the node as it was (SSH answering,
# the old boot time) for SECS before it goes down: GUESS for what keeps answering meanwhile (docs/lab.md).
slow_shutdown_apply, slow_shutdown_clear = _persist_set("lab_shutdown_seconds",
                                                        lambda target, a: _secs(a[1], hi=3600))


def shutdown_seconds(lab: dict, node: str) -> float:
    """How long a software restart or shutdown of NODE stalls before the node goes down (slow-shutdown)."""
    persist = userland.read_json(state.node_dir(lab["name"], node) / "persist.json", {})
    return float(persist.get("lab_shutdown_seconds") or 0)


def _overlay_fault(key: str, value_of: Callable[[list[str]], object]):
    """A fault that sets one key of the exo stand-in's overlay (read every tick); clear removes it."""

    def apply(target: LoadedLab, node: str, *rest: str) -> dict:
        target.set_overlay(node, key, value_of([node, *rest]))
        return {}

    def clear(target: LoadedLab, data: dict, node: str, *rest: str) -> None:
        target.set_overlay(node, key, None)

    return apply, clear


MAX_FAIL_STARTS = 20


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_FAIL_STARTS:
        raise UsageError(f"rdma-leak N: expected a whole number of failed starts from 1 to {MAX_FAIL_STARTS}, "
                         f"got {text!r}")
    return n


def _address(text: str) -> str:
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise UsageError(f"exo-coordinator ADDRESS: expected an IPv4 address, got {text!r}") from None


# lab/exo/runner.py and lab/exo/discovery.py say what the stand-in does with each (and cite it)
ignore_term_apply, ignore_term_clear = _overlay_fault("runnerIgnoresTerm", lambda a: True)
leak_apply, leak_clear = _overlay_fault("failStarts", lambda a: _count(a[1]))
split_apply, split_clear = _overlay_fault("discoverySplit", lambda a: True)
coordinator_apply, coordinator_clear = _overlay_fault("coordinatorAddress", lambda a: _address(a[1]))
# the overlay key each fault cleared at the node's boot sets
OVERLAY_OF = {"qp-exhausted": "runnerFailed", "exo-runner-failed": "runnerFailed",
              "runner-ignores-term": "runnerIgnoresTerm", "rdma-leak": "failStarts", "exo-split": "discoverySplit",
              "exo-coordinator": "coordinatorAddress"}
os_apply, os_clear = _persist_set("os", _other_build)
fv_apply_base, fv_clear_base = _persist_set("filevault", lambda target, a: True)
disk_apply, disk_clear = _persist_set("disk_full", lambda target, a: True)
skew_apply, skew_clear = _persist_set("clock_skew", lambda target, a: _secs(a[1], signed=True))
offer_apply, offer_clear = _persist_set("offered_update", _offer)
update_fails_apply, update_fails_clear = _persist_set("lab_update_fails", lambda target, a: True)
authrestart_off_apply, authrestart_off_clear = _persist_set("lab_no_authrestart", lambda target, a: True)
update_rdma_apply, update_rdma_clear = _persist_set("lab_update_rdma_off", lambda target, a: True)


def rdma_off_check(target: LoadedLab, node: str) -> None:
    if not target.node(node).persist.get("rdma"):
        raise UsageError(f"RDMA is already off on {node}")


def fv_check(target: LoadedLab, node: str) -> None:
    if target.node(node).persist.get("filevault"):
        raise UsageError(f"FileVault is already on on {node}")


def fv_clear(target: LoadedLab, data: dict, node: str) -> None:
    """The operator types the password at the unlock screen and turns FileVault off."""
    fv_clear_base(target, data, node)
    if target.power(node) == "locked":
        state.request_power(target.name, node, "on")


def sleep_apply(target: LoadedLab, node: str) -> dict:
    from .macos.system import PMSET_FRESH

    prev = {}

    def mutate(p: dict) -> None:
        cur = p.get("pmset") or dict(PMSET_FRESH)
        prev["sleep"] = cur.get("sleep")
        cur["sleep"] = "10"
        p["pmset"] = cur

    target.node(node).update("persist", mutate)
    return prev


def sleep_clear(target: LoadedLab, data: dict, node: str) -> None:
    def mutate(p: dict) -> None:
        cur = p.get("pmset") or {}
        if data.get("sleep") is None:
            cur.pop("sleep", None)
        else:
            cur["sleep"] = data["sleep"]
        p["pmset"] = cur

    target.node(node).update("persist", mutate)


def sleep_check(target: LoadedLab, node: str) -> None:
    if (target.node(node).persist.get("pmset") or {}).get("sleep") not in (None, "0"):
        raise UsageError(f"{node} already sleeps (pmset sleep is not 0)")


def _boot_flags(target: LoadedLab, node: str, **flags) -> dict:
    prev = {}

    def mutate(b: dict) -> None:
        for k, v in flags.items():
            prev[k] = b.get(k)
            if v is None:
                b.pop(k, None)
            else:
                b[k] = v

    target.node(node).update("boot", mutate)
    return prev


def wedge_apply(target: LoadedLab, node: str) -> dict:
    _boot_flags(target, node, rdma_hang=True, rdma_wedged=True)
    mesh = target.lab["nodes"][node]["mesh"]
    return {"mesh_nodes": next(m["nodes"] for m in target.lab["meshes"] if m["name"] == mesh), "boots": {},
            "since": time.time()}


def wedge_clear(target: LoadedLab, data: dict, node: str) -> None:
    _boot_flags(target, node, rdma_hang=None, rdma_wedged=None)


def runner_check(target: LoadedLab, node: str, *rest: str) -> None:
    if (userland.read_json(target.exo_overlay(node), {}) or {}).get("runnerFailed"):
        raise UsageError(f"exo's runner on {node} has already failed (qp-exhausted or exo-runner-failed)")


def qp_apply(target: LoadedLab, node: str) -> dict:
    target.set_overlay(node, "runnerFailed", QP_EBUSY)
    return {}


def qp_clear(target: LoadedLab, data: dict, node: str) -> None:
    target.set_overlay(node, "runnerFailed", None)


def hang_apply(target: LoadedLab, node: str) -> dict:
    if not target.on(node):
        raise UsageError(f"{node} is {target.power(node)}: only a running Mac can hang")
    for pid in netns.netns_pids(target.ns(node)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    devs = ["en0", *specmod.tb_devices(target.lab, node)]
    netns.batch([f"link set {d} down" for d in devs], ns=target.ns(node), check=False)
    _boot_flags(target, node, hung=True)
    return {}


def hang_clear(target: LoadedLab, data: dict, node: str) -> None:
    """Only a power cycle brings a hung Mac back: --clear presses the button (as `lab power NODE cycle`)."""
    state.power(target.name, node, "cycle")


def wired_apply(target: LoadedLab, node: str) -> dict:
    prev = _boot_flags(target, node, wired_limit_mb=0)
    return {"value": prev.get("wired_limit_mb") or 0, "boot_id": target.node(node).boot.get("boot_id")}


def wired_clear(target: LoadedLab, data: dict, node: str) -> None:
    if target.node(node).boot.get("boot_id") == data.get("boot_id"):
        _boot_flags(target, node, wired_limit_mb=data.get("value", 0))


def _exo_check(target: LoadedLab, node: str) -> None:
    if not target.lab.get("exo"):
        raise UsageError(f"lab {target.name!r} has no exo (it was brought up with --no-exo or --fresh)")


def exo_down_apply(target: LoadedLab, node: str) -> dict:
    if not target.on(node):
        raise UsageError(f"{node} is {target.power(node)}")
    # exo is the LaunchDaemon bootstrap installs; its scoped sudoers drop-in allows these two without a password
    p = target.ssh(node, f"sudo -n launchctl bootout system/{EXO_LABEL}")
    if p.returncode != 0:
        raise LabError(f"{node}: launchctl bootout failed: {p.stderr.strip() or p.stdout.strip()}")
    return {}


def exo_down_clear(target: LoadedLab, data: dict, node: str) -> None:
    if not target.on(node):
        return
    if target.ssh(node, f"launchctl print system/{EXO_LABEL}").returncode == 0:
        return  # loaded again by someone else (`doctor --fix`): nothing left to undo
    p = target.ssh(node, f"sudo -n launchctl bootstrap system /Library/LaunchDaemons/{EXO_LABEL}.plist")
    if p.returncode != 0:
        raise LabError(f"{node}: launchctl bootstrap failed: {p.stderr.strip() or p.stdout.strip()}")


def _exo_root(target: LoadedLab, node: str) -> str:
    return os.path.join(target.dir, "nodes", node, "fs", "exo")  # the node's /opt/exo


def _exo_restart(target: LoadedLab, node: str) -> None:
    p = target.ssh(node, f"sudo -n launchctl kickstart -k system/{EXO_LABEL}")
    if p.returncode != 0:
        raise LabError(f"{node}: launchctl kickstart failed: {p.stderr.strip() or p.stdout.strip()}")


def _exo_point_current(root: str, target_rel: str) -> None:
    tmp = os.path.join(root, ".current.lab-tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    os.symlink(target_rel, tmp)
    os.lchown(tmp, *_admin_ids_of(root))
    os.replace(tmp, os.path.join(root, "current"))


def _admin_ids_of(root: str) -> tuple[int, int]:
    st = os.stat(root)
    return st.st_uid, st.st_gid


def exo_version_apply(target: LoadedLab, node: str, version: str) -> dict:
    """NODE runs another exo release: a build of VERSION lands next to the current one, `current` points at it
    and exo restarts on it (what a Mac left behind by a rollout looks like). Its version is what doctor reads on
    disk; peers, gossiping versions, drop it (exo: nodes of different versions do not connect)."""
    from .exo import build as exo_build

    if not version or any(c.isspace() for c in version) or len(version) > 40 or "/" in version:
        raise UsageError(f"bad exo version {version!r}")
    root = _exo_root(target, node)
    before = os.readlink(os.path.join(root, "current"))
    name = f"{version}-{hashlib.blake2b(b'lab fault ' + version.encode(), digest_size=6).hexdigest()}"  # as rollout
    rel = os.path.join(root, "releases", name)
    if not os.path.isdir(rel):
        exo_build.write_build(rel, version)
        uid, gid = _admin_ids_of(root)
        for dirpath, dirnames, filenames in os.walk(rel):
            for n in [dirpath, *(os.path.join(dirpath, x) for x in dirnames + filenames)]:
                os.lchown(n, uid, gid)
    _exo_point_current(root, f"releases/{name}")
    _exo_restart(target, node)
    return {"current": before, "release": name}


def exo_version_clear(target: LoadedLab, data: dict, node: str, version: str) -> None:
    import shutil

    root = _exo_root(target, node)
    if data.get("current"):
        _exo_point_current(root, data["current"])
    if target.on(node):
        _exo_restart(target, node)
    if data.get("release"):
        shutil.rmtree(os.path.join(root, "releases", data["release"]), ignore_errors=True)


MAX_RUNNER_TEXT = 4000


def runner_apply(target: LoadedLab, node: str, message: str | None = None) -> dict:
    """exo's runner fails; with TEXT, its errorMessage is TEXT as given (node-controlled text: markup, ESC,
    bidi characters and all), else the segfault exo reports."""
    if message is not None and (not message or len(message) > MAX_RUNNER_TEXT or "\x00" in message):
        raise UsageError(f"exo-runner-failed TEXT: expected 1 to {MAX_RUNNER_TEXT} characters, no NUL")
    target.set_overlay(node, "runnerFailed", message if message is not None else True)
    return {}


def _exo_pids(target: LoadedLab, node: str) -> list[int]:
    """The exo stand-in's processes on the node: `python3 .../bin/exo ...` (macfleet/lab/exo/build.py)."""
    pids = []
    for pid in netns.netns_pids(target.ns(node)):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"/bin/exo") for a in argv[1:3]):
            pids.append(pid)
    return pids


def exo_hang_apply(target: LoadedLab, node: str) -> dict:
    """exo stops answering without dying (SIGSTOP): its port still accepts connections (the kernel's
    backlog), no answer ever comes, launchd sees it running. A guess at a wedged exo (docs/lab.md): what a
    health checker must not take for healthy."""
    if not target.on(node):
        raise UsageError(f"{node} is {target.power(node)}: only a running Mac's exo can hang")
    pids = _exo_pids(target, node)
    if not pids:
        raise UsageError(f"exo is not running on {node}", hint=f"start it (macfleet lab fault exo-down {node} --clear)")
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    return {"pids": pids}


def exo_hang_clear(target: LoadedLab, data: dict, node: str) -> None:
    for pid in data.get("pids", []):
        if pid in _exo_pids(target, node):  # the same process still (a restart of exo already ended the hang)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def runner_clear(target: LoadedLab, data: dict, node: str, message: str | None = None) -> None:
    target.set_overlay(node, "runnerFailed", None)


# exo's app's network LaunchDaemon (exo app/EXO/EXO/Services/NetworkSetupHelper.swift at b5375f8): label, plist,
# script path, RunAtLoad and StartInterval 1786; its installer runs `launchctl bootstrap system PLIST`, `launchctl
# enable system/LABEL`, `launchctl kickstart -k system/LABEL`.
NETSETUP_LABEL = "io.exo.networksetup"
NETSETUP_PLIST = f"/Library/LaunchDaemons/{NETSETUP_LABEL}.plist"
NETSETUP_SCRIPT = "/Library/Application Support/EXO/disable_bridge.sh"
NETSETUP_INTERVAL_S = 1786
# What exo's script does, as far as the lab's stand-ins go. exo's: `sleep 20`; remove bridge0's members and destroy
# it; delete it from preferences.plist; `networksetup -createlocation exo` and `-switchtolocation exo`; in that
# location, an "EXO Thunderbolt N" service on DHCP for each "Thunderbolt N" port; "Thunderbolt Bridge" off. The
# lab has no network locations: the Thunderbolt services of its one set go to DHCP instead (what the switch does
# to the ports), then the bridge goes off. Run by the lab's launchd (as root) with the node's python3.
_NETSETUP_PROGRAM = r"""import re, subprocess, time
# macfleet lab: exo's io.exo.networksetup script, as far as the lab goes (macfleet/lab/faults.py)
time.sleep(20)  # exo's script: "Wait for macOS to finish network setup after boot"
order = subprocess.run(["networksetup", "-listnetworkserviceorder"], capture_output=True, text=True).stdout
name = None
for line in order.splitlines():
    m = re.match(r"^\([0-9*]+\) (.+)$", line)
    if m:
        name = m.group(1)
    elif name and re.search(r"Hardware Port: Thunderbolt [0-9]+,", line):
        subprocess.run(["networksetup", "-setdhcp", name])
subprocess.run(["networksetup", "-setnetworkserviceenabled", "Thunderbolt Bridge", "off"])
"""


def _netsetup_files(target: LoadedLab, node: str) -> dict[str, str]:
    """Where the daemon's files go in the node's filesystem."""
    base = os.path.join(target.dir, "nodes", node, "fs", "Library")
    return {"plist": os.path.join(base, "LaunchDaemons", f"{NETSETUP_LABEL}.plist"),
            "script": os.path.join(base, "Application Support", "EXO", "disable_bridge.sh")}


def netsetup_apply(target: LoadedLab, node: str) -> dict:
    import plistlib

    files = _netsetup_files(target, node)
    services = [dict(s) for s in target.node(node).persist.get("services", [])]
    os.makedirs(os.path.dirname(files["script"]), exist_ok=True)
    with open(files["script"], "w") as f:
        f.write(_NETSETUP_PROGRAM)
    job = {"Label": NETSETUP_LABEL, "ProgramArguments": ["/usr/bin/python3", NETSETUP_SCRIPT],
           "StartInterval": NETSETUP_INTERVAL_S, "RunAtLoad": True}  # (exo's logs to /var/log: the host's here)
    with open(files["plist"], "wb") as f:
        plistlib.dump(job, f)
    os.chmod(files["plist"], 0o644)
    if target.on(node):  # what exo's installer runs (as root, after the admin's password)
        _run_on(target, node, [["launchctl", "bootstrap", "system", NETSETUP_PLIST],
                               ["launchctl", "enable", f"system/{NETSETUP_LABEL}"]])
    # else: the next boot loads it (RunAtLoad), as a Mac's does
    return {"services": services}


def netsetup_clear(target: LoadedLab, data: dict, node: str) -> None:
    """Uninstall it as exo's uninstaller does (bootout, files removed), enable the label again, and put the
    Thunderbolt services back as they were before the fault."""
    if target.on(node):
        target.ssh(node, f"sudo -S -p '' launchctl bootout system/{NETSETUP_LABEL}", input=target.admin_password()
                   + "\n")
    for path in _netsetup_files(target, node).values():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def mutate(p: dict) -> None:
        (p.get("launchd_disabled") or {}).pop(NETSETUP_LABEL, None)
        if data.get("services"):
            p["services"] = data["services"]

    _update_services(target, node, mutate)
    target.netapply(node)


# ---------------------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    name: str
    params: tuple[str, ...]  # "A"/"B"/"NODE" are nodes; "[X]" is optional
    group: str
    description: str
    apply: Callable
    clear: Callable
    reboot: str = "kept"  # kept | cleared | mesh (rdma-wedge)
    pair: bool = False  # A B order does not matter for --clear
    check: Callable | None = None  # extra precondition, run before apply
    exo: bool = False

    @property
    def usage(self) -> str:
        return " ".join([self.name, *self.params])

    def nodes_of(self, args: list[str]) -> list[str]:
        return [a for p, a in zip(self.params, args, strict=False) if p in ("A", "B", "NODE")]


FAULTS: dict[str, Fault] = {f.name: f for f in (
    Fault("unplug", ("A", "B"), "cabling", "pull the A-B cable (--clear plugs it back, addresses re-applied)",
          unplug_apply, unplug_clear, pair=True),
    Fault("slow-cable", ("A", "B"), "cabling", "the A-B cable is a TB4 one: trains at 40 Gb/s, no RDMA",
          slow_apply, slow_clear, pair=True),
    Fault("wrong-port", ("A", "B"), "cabling", "the A end moves to the port that cannot do RDMA "
          "(Mac Studio: Thunderbolt 1, en2, next to Ethernet)", wrong_port_apply, wrong_port_clear),
    Fault("double-cable", ("A", "B"), "cabling", "a second cable between A and B (free RDMA ports)",
          double_apply, double_clear, pair=True),
    Fault("via-hub", ("A", "B"), "cabling", "the A-B cable runs through a dock: only A sees B (nested), B sees "
          "the dock", hub_apply, hub_clear),
    Fault("unknown-mac", ("A",), "cabling", "a Mac not in the inventory is cabled to a free port of A",
          unknown_apply, unknown_clear),
    Fault("bridge-on", ("NODE",), "network", "Thunderbolt Bridge back on: ports are bridge0 members, IPv4 only "
          "on bridge0 (169.254), no IPv4-mapped GID on the RDMA ports", bridge_apply, bridge_clear),
    Fault("ip-drift", ("NODE", "[live|saved]"), "network", "the first addressed Thunderbolt port gets another "
          "address: live = ifconfig (lost at reboot), saved = networksetup (kept)", drift_apply, drift_clear,
          reboot="live"),
    Fault("foreign-addresses", ("NODE",), "network", "what a hand-run cluster script does: a 192.168.x.y/30 "
          "per cabled Thunderbolt port by ifconfig, a route to each peer by route(8), bridge0 down; not "
          "persisted (a reboot brings the plan's addresses back)", foreign_apply, foreign_clear, reboot="cleared"),
    Fault("apipa", ("NODE",), "network", "only 169.254 self-assigned addresses on the Thunderbolt ports "
          "(services on DHCP, no server)", apipa_apply, apipa_clear),
    Fault("rdma-off", ("NODE",), "rdma", "RDMA disabled (rdma_ctl status: disabled, no rdma_enX)",
          rdma_off_apply, rdma_off_clear, check=rdma_off_check),
    Fault("rdma-wedge", ("NODE",), "rdma", "RDMA stack wedged: ibv_devinfo hangs, ports to it stay down, exo's "
          "runner fails with RTR errno 22 / no protection domain; clears only when every node of the mesh "
          f"rebooted within {WEDGE_WINDOW_S / 60:g} min", wedge_apply, wedge_clear, reboot="mesh"),
    Fault("qp-exhausted", ("NODE",), "rdma", "queue pairs exhausted: exo's runner fails with errno 16 (EBUSY); "
          "a reboot of the node clears it", qp_apply, qp_clear, reboot="cleared", exo=True, check=runner_check),
    Fault("hang", ("NODE",), "host", "the Mac hangs: no SSH, no ping, ports dark; only a power cycle helps "
          "(--clear does `lab power NODE cycle`)", hang_apply, hang_clear, reboot="cleared"),
    Fault("slow-boot", ("NODE", "SECS"), "host", "every boot of NODE takes SECS seconds",
          slow_boot_apply, slow_boot_clear),
    Fault("slow-shutdown", ("NODE", "SECS"), "host", "every software restart or shutdown of NODE stalls SECS "
          "seconds before it goes down (it keeps answering meanwhile)", slow_shutdown_apply, slow_shutdown_clear),
    Fault("os-mismatch", ("NODE",), "host", "NODE runs another macOS build (sw_vers, sysctl, exo identity)",
          os_apply, os_clear),
    Fault("update-offered", ("NODE", "BUILD", "VERSION", "[SECS]"), "host", "Apple offers NODE the macOS update "
          "to BUILD (softwareupdate --list); installing it takes SECS (default 1200 x the lab's latency), half "
          "before the restart, half restarting", offer_apply, offer_clear),
    Fault("update-fails", ("NODE",), "host", "NODE's next macOS update install fails half-way (exit 1, nothing "
          "installed)", update_fails_apply, update_fails_clear),
    Fault("update-rdma-off", ("NODE",), "host", "NODE's next macOS update comes back with RDMA disabled",
          update_rdma_apply, update_rdma_clear),
    Fault("authrestart-unsupported", ("NODE",), "host", "NODE's `fdesetup supportsauthrestart` says false and "
          "`fdesetup authrestart` exits 1: a reboot of a FileVault node stops at its unlock screen",
          authrestart_off_apply, authrestart_off_clear),
    Fault("filevault-on", ("NODE",), "host", "FileVault on: after a reboot the node waits at the unlock screen "
          "(SSH with a password only, macOS 26) unless restarted with `fdesetup authrestart`; --clear unlocks it "
          "and turns it off",
          fv_apply_base, fv_clear, check=fv_check),
    Fault("disk-full", ("NODE",), "host", "the Data volume is full (df)", disk_apply, disk_clear),
    Fault("sleep-on", ("NODE",), "host", "pmset sleep 10", sleep_apply, sleep_clear, check=sleep_check),
    Fault("wired-limit-lost", ("NODE",), "host", "iogpu.wired_limit_mb back to 0 (as after a reboot)",
          wired_apply, wired_clear, reboot="cleared"),
    Fault("clock-skew", ("NODE", "SECS"), "host", "NODE's clock is off by SECS seconds (date)",
          skew_apply, skew_clear),
    Fault("exo-down", ("NODE",), "exo", "exo's LaunchAgent is booted out (a reboot starts it again)",
          exo_down_apply, exo_down_clear, reboot="cleared", exo=True),
    Fault("exo-version", ("NODE", "VERSION"), "exo", "NODE runs another exo release (VERSION): peers drop it",
          exo_version_apply, exo_version_clear, exo=True),
    Fault("exo-networksetup", ("NODE",), "exo", "exo's app's LaunchDaemon io.exo.networksetup is installed and "
          "loaded: at every load (boot, install) it puts the Thunderbolt services on DHCP and the bridge off, "
          "undoing the IP plan; kept across reboots (RunAtLoad) until disabled", netsetup_apply, netsetup_clear),
    Fault("exo-runner-failed", ("NODE", "[TEXT]"), "exo", "exo's runner crashed (RunnerFailed: Terminated "
          "(signal=11 (Segmentation fault: 11)), or TEXT as given) in /state and the log; a reboot clears it",
          runner_apply, runner_clear, reboot="cleared", exo=True, check=runner_check),
    Fault("runner-ignores-term", ("NODE",), "exo", "exo's runner on NODE ignores SIGTERM (started so at exo's "
          "next start): exo kills it after its own retries; a reboot clears it", ignore_term_apply, ignore_term_clear,
          reboot="cleared", exo=True),
    Fault("rdma-leak", ("NODE", "N"), "rdma", "exo's next N runner starts on NODE fail, one every 5 s, each "
          "leaving a protection domain and a queue pair held until NODE reboots; at 10 every start fails with "
          "errno 16 (EBUSY)", leak_apply, leak_clear, reboot="cleared", exo=True),
    Fault("exo-split", ("NODE",), "exo", "NODE's exo hears no peer and no peer hears it: it elects itself master "
          "(exo's cluster split in two)", split_apply, split_clear, reboot="cleared", exo=True),
    Fault("exo-coordinator", ("NODE", "ADDRESS"), "exo", "NODE's exo tells the other nodes to reach rank 0 of its "
          "instance at ADDRESS (master and worker disagree on rank 0's address)", coordinator_apply,
          coordinator_clear, reboot="cleared", exo=True),
    Fault("exo-hang", ("NODE",), "exo", "exo stops answering without dying (SIGSTOP): connections to its API hang; "
          "--clear or a restart of exo or a reboot ends it", exo_hang_apply, exo_hang_clear, reboot="cleared",
          exo=True),
)}


def describe() -> list[tuple[str, str]]:
    return [(f.usage, f.description) for f in FAULTS.values()]


def _validate(target: LoadedLab, fault: Fault, args: list[str], clear: bool) -> None:
    required = [p for p in fault.params if not p.startswith("[") and (not clear or p in ("A", "B", "NODE"))]
    if not len(required) <= len(args) <= len(fault.params):
        raise UsageError(f"{fault.name} takes {' '.join(fault.params)}; got {len(args)} argument(s)",
                         hint=f"usage: macfleet lab fault {fault.usage} [--clear]")
    nodes = fault.nodes_of(args)
    for n in nodes:
        if n not in target.lab["nodes"]:
            raise UsageError(f"no node {n!r} in lab {target.name!r}", hint="nodes: " + ", ".join(target.lab["nodes"]))
    if len(nodes) == 2:
        a, b = nodes
        if a == b:
            raise UsageError(f"{fault.name} needs two different nodes")
        if target.lab["nodes"][a]["mesh"] != target.lab["nodes"][b]["mesh"]:
            raise UsageError(f"{a} and {b} are not in the same mesh")
    if fault.exo:
        _exo_check(target, nodes[0])


def _matches(fault: Fault, rec: dict, args: list[str]) -> bool:
    if rec["kind"] != fault.name:
        return False
    if fault.pair:
        return sorted(rec["args"][:2]) == sorted(args[:2])
    nodes = fault.nodes_of(args)
    return rec["nodes"] == nodes if fault.params[-1] in ("SECS", "VERSION", "[live|saved]", "[TEXT]", "[SECS]", "N",
                                                         "ADDRESS") \
        else rec["args"] == args


def _touches(rec: dict, nodes: list[str]) -> bool:
    return set(rec["nodes"]) == set(nodes)


def fault(name: str, kind: str, args: list[str], *, clear: bool = False) -> dict:
    """Turn a fault on (or off with clear=True). Returns the record. Nothing changes on bad input."""
    state.require_root_linux()
    f = FAULTS.get(kind)
    if f is None:
        raise UsageError(f"unknown fault {kind!r}", hint="`macfleet lab faults` lists them: " + ", ".join(FAULTS))
    target = LoadedLab(name)
    _validate(target, f, args, clear)
    with _locked(target.dir):
        target.reload()
        recs = records(target.dir)
        hit = [r for r in recs if _matches(f, r, args)]
        if clear:
            if not hit:
                raise UsageError(f"fault {' '.join([kind, *args])} is not active in lab {name!r}",
                                 hint="`macfleet lab status --json` shows the active faults")
            rec = hit[0]
            f.clear(target, rec["data"], *rec["args"])
            recs = [r for r in records(target.dir) if r is not rec and r != rec]
            _save_records(target.dir, recs)
            return rec
        if hit:
            raise UsageError(f"fault {' '.join([kind, *hit[0]['args']])} is already active",
                             hint=f"clear it first: macfleet lab fault {kind} {' '.join(hit[0]['args'])} --clear")
        nodes = f.nodes_of(args)
        if f.group == "cabling" and len(nodes) == 2:
            busy = [r for r in recs if FAULTS[r["kind"]].group == "cabling" and _touches(r, nodes)]
            if busy:
                raise UsageError(f"the {nodes[0]}-{nodes[1]} cable already has a fault: "
                                 f"{busy[0]['kind']}", hint="clear it first")
        if f.check:
            f.check(target, *args)
        data = f.apply(target, *args)
        rec = {"kind": kind, "args": list(args), "nodes": nodes, "data": data, "at": time.time()}
        recs.append(rec)
        _save_records(target.dir, recs)
        return rec


# ---------------------------------------------------------------------------------------------
# Boot hooks (called by control.boot_node and the supervisor)
# ---------------------------------------------------------------------------------------------


def boot_seconds(lab: dict, node: str, default: float) -> float:
    persist = userland.read_json(state.node_dir(lab["name"], node) / "persist.json", {})
    v = persist.get("lab_boot_seconds")
    staged = persist.get("staged_update") or {}  # a macOS update installs its second half while restarting
    return (default if v is None else float(v)) + float(staged.get("seconds", 0))


def _apply_staged_update(lab: dict, node: str) -> None:
    """The restart after `softwareupdate --install` (lab/macos/devtools.py) comes up on the new build; with the
    update-rdma-off fault, with RDMA disabled."""
    node_obj = userland.Node(userland.Lab(state.lab_dir(lab["name"])), node)

    def mutate(p: dict) -> None:
        staged = p.pop("staged_update", None)
        if staged:
            p["os"] = {"version": staged["version"], "build": staged["build"]}
            if staged.get("rdma_off"):
                p["rdma"] = False

    if node_obj.persist.get("staged_update"):
        node_obj.update("persist", mutate)


def on_boot(lab: dict, node: str) -> None:
    """A node has just booted (boot.json is fresh): drop the faults a reboot clears, re-apply the ones that
    survive it in boot.json (rdma-wedge), and clear rdma-wedge once its whole mesh rebooted in one window; a
    staged macOS update is applied."""
    _apply_staged_update(lab, node)
    d = state.lab_dir(lab["name"])
    if not os.path.exists(os.path.join(d, "faults.json")):
        return
    node_obj = userland.Node(userland.Lab(d), node)
    now = time.time()
    with _locked(d):
        keep = []
        for rec in records(d):
            f = FAULTS.get(rec["kind"])
            if f is None:
                continue
            if f.reboot == "mesh":
                if node in rec["data"]["mesh_nodes"]:
                    boots = {n: t for n, t in rec["data"]["boots"].items() if now - t <= WEDGE_WINDOW_S}
                    boots[node] = now
                    rec["data"]["boots"] = boots
                    if set(rec["data"]["mesh_nodes"]) <= set(boots):
                        # every node of the mesh rebooted within the window: the wedge is gone
                        wedged = userland.Node(userland.Lab(d), rec["nodes"][0])
                        wedged.update("boot", lambda b: [b.pop(k, None) for k in ("rdma_hang", "rdma_wedged")])
                        continue
                if node == rec["nodes"][0]:
                    node_obj.update("boot", lambda b: b.update(rdma_hang=True, rdma_wedged=True))
            elif node in rec["nodes"] and (f.reboot == "cleared" or (f.reboot == "live" and "service" not in
                                                                     rec["data"])):
                if f.name in OVERLAY_OF:
                    _clear_overlay(d, lab, node, OVERLAY_OF[f.name])
                continue
            keep.append(rec)
        _save_records(d, keep)


def _clear_overlay(d, lab: dict, node: str, key: str) -> None:
    path = os.path.join(d, "nodes", node, "fs", "Users", lab["user"], ".exo", "lab_faults.json")
    data = userland.read_json(path, {}) or {}
    if key in data:
        data.pop(key)
        if data:
            userland.write_json(path, data)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def locked_at_boot(lab: dict, node: str) -> bool:
    """FileVault on and this boot was not an `fdesetup authrestart`: the Mac waits at the unlock screen."""
    nd = state.node_dir(lab["name"], node)
    if not userland.read_json(nd / "persist.json", {}).get("filevault"):
        return False
    return not userland.read_json(nd / "boot.json", {}).get("authrestart")
