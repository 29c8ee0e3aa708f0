"""The lab plan as data: nodes, meshes, cables and addresses (written to `<state>/lab.json`).

A cable is two ends, each (node, receptacle), plus its kind ("tb5" / "tb4") and an optional hub; faults are
edits of this list (plus the matching veth change), so the stand-ins, which compute everything from it,
follow. Nothing here touches the system.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import random
import re
import uuid

from macfleet.constants import IP_POOL
from macfleet.errors import UsageError
from macfleet.inventory.model import MAC_MODELS, MacModelSpec

from .state import check_name

RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)$")
SHORT = {"mac-studio-m3-ultra": "studio", "mac-studio-m4-max": "studio", "mac-mini-m4-pro": "mini",
         "mac-mini-m4": "mini"}
MODEL_NUMBERS = {"mac-studio-m3-ultra": "MU973LL/A", "mac-studio-m4-max": "MU963LL/A", "mac-mini-m4-pro": "MCX44LL/A",
                 "mac-mini-m4": "MU9D3LL/A"}
ADMIN_USER = "macadmin"
TB_POOL = ipaddress.IPv4Network(IP_POOL)  # same pool and per-mesh stride as inventory IpPlanSettings
SUBNETS_PER_MESH = 32
DEFAULT_TB_RATE = "1gbit"  # Thunderbolt 5 is 80 Gb/s, 10 GbE management: keep that 8:1 ratio, scaled down
DEFAULT_MGMT_RATE = "125mbit"


def rate_bits(rate: str) -> int:
    m = RATE_RE.match(rate.strip().lower())
    if not m:
        raise UsageError(f"bad rate {rate!r}", hint="use tc units, e.g. 1gbit, 500mbit, 100kbit")
    mult = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}[m.group(2)]
    bits = int(float(m.group(1)) * mult)
    if bits < 8000:
        raise UsageError(f"rate {rate!r} is too small", hint="at least 8kbit")
    return bits


def parse_pods(pods: str) -> tuple[int, int]:
    m = re.match(r"^(\d+)x(\d+)$", pods.strip())
    if not m:
        raise UsageError(f"bad --pods {pods!r}", hint="PODSxNODES, e.g. 8x4")
    return int(m.group(1)), int(m.group(2))


def model_dict(m: MacModelSpec) -> dict:
    return {
        "slug": m.slug,
        "model_identifier": m.model_identifier,
        "marketing_name": m.marketing_name,
        "chip": m.chip,
        "memory_bytes": m.memory_bytes,
        "ports": [
            {"receptacle": p.receptacle, "device": p.device, "max_speed_gbps": p.max_speed_gbps,
             "rdma_capable": p.rdma_capable}
            for p in m.thunderbolt_ports
        ],
    }


def _hex(seed: str, n: int) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:n]


def _mac(seed: str, first: int = 0x36) -> str:
    h = hashlib.sha256(seed.encode()).digest()
    return ":".join(f"{b:02x}" for b in (first, h[0], h[1], h[2], h[3]))


def _checked(name: str, nodes: int | None, pods: str | None, model: str, tb_rate: str, mgmt_rate: str,
             boot_seconds: float, all_ports: bool) -> tuple[MacModelSpec, int, int]:
    """Every option checked (UsageError, nothing changed): (model, meshes, nodes per mesh)."""
    check_name(name)
    spec = MAC_MODELS.get(model)
    if spec is None:
        raise UsageError(f"unknown model {model!r}", hint="one of: " + ", ".join(MAC_MODELS))
    if pods and nodes is not None:
        raise UsageError("give --nodes or --pods, not both")
    n_pods, per_pod = parse_pods(pods) if pods else (1, 4 if nodes is None else nodes)
    if per_pod < 1 or n_pods < 1:
        raise UsageError("a lab needs at least one node")
    # With all_ports the port that cannot do RDMA carries the last peer's cable (IP only), as an operator
    # with seven Mac Studios must do; `topology check` then reports it as a wrong port.
    # A Thunderbolt 4 Mac has no RDMA-capable port at all: its mesh is cabled over every port (IP only).
    all_ports = all_ports or not spec.rdma_ports
    usable = len(spec.thunderbolt_ports) + 1 if all_ports else spec.max_full_mesh_nodes
    if per_pod > usable:
        raise UsageError(
            f"{per_pod} {spec.slug} nodes cannot be a full mesh",
            hint=f"{spec.slug} has {len(spec.rdma_ports)} RDMA-capable Thunderbolt ports: at most "
            f"{spec.max_full_mesh_nodes} nodes per mesh ({usable} with --all-ports)",
        )
    if n_pods * per_pod > 200:
        raise UsageError("at most 200 nodes per lab")
    rate_bits(tb_rate)
    rate_bits(mgmt_rate)
    if not math.isfinite(boot_seconds) or not 0 <= boot_seconds <= 600:
        raise UsageError(f"bad --boot-seconds {boot_seconds!r}", hint="seconds, from 0 to 600")
    return spec, n_pods, per_pod


def _node(name: str, node: str, mesh: str, gi: int, index: int, net: ipaddress.IPv4Network, rng: random.Random,
          spec: MacModelSpec) -> dict:
    """One node of the plan: its namespace, management address and link, and the identity a Mac reports."""
    seed = f"{name}/{node}"
    return {
        "name": node,
        "mesh": mesh,
        "index": gi,
        "model": spec.slug,
        "address": str(net.network_address + 10 + gi),
        "ns": f"mfl-{name}-{node}",
        "host_veth": f"mf{index}n{gi}",
        "mac_base": _mac(seed),
        "mgmt_mac": _mac(seed + "/en0", 0x1C) + ":" + _hex(seed + "e", 2),
        "wifi_mac": _mac(seed + "/en1", 0x1C) + ":" + _hex(seed + "w", 2),
        "uid_base": _hex(seed + "/uid", 11).upper(),
        "guid_base": _hex(seed + "/guid", 10),
        "serial": "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789") for _ in range(10)),
        "platform_uuid": str(uuid.UUID(int=rng.getrandbits(128), version=4)).upper(),
        "provisioning_udid": f"00006032-{_hex(seed + '/udid', 16).upper()}",
        "model_number": MODEL_NUMBERS[spec.slug],
    }


def _full_mesh(names: list[str], pod: int, ports: list[int], addresses: dict) -> list[dict]:
    """Cables of one mesh, node i's k-th port to its k-th peer (inventory order), and a /30 per cable."""
    cables = []
    link = 0
    for j in range(len(names)):
        for i in range(j):
            a, b = names[i], names[j]
            ra = ports[j - 1]  # j's slot among i's peers (j > i)
            rb = ports[i]  # i's slot among j's peers (i < j)
            cables.append({"a": {"node": a, "receptacle": ra}, "b": {"node": b, "receptacle": rb},
                           "kind": "tb5", "hub": None})
            subnet = ipaddress.IPv4Network((int(TB_POOL.network_address) + (pod * SUBNETS_PER_MESH + link) * 4, 30))
            addresses[a][ra] = (str(subnet.network_address + 1), 30)
            addresses[b][rb] = (str(subnet.network_address + 2), 30)
            link += 1
    return cables


def plan(
    name: str,
    *,
    index: int,
    nodes: int | None,
    pods: str | None,
    model: str,
    fresh: bool,
    tb_rate: str,
    mgmt_rate: str,
    boot_seconds: float,
    inventory_dir: str,
    exo: bool,
    all_ports: bool = False,
    latency: float = 1.0,
) -> dict:
    spec, n_pods, per_pod = _checked(name, nodes, pods, model, tb_rate, mgmt_rate, boot_seconds, all_ports)
    if not math.isfinite(latency) or not 0 <= latency <= 10:
        raise UsageError(f"bad --latency {latency!r}", hint="a scale from 0 (the lab's own speed) to 10; 1 is a Mac's")
    short = SHORT[spec.slug]
    net = ipaddress.IPv4Network(f"198.18.{index}.0/24")
    rng = random.Random(f"{name}-{index}")
    out_nodes: dict[str, dict] = {}
    cables: list[dict] = []
    addresses: dict[str, dict[int, tuple[str, int]]] = {}
    meshes: list[dict] = []
    ports = [pt.receptacle for pt in spec.rdma_ports]
    if all_ports or not spec.rdma_ports:  # a Thunderbolt 4-only Mac is cabled over all its ports
        ports += [pt.receptacle for pt in spec.thunderbolt_ports if not pt.rdma_capable]
    for p in range(n_pods):
        mesh = f"mesh{p + 1}"
        names = [f"{short}-{i + 1}" if n_pods == 1 else f"p{p + 1}-{short}-{i + 1}" for i in range(per_pod)]
        meshes.append({"name": mesh, "nodes": names})
        for node in names:
            out_nodes[node] = _node(name, node, mesh, len(out_nodes), index, net, rng, spec)
            addresses[node] = {}
        cables += _full_mesh(names, p, ports, addresses)
    return {
        "name": name,
        "index": index,
        "subnet": str(net),
        "controller_address": str(net.network_address + 1),
        "bridge": f"mfb{index}",
        "user": ADMIN_USER,
        "fresh": fresh,
        "exo": exo,
        "tb_rate": tb_rate,
        "mgmt_rate": mgmt_rate,
        "boot_seconds": boot_seconds,
        "latency": latency,  # the stand-ins' wait, as a share of a Mac's (lab/macos/latency.py)
        "inventory_dir": inventory_dir,
        "models": {spec.slug: model_dict(spec)},
        "meshes": meshes,
        "nodes": out_nodes,
        "cables": cables,
        "addresses": {n: {str(r): list(v) for r, v in a.items()} for n, a in addresses.items()},
    }


def tb_devices(lab: dict, node: str) -> list[str]:
    model = lab["models"][lab["nodes"][node]["model"]]
    return [p["device"] for p in model["ports"]]


def device_of(lab: dict, node: str, receptacle: int) -> str:
    model = lab["models"][lab["nodes"][node]["model"]]
    for p in model["ports"]:
        if p["receptacle"] == receptacle:
            return p["device"]
    raise KeyError((node, receptacle))
