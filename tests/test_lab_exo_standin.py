"""exo stand-in (macfleet/lab/exo): parsers on real captures, the HTTP API shapes, peer discovery over a
simulated 4-node Thunderbolt mesh (in-process servers on 127.0.0.1 fed canned command outputs), faults, and
`write_build` producing a runnable build. No root, no lab; network only to 127.0.0.1."""

from __future__ import annotations

import copy
import json
import os
import plistlib
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from macfleet.lab.exo import build
from macfleet.lab.exo import standin as exo

# ------------------------------------------------------------------------------------------------------------
# Canned outputs, copied verbatim from /work/shared/samples (file named above each one).

# macos__networksetup_listallhardwareports_macmini_m4pro_no_bridge_1.txt
HW_PORTS_MINI = """Hardware Port: Ethernet
Device: en0
Ethernet Address: d0:11:e5:18:1a:ba

Hardware Port: Wi-Fi
Device: en1
Ethernet Address: d0:11:e5:1d:b9:b8

Hardware Port: Thunderbolt 1
Device: en2
Ethernet Address: 36:b8:a3:15:10:80

Hardware Port: Thunderbolt 2
Device: en3
Ethernet Address: 36:b8:a3:15:10:84

Hardware Port: Thunderbolt 3
Device: en4
Ethernet Address: 36:b8:a3:15:10:88

VLAN Configurations
===================
"""

# macos__networksetup_listallhardwareports_studio_m4max_1.txt (trimmed to the ports that matter here)
HW_PORTS_STUDIO = """
Hardware Port: Ethernet
Device: en0
Ethernet Address: 1c:1d:d3:d9:ab:44

Hardware Port: Thunderbolt Bridge
Device: bridge0
Ethernet Address: 36:d9:a8:3e:97:00

Hardware Port: Thunderbolt 1
Device: en2
Ethernet Address: 36:d9:a8:3e:97:00
"""

# macos__ibv_devinfo_elided_macmini_m4pro_tn3205_1.txt ("..." are the capture's own elisions)
IBV_DEVINFO_MINI = """hca_id:    rdma_en2
    transport:            Thunderbolt (100)
...
    phys_port_cnt:            1
        port:    1
            state:            PORT_ACTIVE (4)
...

hca_id:    rdma_en3
    transport:            Thunderbolt (100)
...
    phys_port_cnt:            1
        port:    1
            state:            PORT_ACTIVE (4)
...

hca_id:    rdma_en4
    transport:            Thunderbolt (100)
...
    phys_port_cnt:            1
        port:    1
            state:            PORT_ACTIVE (4)
"""

# mlx__apple-tn3205_ibv_devinfo_-d_rdma_en2_-v.txt (without the "% ..." prompt line)
IBV_DEVINFO_V_ONELINE = """hca_id:    rdma_en2 transport:            Thunderbolt (100) node_guid:
9093:3a23:2588:ac05 ... port:    1 state:            PORT_ACTIVE (4)
...
            active_width:        8X (4)
            active_speed:        10.0 Gbps (4)
            GID[  0]:        fe80::344d:4ff:feea:4e40
            GID[  1]:        ::ffff:169.254.205.255
            GID[  2]:        fe80::1021:1bac:fe1:b5e3
"""

# macos__ifconfig_en2_tb_ip_tn3205_1.txt
IFCONFIG_EN2 = """en2: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500
    options=460<TSO4,TSO6,CHANNEL_IO>
    ether 36:4d:04:ea:4e:40
    inet6 fe80::1021:1bac:fe1:b5e3%en2 prefixlen 64 secured scopeid 0xb
    inet 169.254.205.255 netmask 0xffff0000 broadcast 169.254.255.255
    nd6 options=201<PERFORMNUD,DAD>
    media: autoselect <full-duplex>
    status: active
"""

# macos__ifconfig_full_macbook_bridge_inactive_1.txt (lo0, bridge0 and en0 blocks)
IFCONFIG_MACBOOK_PARTS = """lo0: flags=8049<UP,LOOPBACK,RUNNING,MULTICAST> mtu 16384
\toptions=1203<RXCSUM,TXCSUM,TXSTATUS,SW_TIMESTAMP>
\tinet 127.0.0.1 netmask 0xff000000
\tinet6 ::1 prefixlen 128
\tinet6 fe80::1%lo0 prefixlen 64 scopeid 0x1
\tnd6 options=201<PERFORMNUD,DAD>
bridge0: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500
\toptions=63<RXCSUM,TXCSUM,TSO4,TSO6>
\tether 36:bb:c5:1d:9f:40
\tConfiguration:
\t\tid 0:0:0:0:0:0 priority 0 hellotime 0 fwddelay 0
\t\tmaxage 0 holdcnt 0 proto stp maxaddr 100 timeout 1200
\t\troot id 0:0:0:0:0:0 priority 0 ifcost 0 port 0
\t\tipfilter disabled flags 0x0
\tmember: en1 flags=3<LEARNING,DISCOVER>
\t        ifmaxaddr 0 port 10 priority 0 path cost 0
\tmember: en2 flags=3<LEARNING,DISCOVER>
\t        ifmaxaddr 0 port 11 priority 0 path cost 0
\tnd6 options=201<PERFORMNUD,DAD>
\tmedia: <unknown type>
\tstatus: inactive
en0: flags=8863<UP,BROADCAST,SMART,RUNNING,SIMPLEX,MULTICAST> mtu 1500
\toptions=6460<TSO4,TSO6,CHANNEL_IO,PARTIAL_CSUM,ZEROINVERT_CSUM>
\tether 60:3e:5f:41:b5:8b
\tinet6 fe80::108b:3992:b70e:dcdf%en0 prefixlen 64 secured scopeid 0xf
\tinet 192.168.28.58 netmask 0xfffffc00 broadcast 192.168.31.255
\tnd6 options=201<PERFORMNUD,DAD>
\tmedia: autoselect
\tstatus: active
"""

# macos__rdma_ctl_status_enabled_1.txt
RDMA_CTL_ENABLED = "enabled\n"

# macos__sw_vers_macos26_6_2_runner_1.txt
SW_VERS = """ProductName:\t\tmacOS
ProductVersion:\t\t26.6.2
BuildVersion:\t\t25G83
arm64
runner image: macos26 20260907.0351.1
"""

# macos__sysctl_memsize_plus_sphardware_grep_studio_m3ultra_1.txt (the SPHardwareDataType lines)
SP_HARDWARE = """      Chip: Apple M3 Ultra
      Total Number of Cores: 32 (24 Performance and 8 Efficiency)
      Memory: 512 GB
"""

# macos__sp_thunderbolt_json_macmini_m4pro_2_peer_mbp.json (bus 1: a MacBook Pro peer; bus 2: a display)
SP_TB_MINI = json.dumps({"SPThunderboltDataType": [
    {"_items": [{"_name": "Studio Display", "device_id_key": "0x801F", "device_name_key": "Studio Display",
                 "device_revision_key": "0x1", "mode_key": "thunderbolt_three",
                 "receptacle_upstream_ambiguous_tag": {"current_speed_key": "20 Gb/s", "lc_version_key": "1.45.0",
                                                       "link_status_key": "0x2",
                                                       "receptacle_status_key": "receptacle_connected"},
                 "route_string_key": "1", "switch_uid_key": "0x000196C394A8D900", "switch_version_key": "67.1",
                 "vendor_id_key": "0x0001", "vendor_name_key": "Apple Inc."}],
     "_name": "thunderboltusb4_bus_2", "device_name_key": "Mac mini",
     "domain_uuid_key": "DFD77E42-7ED0-48E5-A840-94FD1522F505",
     "receptacle_1_tag": {"current_speed_key": "20 Gb/s", "link_status_key": "0x2", "micro_version_key": "0.0.0",
                          "receptacle_id_key": "3", "receptacle_status_key": "receptacle_connected"},
     "route_string_key": "0", "switch_uid_key": "0x05AC51E771159CF2", "vendor_name_key": "Apple Inc."},
    {"_items": [{"_name": "MacBook Pro", "device_id_key": "0xA", "device_name_key": "Mac17,6",
                 "domain_uuid_key": "BC5DEC53-7E36-4A9A-8459-456EBAB5E58A",
                 "services_title": [{"_name": "service_ip", "protocol_id_key": 1, "protocol_revision_key": 1,
                                     "protocol_version_key": 1,
                                     "service_uuid_key": "97879708-C925-4B8F-8588-A33BF8408272"}],
                 "vendor_id_key": "0x0A27", "vendor_name_key": "Apple Inc."}],
     "_name": "thunderboltusb4_bus_1", "device_name_key": "Mac mini",
     "domain_uuid_key": "4FBE0A88-3F0B-46F4-9511-3713B2315360",
     "receptacle_1_tag": {"current_speed_key": "40 Gb/s", "link_status_key": "0x2", "micro_version_key": "0.0.0",
                          "receptacle_id_key": "2", "receptacle_status_key": "receptacle_connected"},
     "route_string_key": "0", "switch_uid_key": "0x05AC51E771159CF1", "vendor_name_key": "Apple Inc."},
    {"_name": "thunderboltusb4_bus_0", "device_name_key": "Mac mini",
     "domain_uuid_key": "3C9311A2-3DFC-44C4-AEC3-81086B2880BB",
     "receptacle_1_tag": {"current_speed_key": "Up to 120 Gb/s", "link_status_key": "0x7",
                          "micro_version_key": "0.0.0", "receptacle_id_key": "1",
                          "receptacle_status_key": "receptacle_no_devices_connected"},
     "route_string_key": "0", "switch_uid_key": "0x05AC51E771159CF0", "vendor_name_key": "Apple Inc."},
]}, indent=2)

# ------------------------------------------------------------------------------------------------------------
# A simulated mesh of Mac minis: outputs are the captures above with addresses and UUIDs rewritten.


def _bus_template() -> tuple[dict, dict]:
    buses = json.loads(SP_TB_MINI)["SPThunderboltDataType"]
    return buses[1], buses[2]  # connected to a Mac; nothing connected


def _uuid(node: int, receptacle: int) -> str:
    return f"0000000{node}-0000-4000-8000-00000000000{receptacle}"


class Mesh:
    """n nodes, full mesh, one cable per pair; node i's k-th peer on receptacle k+1 (Thunderbolt k+1 = en(k+2))."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.unplugged: set[frozenset] = set()
        self.blocked: set[frozenset] = set()  # cable looks fine, traffic does not pass
        self.port_down: set[tuple[int, str]] = set()
        self.wedged: set[int] = set()
        self.slow: set[frozenset] = set()
        self.memory = 64 * 1024**3  # bytes of RAM per node
        self.links: dict[frozenset, int] = {}
        for k, pair in enumerate((a, b) for a in range(n) for b in range(a + 1, n)):
            self.links[frozenset(pair)] = k
        self.ports: dict[int, int] = {}  # node -> its server port
        self.calls: list[tuple[int, str, float]] = []  # (node, command, when: time.monotonic())

    def peers(self, node: int) -> list[int]:
        return [j for j in range(self.n) if j != node]

    def receptacle(self, node: int, peer: int) -> int:
        return self.peers(node).index(peer) + 1

    def addr(self, node: int, peer: int) -> str:
        k = self.links[frozenset((node, peer))]
        return f"10.99.{k}.{1 if node < peer else 2}"

    def owner(self, addr: str) -> tuple[int, int]:
        for pair, k in self.links.items():
            a, b = sorted(pair)
            if addr == f"10.99.{k}.1":
                return a, b
            if addr == f"10.99.{k}.2":
                return b, a
        raise KeyError(addr)

    def endpoint(self, addr: str) -> tuple[str, int]:
        node, peer = self.owner(addr)
        if frozenset((node, peer)) in self.unplugged | self.blocked or node not in self.ports:
            return "127.0.0.1", 9  # discard port: nothing listens, like a dead link
        return "127.0.0.1", self.ports[node]

    def sp_thunderbolt(self, node: int) -> str:
        connected, empty = _bus_template()
        buses = []
        for peer in self.peers(node):
            r = self.receptacle(node, peer)
            if frozenset((node, peer)) in self.unplugged:
                bus = copy.deepcopy(empty)
            else:
                bus = copy.deepcopy(connected)
                bus["_items"][0]["domain_uuid_key"] = _uuid(peer, self.receptacle(peer, node))
                slow = frozenset((node, peer)) in self.slow  # a TB4 cable (lab fault slow-cable)
                bus["receptacle_1_tag"]["current_speed_key"] = "40 Gb/s" if slow else "80 Gb/s"
            bus["_name"] = f"thunderboltusb4_bus_{r - 1}"
            bus["domain_uuid_key"] = _uuid(node, r)
            bus["receptacle_1_tag"]["receptacle_id_key"] = str(r)
            buses.append(bus)
        return json.dumps({"SPThunderboltDataType": buses}, indent=2)

    def ifconfig(self, node: int) -> str:
        blocks = [IFCONFIG_MACBOOK_PARTS.split("bridge0:")[0]]
        for peer in self.peers(node):
            dev = f"en{self.receptacle(node, peer) + 1}"
            block = IFCONFIG_EN2.replace("en2", dev).replace(
                "inet 169.254.205.255 netmask 0xffff0000 broadcast 169.254.255.255",
                f"inet {self.addr(node, peer)} netmask 0xfffffffc broadcast 10.99.255.255")
            if frozenset((node, peer)) in self.unplugged:
                block = block.replace("status: active", "status: inactive")
            blocks.append(block)
        return "".join(blocks)

    def ibv_devinfo(self, node: int) -> str:
        text = IBV_DEVINFO_MINI
        for peer in self.peers(node):
            iface = f"rdma_en{self.receptacle(node, peer) + 1}"
            if frozenset((node, peer)) in self.unplugged or (node, iface) in self.port_down:
                head, _, rest = text.partition(f"hca_id:    {iface}")
                text = head + f"hca_id:    {iface}" + rest.replace("PORT_ACTIVE (4)", "PORT_DOWN (1)", 1)
        return text

    def runner(self, node: int):
        def run(argv: list, timeout_s: float) -> tuple[int, str]:
            cmd = " ".join(argv)
            self.calls.append((node, cmd, time.monotonic()))
            if cmd == "ibv_devinfo" and node in self.wedged:
                raise exo.CommandTimeout(cmd)
            outputs = {
                "sw_vers": SW_VERS,
                "system_profiler SPHardwareDataType": SP_HARDWARE,
                "scutil --get ComputerName": f"mini{node}\n",
                "networksetup -listallhardwareports": HW_PORTS_MINI,
                "ifconfig": self.ifconfig(node),
                "system_profiler SPThunderboltDataType -json": self.sp_thunderbolt(node),
                "rdma_ctl status": RDMA_CTL_ENABLED,
                "sysctl -n hw.memsize": f"{self.memory}\n",  # samples macos__sysctl_n_memsize_ncpu_brand_*
                "ibv_devinfo": self.ibv_devinfo(node),
            }
            return (0, outputs[cmd]) if cmd in outputs else (127, "")

        return run


FAST = {"refresh_s": 0.2, "probe_timeout_s": 0.5, "link_ttl_s": 0.7, "node_ttl_s": 1.5, "ibv_timeout_s": 0.2,
        "links_s": 0.4, "config_s": 1.0, "identity_s": 5.0, "models_s": 0.5}


def _get(port: int, path: str, timeout: float = 5.0):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as resp:
        return resp.status, dict(resp.headers), json.loads(resp.read())


def _wait(pred, timeout: float = 10.0, every: float = 0.1):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"condition not met within {timeout}s (last: {last!r})")


def _ticks(apps, n: int, timeout: float = 20.0) -> None:
    """Wait (with a deadline) until every app has refreshed `n` more times: what "nothing changes for a while"
    means to the stand-in, counted in its own ticks rather than in wall time a loaded host stretches."""
    start = [app._tick for app in apps]
    _wait(lambda: all(app._tick >= s + n for app, s in zip(apps, start, strict=True)), timeout)


@pytest.fixture
def start_mesh(tmp_path: Path):
    started: list[exo.ExoStandin] = []

    def start(n: int = 4, versions: list[str] | None = None, broken: set[int] | frozenset = frozenset()):
        mesh = Mesh(n)
        apps = []
        for i in range(n):
            cfg = exo.Config(version=(versions or ["1.0.71"] * n)[i], home=tmp_path / f"home{i}", bind="127.0.0.1",
                             api_port=0, broken=i in broken, env={}, **FAST)
            app = exo.ExoStandin(cfg, runner=mesh.runner(i), peer_endpoint=mesh.endpoint)
            app.start()
            mesh.ports[i] = app.port
            apps.append(app)
            started.append(app)
        return mesh, apps

    yield start
    # together, as the nodes of a mesh stop: each waits as exo does for its runner (runner.JOIN_S) before SIGTERM
    threads = [threading.Thread(target=app.stop) for app in started]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _rdma_pairs(state: dict) -> set[tuple[str, str]]:
    out = set()
    for src, sinks in state["topology"]["connections"].items():
        for sink, conns in sinks.items():
            if any("sourceRdmaIface" in c for c in conns):
                out.add((src, sink))
    return out


def _socket_pairs(state: dict) -> set[tuple[str, str]]:
    return {(src, sink) for src, sinks in state["topology"]["connections"].items()
            for sink, conns in sinks.items() if any("sinkMultiaddr" in c for c in conns)}


# ------------------------------------------------------------------------------------------------------------
# parsers on the real captures


def test_parsers_read_the_real_captures():
    assert exo.parse_hardware_ports(HW_PORTS_MINI) == {
        "Ethernet": "en0", "Wi-Fi": "en1", "Thunderbolt 1": "en2", "Thunderbolt 2": "en3", "Thunderbolt 3": "en4"}
    assert exo.parse_hardware_ports(HW_PORTS_STUDIO)["Thunderbolt Bridge"] == "bridge0"

    ifaces = exo.parse_ifconfig(IFCONFIG_MACBOOK_PARTS + IFCONFIG_EN2)
    assert ifaces["en0"]["inet"] == [("192.168.28.58", 22)]
    assert ifaces["en2"]["inet"] == [("169.254.205.255", 16)]
    assert ifaces["en2"]["inet6"] == ["fe80::1021:1bac:fe1:b5e3"]
    assert ifaces["bridge0"]["members"] == ["en1", "en2"]
    assert ifaces["bridge0"]["status"] == "inactive"

    assert exo.parse_ibv_devinfo(IBV_DEVINFO_MINI) == {
        "rdma_en2": "PORT_ACTIVE", "rdma_en3": "PORT_ACTIVE", "rdma_en4": "PORT_ACTIVE"}
    assert exo.parse_ibv_devinfo(IBV_DEVINFO_V_ONELINE) == {"rdma_en2": "PORT_ACTIVE"}
    assert exo.parse_rdma_ctl(RDMA_CTL_ENABLED) is True
    assert exo.parse_rdma_ctl("disabled\n") is False
    assert exo.parse_rdma_ctl("") is None
    assert exo.parse_sw_vers(SW_VERS) == {"osVersion": "26.6.2", "osBuildVersion": "25G83"}
    assert exo.parse_hardware(SP_HARDWARE)["chipId"] == "Apple M3 Ultra"

    buses = {b["receptacle"]: b for b in exo.parse_thunderbolt(SP_TB_MINI)}
    assert buses["2"]["peerUuid"] == "BC5DEC53-7E36-4A9A-8459-456EBAB5E58A"  # a Mac on the other end
    assert buses["3"]["peerUuid"] is None  # a display is not a peer
    assert buses["1"]["peerUuid"] is None and buses["1"]["linkSpeed"] == "Up to 120 Gb/s"


def test_run_command_times_out_and_tolerates_missing_commands():
    with pytest.raises(exo.CommandTimeout):
        exo.run_command(["sleep", "5"], 0.2)
    assert exo.run_command(["no-such-command-here"], 1.0) == (127, "")
    assert exo.run_command(["echo", "hi"], 5.0) == (0, "hi\n")


def test_point_to_point_peers():
    assert exo.p2p_peers("10.99.0.1", 30) == ["10.99.0.2"]
    assert exo.p2p_peers("10.99.0.2", 30) == ["10.99.0.1"]
    assert exo.p2p_peers("10.99.0.4", 31) == ["10.99.0.5"]
    assert exo.p2p_peers("169.254.205.255", 16) == []  # link-local /16: nothing to enumerate


# ------------------------------------------------------------------------------------------------------------
# one node: API shapes


def test_single_node_api_shapes(start_mesh):
    _mesh, (app,) = start_mesh(1)
    status, headers, node_id = _get(app.port, "/node_id")
    assert status == 200 and isinstance(node_id, str) and len(node_id) == 32
    # exo's API says nothing of its version (exo b5375f8 src/exo/api/main.py): no header carries it
    assert not any("version" in h.lower() for h in headers), headers

    state = _wait(lambda: (s := _get(app.port, "/state")[2])["runners"] and s)
    for key in ("instances", "runners", "downloads", "tasks", "lastSeen", "topology", "lastEventAppliedIdx",
                "nodeIdentities", "nodeMemory", "nodeDisk", "nodeSystem", "nodeNetwork", "nodeThunderbolt",
                "nodeThunderboltBridge", "nodeRdmaCtl", "nodeBackends", "thunderboltBridgeCycles"):
        assert key in state, key
    assert state["topology"] == {"nodes": [node_id], "connections": {}}
    assert state["nodeIdentities"][node_id] == {"osVersion": "26.6.2", "osBuildVersion": "25G83",
                                                "modelId": "Unknown Model", "chipId": "Apple M3 Ultra",
                                                "friendlyName": "mini0"}
    assert state["nodeRdmaCtl"][node_id] == {"enabled": True}
    assert state["nodeThunderboltBridge"][node_id] == {"enabled": False, "exists": False, "serviceName": None}
    # a lone node still has its Thunderbolt identifiers (one per bus), as exo publishes them
    assert state["nodeThunderbolt"][node_id] == {"interfaces": []}
    [(runner_id, status_obj)] = state["runners"].items()
    assert status_obj == {"RunnerReady": {"prefillServerPort": None}}
    [instance] = state["instances"].values()
    assert instance["MlxJacclInstance"]["shardAssignments"]["nodeToRunner"] == {node_id: runner_id}

    assert _get(app.port, "/state/nodeRdmaCtl")[2] == {node_id: {"enabled": True}}
    with pytest.raises(urllib.error.HTTPError) as err:
        _get(app.port, "/state/nope/deeper")
    assert err.value.code == 404
    assert "unable to find path" in json.loads(err.value.read())["error"]["message"]

    models = _get(app.port, "/models")[2]
    assert {"id", "hugging_face_id", "name", "storage_size_megabytes"} <= set(models["data"][0])

    # the node id is kept under ~/.exo like exo's identity file
    assert (app.cfg.exo_home / "node_zid").read_text().strip() == node_id
    log = app.cfg.log_file.read_text()
    assert f"Node ID: {node_id}" in log and "| INFO     | exo.main:main:" in log


def test_models_completeness_rule(start_mesh, tmp_path: Path):
    models = tmp_path / "home0" / ".exo" / "models"
    whole = models / "mlx-community--Qwen3-0.6B-8bit"
    whole.mkdir(parents=True)
    (whole / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    (whole / "model-00001-of-00002.safetensors").write_bytes(b"x" * 10)
    (whole / "model-00002-of-00002.safetensors").write_bytes(b"x" * 10)
    half = models / "acme--half-model"
    half.mkdir()
    (half / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    (half / "model-00001-of-00002.safetensors").write_bytes(b"x")
    single = models / "acme--single"
    single.mkdir()
    (single / "model.safetensors").write_bytes(b"x")
    partial = models / "acme--partial"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"x")
    (partial / "tokenizer.json.partial").write_bytes(b"x")
    (models / "caches").mkdir()

    _mesh, (app,) = start_mesh(1)
    node_id = _get(app.port, "/node_id")[2]
    ids = _wait(lambda: "acme/single" in (i := {m["id"] for m in _get(app.port, "/models")[2]["data"]}) and i)
    assert {"acme/half-model", "acme/single", "acme/partial", "mlx-community/Qwen3-0.6B-8bit"} <= ids
    done = {m["id"] for m in _get(app.port, "/models?status=downloaded")[2]["data"]}
    assert done == {"mlx-community/Qwen3-0.6B-8bit", "acme/single"}
    downloads = _get(app.port, "/state/downloads")[2][node_id]
    tags = {next(iter(e.values()))["shardMetadata"]["PipelineShardMetadata"]["modelCard"]["modelId"]: next(iter(e))
            for e in downloads}
    assert tags == {"mlx-community/Qwen3-0.6B-8bit": "DownloadCompleted", "acme/single": "DownloadCompleted",
                    "acme/half-model": "DownloadPending", "acme/partial": "DownloadPending"}


def test_commands_run_at_their_cadence(start_mesh):
    """The probe loop runs every refresh; node commands (processes on the node) only at their cadence: never
    sooner (a loaded host only stretches the gaps), the links' commands more often than the config's, identity
    once. Waited for with a deadline, not a fixed sleep whose call counts a loaded host changes."""
    mesh, _apps = start_mesh(1)

    def counts() -> dict[str, int]:
        out: dict[str, int] = {}
        for _node, cmd, _at in list(mesh.calls):
            out[cmd] = out.get(cmd, 0) + 1
        return out

    _wait(lambda: (c := counts()).get("ibv_devinfo", 0) >= 4 and c.get("rdma_ctl status", 0) >= 2, 20)
    now, calls = time.monotonic(), list(mesh.calls)
    first: dict[str, float] = {}
    for _node, cmd, at in calls:
        first.setdefault(cmd, at)
    n = counts()
    # at most one call per period since the first (0.1 s for the commands run before it in the same tick)
    for cmd, period in (("ibv_devinfo", FAST["links_s"]), ("rdma_ctl status", FAST["config_s"]),
                        ("sw_vers", FAST["identity_s"])):
        assert n[cmd] <= 1 + (now - first[cmd] + 0.1) // period, (cmd, n[cmd], round(now - first[cmd], 2))
    assert n["ibv_devinfo"] >= n["rdma_ctl status"] >= n["sw_vers"] >= 1


def test_thunderbolt_bridge_reported():
    def run(argv, timeout_s):
        cmd = " ".join(argv)
        return {"networksetup -listallhardwareports": (0, HW_PORTS_STUDIO),
                "networksetup -getnetworkserviceenabled Thunderbolt Bridge": (0, "Enabled\n")}.get(cmd, (127, ""))

    app = exo.ExoStandin.__new__(exo.ExoStandin)
    app.run, app.pace = run, exo.Pace()
    assert app._tb_bridge(exo.parse_hardware_ports(HW_PORTS_STUDIO), {}) == {
        "enabled": True, "exists": True, "serviceName": "Thunderbolt Bridge"}


# ------------------------------------------------------------------------------------------------------------
# the mesh


def test_four_node_mesh_sees_everyone_and_twelve_rdma_connections(start_mesh):
    mesh, apps = start_mesh(4)
    ids = [_get(a.port, "/node_id")[2] for a in apps]
    for app in apps:
        state = _wait(lambda app=app: (s := _get(app.port, "/state")[2]) and len(_rdma_pairs(s)) == 12 and s)
        assert sorted(state["topology"]["nodes"]) == sorted(ids)
        assert len(_socket_pairs(state)) == 12
        assert set(state["nodeIdentities"]) == set(ids)
        assert all(v == {"enabled": True} for v in state["nodeRdmaCtl"].values())
        assert all(next(iter(r)) == "RunnerReady" for r in state["runners"].values())
        assert len(state["runners"]) == 4
    # RDMA interfaces are each end's own rdma_enX of the cable between them
    a, b = ids[0], ids[1]
    state = _get(apps[2].port, "/state")[2]
    conns = state["topology"]["connections"][a][b]
    assert {"sourceRdmaIface": "rdma_en2", "sinkRdmaIface": "rdma_en2"} in conns
    [sock] = [c for c in conns if "sinkMultiaddr" in c]
    assert sock["sinkMultiaddr"]["address"] == f"/ip4/{mesh.addr(1, 0)}/tcp/{apps[0].cfg.api_port}"
    tb = state["nodeThunderbolt"][a]["interfaces"]
    assert {"rdmaInterface": "rdma_en2", "domainUuid": _uuid(0, 1), "linkSpeed": "80 Gb/s"} in tb


def test_unplug_removes_both_directions_within_seconds(start_mesh):
    mesh, apps = start_mesh(4)
    ids = [_get(a.port, "/node_id")[2] for a in apps]
    _wait(lambda: all(len(_rdma_pairs(_get(a.port, "/state")[2])) == 12 for a in apps))
    mesh.unplugged.add(frozenset((0, 1)))
    t0 = time.monotonic()
    gone = {(ids[0], ids[1]), (ids[1], ids[0])}
    for app in apps:
        _wait(lambda app=app: not (_rdma_pairs(s := _get(app.port, "/state")[2]) | _socket_pairs(s)) & gone, 5)
        state = _wait(lambda app=app: (s := _get(app.port, "/state")[2]) and len(_rdma_pairs(s)) == 10 and s, 5)
        assert len(_socket_pairs(state)) == 10 and not (_rdma_pairs(state) | _socket_pairs(state)) & gone
        assert len(state["topology"]["nodes"]) == 4  # A and B still reach each other's records through C and D
    assert time.monotonic() - t0 < 5


def test_link_that_does_not_pass_traffic_is_not_a_connection(start_mesh):
    """Cable and ports look fine, but the peer does not answer over it: exo sees no peer there."""
    mesh, apps = start_mesh(3)
    ids = [_get(a.port, "/node_id")[2] for a in apps]
    _wait(lambda: all(len(_rdma_pairs(_get(a.port, "/state")[2])) == 6 for a in apps))
    mesh.blocked.add(frozenset((0, 2)))
    gone = {(ids[0], ids[2]), (ids[2], ids[0])}
    _wait(lambda: not (_rdma_pairs(s := _get(apps[1].port, "/state")[2]) | _socket_pairs(s)) & gone, 5)
    state = _wait(lambda: (s := _get(apps[1].port, "/state")[2]) and len(_rdma_pairs(s)) == 4 and s, 5)
    assert not (_rdma_pairs(state) | _socket_pairs(state)) & gone


def test_port_down_keeps_socket_but_drops_rdma(start_mesh):
    mesh, apps = start_mesh(2)
    ids = [_get(a.port, "/node_id")[2] for a in apps]
    _wait(lambda: len(_rdma_pairs(_get(apps[0].port, "/state")[2])) == 2)
    mesh.port_down.add((1, "rdma_en2"))
    both = {(ids[0], ids[1]), (ids[1], ids[0])}
    _wait(lambda: (s := _get(apps[0].port, "/state")[2]) and not _rdma_pairs(s) and _socket_pairs(s) == both, 5)


def test_peers_of_another_version_are_not_seen(start_mesh):
    _mesh, apps = start_mesh(3, versions=["1.0.71", "1.0.71", "1.0.70"])
    ids = [_get(a.port, "/node_id")[2] for a in apps]
    _wait(lambda: len(_get(apps[0].port, "/state")[2]["topology"]["nodes"]) == 2)
    _wait(lambda: "version 1.0.70 != 1.0.71" in apps[0].cfg.log_file.read_text())  # it was probed and refused
    _ticks(apps, 5)  # and stays out, refresh after refresh
    assert sorted(_get(apps[0].port, "/state")[2]["topology"]["nodes"]) == sorted(ids[:2])
    assert _get(apps[2].port, "/state")[2]["topology"]["nodes"] == [ids[2]]
    assert "version 1.0.70 != 1.0.71" in apps[0].cfg.log_file.read_text()


# ------------------------------------------------------------------------------------------------------------
# broken builds and faults


def test_broken_node_never_becomes_healthy(start_mesh):
    _mesh, apps = start_mesh(2, broken={1})
    ids = [_get(a.port, "/node_id")[2] for a in apps]
    _wait(lambda: _get(apps[0].port, "/state")[2]["runners"])
    _ticks(apps, 8)  # never, refresh after refresh
    broken_state = _get(apps[1].port, "/state")[2]
    assert broken_state["topology"] == {"nodes": [ids[1]], "connections": {}}
    assert [next(iter(r)) for r in broken_state["runners"].values()] == ["RunnerConnecting"]
    assert _get(apps[0].port, "/state")[2]["topology"]["nodes"] == [ids[0]]


def test_pace_rises_with_a_starved_host_and_falls_back():
    pace = exo.Pace()
    pace.note(0.02)
    assert pace.factor == 1.0  # a quiet host: timeouts and lifetimes as configured
    pace.note(1.5)  # 32 simulated Macs busy on 2 cores: a 20 ms command took 1.5 s
    assert pace.factor == pytest.approx(15.0)
    pace.note(50.0)
    assert pace.factor == exo.Pace.MAX  # bounded: a wedge still shows within MAX times its timeout
    for _ in range(12):
        pace.note(0.02)
    assert pace.factor < 1.1  # back to the configured timeouts within a few quiet commands


def test_a_slow_host_stretches_the_next_commands_timeout(tmp_path: Path):
    asked: list[float] = []

    def runner(argv: list, timeout_s: float) -> tuple[int, str]:
        asked.append(timeout_s)
        if len(asked) == 1:
            time.sleep(0.5)  # the host is starved: a quick command took 0.5 s
        return 0, ""

    cfg = exo.Config(version="1.0.71", home=tmp_path, bind="127.0.0.1", api_port=0, env={}, **FAST)
    app = exo.ExoStandin(cfg, runner=runner, peer_endpoint=lambda addr: ("127.0.0.1", 9))
    app._cmd(["sw_vers"], 2.0)
    app._cmd(["sw_vers"], 2.0)
    assert asked[0] == 2.0 and asked[1] >= 2.0 * 4  # pulled cables and wedges are judged on the host's pace


def test_rdma_wedge_logs_jaccl_signature_and_fails_runner(start_mesh):
    mesh, apps = start_mesh(2)
    ids = [_get(a.port, "/node_id")[2] for a in apps]
    _wait(lambda: len(_rdma_pairs(_get(apps[0].port, "/state")[2])) == 2)
    mesh.wedged.add(0)  # ibv_devinfo hangs on node 0
    both = {(ids[0], ids[1]), (ids[1], ids[0])}
    state = _wait(lambda: (s := _get(apps[1].port, "/state")[2]) and not _rdma_pairs(s)
                  and _socket_pairs(s) == both and s, 5)
    failed = {rid: r for rid, r in state["runners"].items() if "RunnerFailed" in r}
    assert [r["RunnerFailed"]["errorMessage"] for r in failed.values()] == [exo.RTR_ERRNO_22]
    log = apps[0].cfg.log_file.read_text()
    assert f"crashed with critical exception {exo.RTR_ERRNO_22}" in log
    assert exo.NO_PD in log
    assert "| WARNING  | exo.worker.runner.bootstrap:entrypoint:59 ] Runner " in log


def test_fault_overlay_runner_failed_and_log_lines(start_mesh):
    _mesh, (app,) = start_mesh(1)
    _wait(lambda: _get(app.port, "/state")[2]["runners"])
    faults = app.cfg.exo_home / "lab_faults.json"
    faults.write_text(json.dumps({"runnerFailed": exo.SEGV_MESSAGE, "log": ["[jaccl] Recv failed with errno=2"]}))
    state = _wait(lambda: (s := _get(app.port, "/state")[2]) and "RunnerFailed" in next(iter(s["runners"].values()))
                  and s, 5)
    [runner_id] = state["runners"]
    assert state["runners"][runner_id] == {"RunnerFailed": {"errorMessage": exo.SEGV_MESSAGE, "diagnostics": []}}
    _ticks([app], 3)  # logged once, not at every refresh
    log = app.cfg.log_file.read_text()
    assert log.count(f"Runner {runner_id} crashed with critical exception {exo.SEGV_MESSAGE}") == 1
    assert log.count("[jaccl] Recv failed with errno=2\n") == 1
    faults.unlink()
    _wait(lambda: "RunnerReady" in next(iter(_get(app.port, "/state")[2]["runners"].values())), 5)


# ------------------------------------------------------------------------------------------------------------
# only keys exo defines (issue 31 item 3): every object the stand-in serves is one of exo's models, with no key
# exo's model lacks. The key lists are derived from exo's source at a pinned commit (tests/fixtures/exo_schema/).

EXO_SCHEMA = json.loads((Path(__file__).resolve().parent / "fixtures" / "exo_schema" / "keys.json").read_text())
MODELS = EXO_SCHEMA["models"]


def _family(base: str) -> set[str]:
    return {n for n, m in MODELS.items() if base in m["ancestors"]}


MAP, LIST, ANY = "map", "list", None  # a mapping's values / a list's items follow the spec after it
SHARD = ("tagged", _family("BaseShardMetadata"), {"modelCard": ("model", "ModelCard", {})})
MEMORY = ("model", "Memory", {})
STATE_SPEC = ("model", "State", {
    "instances": (MAP, ("tagged", _family("BaseInstance"), {"shardAssignments": ("model", "ShardAssignments", {
        "runnerToShard": (MAP, SHARD), "nodeToRunner": ANY})})),
    "runners": (MAP, ("tagged", _family("BaseRunnerStatus"), {})),
    "downloads": (MAP, (LIST, ("tagged", _family("BaseDownloadProgress"), {
        "shardMetadata": SHARD, "total": MEMORY, "downloaded": MEMORY}))),
    "topology": ("model", "TopologySnapshot", {"connections": (MAP, (MAP, (LIST, ("oneof", {
        "RDMAConnection": {}, "SocketConnection": {"sinkMultiaddr": ("model", "Multiaddr", {})}}))))}),
    "nodeIdentities": (MAP, ("model", "NodeIdentity", {})),
    "nodeMemory": (MAP, ("model", "MemoryUsage", {})),
    "nodeDisk": (MAP, ("model", "DiskUsage", {"total": MEMORY, "available": MEMORY})),
    "nodeSystem": (MAP, ("model", "SystemPerformanceProfile", {})),
    "nodeNetwork": (MAP, ("model", "NodeNetworkInfo", {"interfaces": (LIST, ("model", "NetworkInterfaceInfo", {}))})),
    "nodeThunderbolt": (MAP, ("model", "NodeThunderboltInfo", {
        "interfaces": (LIST, ("model", "ThunderboltIdentifier", {}))})),
    "nodeThunderboltBridge": (MAP, ("model", "ThunderboltBridgeStatus", {})),
    "nodeRdmaCtl": (MAP, ("model", "NodeRdmaCtlStatus", {})),
})
MODELS_SPEC = ("model", "ModelList", {"data": (LIST, ("model", "ModelListModel", {}))})
ERROR_SPEC = ("model", "ErrorResponse", {"error": ("model", "ErrorInfo", {})})


def _extra_keys(value, spec, where: str = "") -> list[str]:
    """Keys in `value` that exo's model at that place does not define (`where` names the place)."""
    if spec is None:
        return []
    kind = spec[0]
    if kind in (MAP, LIST):
        items = value.items() if kind == MAP else enumerate(value)
        return [x for k, v in items for x in _extra_keys(v, spec[1], f"{where}[{k}]")]
    if kind == "tagged":
        assert isinstance(value, dict) and len(value) == 1, f"{where}: not a tagged object: {value!r}"
        [(tag, inner)] = value.items()
        if tag not in spec[1]:
            return [f"{where}: tag {tag!r} is none of exo's {sorted(spec[1])}"]
        return _extra_keys(inner, ("model", tag, spec[2]), f"{where}.{tag}")
    if kind == "oneof":
        fits = [n for n in spec[1] if set(value) <= set(MODELS[n]["keys"])]
        if not fits:
            return [f"{where}: keys {sorted(value)} fit none of exo's {sorted(spec[1])}"]
        return _extra_keys(value, ("model", fits[0], spec[1][fits[0]]), where)
    _kind, name, children = spec
    assert isinstance(value, dict), f"{where}: {name} is an object, got {value!r}"
    out = [f"{where}.{k}: not a field of exo's {name} ({MODELS[name]['path']})" for k in value
           if k not in MODELS[name]["keys"]]
    return out + [x for k, sub in children.items() if k in value for x in _extra_keys(value[k], sub, f"{where}.{k}")]


def test_the_fixture_is_exo_source_at_a_pinned_commit():
    assert EXO_SCHEMA["source"]["commit"] == "b5375f8cee4368d09e1ce96a56b9f81fb0bc81aa"
    assert MODELS["State"]["keys"][:6] == ["instances", "runners", "downloads", "tasks", "lastSeen", "topology"]
    assert MODELS["RunnerFailed"]["tagged"] and "BaseRunnerStatus" in MODELS["RunnerFailed"]["ancestors"]


def test_every_answer_carries_only_keys_exo_defines(start_mesh, tmp_path: Path):
    models = tmp_path / "home0" / ".exo" / "models"
    (models / "acme--single").mkdir(parents=True)
    (models / "acme--single" / "model.safetensors").write_bytes(b"x")
    (models / "acme--partial").mkdir()
    (models / "acme--partial" / "tokenizer.json.partial").write_bytes(b"x")
    _mesh, apps = start_mesh(2)
    (apps[1].cfg.exo_home / "lab_faults.json").write_text(json.dumps({"runnerFailed": exo.SEGV_MESSAGE}))
    state = _wait(lambda: (s := _get(apps[0].port, "/state")[2]) and len(_rdma_pairs(s)) == 2
                  and any("RunnerFailed" in r for r in s["runners"].values())
                  and len(s["downloads"].get(apps[0].node_id, [])) == 2 and s)
    assert _extra_keys(state, STATE_SPEC) == []
    assert _extra_keys(_get(apps[0].port, "/models")[2], MODELS_SPEC) == []
    assert isinstance(_get(apps[0].port, "/node_id")[2], str)  # exo: `lambda: self.node_id`, a bare string
    with pytest.raises(urllib.error.HTTPError) as e:
        _get(apps[0].port, "/state/noSuchKey")
    assert _extra_keys(json.loads(e.value.read()), ERROR_SPEC) == []


# ------------------------------------------------------------------------------------------------------------
# builds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fake_commands(dir_: Path) -> Path:
    dir_.mkdir()
    for name, text in {"sw_vers": SW_VERS, "rdma_ctl": RDMA_CTL_ENABLED, "ibv_devinfo": IBV_DEVINFO_MINI,
                       "networksetup": HW_PORTS_MINI, "ifconfig": IFCONFIG_MACBOOK_PARTS,
                       "system_profiler": SP_TB_MINI}.items():
        (dir_ / f"{name}.out").write_text(text)
        script = dir_ / name
        script.write_text(f"#!/bin/sh\ncat '{dir_ / (name + '.out')}'\n")
        script.chmod(0o755)
    return dir_


def _start_build(entry: Path, home: Path, port: int, path_dir: Path) -> subprocess.Popen:
    env = {"HOME": str(home), "PATH": f"{path_dir}:/usr/bin:/bin", "LANG": "C.UTF-8"}
    return subprocess.Popen([str(entry), "--bind", "127.0.0.1", "--api-port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _wait_http(port: int, path: str, proc: subprocess.Popen):
    def probe():
        if proc.poll() is not None:
            raise AssertionError(f"exo exited {proc.returncode}: {proc.stderr.read().decode()}")
        try:
            return _get(port, path, timeout=1)
        except OSError:
            return None

    return _wait(probe, 10)


@pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK), reason="needs /usr/bin/python3 like a lab node")
def test_write_build_is_runnable_from_an_install_root(tmp_path: Path):
    release = tmp_path / "opt" / "exo" / "releases" / "1.0.71"
    assert build.write_build(release, "1.0.71") == release
    assert (release / "VERSION").read_text() == "1.0.71\n"
    meta = build.read_build(release)
    assert meta["version"] == "1.0.71" and meta["broken"] is False and meta["entry"] == "bin/exo"
    entry = release / "bin" / "exo"
    assert os.access(entry, os.X_OK) and entry.read_text().startswith(f"#!{os.path.realpath('/usr/bin/python3')}\n")
    assert (release / "lib" / "exo_standin.py").read_text() == Path(exo.__file__).read_text()
    current = tmp_path / "opt" / "exo" / "current"
    current.symlink_to(release)

    home = tmp_path / "home"
    home.mkdir()
    fake = _fake_commands(tmp_path / "fakebin")
    port = _free_port()
    proc = _start_build(current / "bin" / "exo", home, port, fake)
    try:
        status, headers, node_id = _wait_http(port, "/node_id", proc)
        assert status == 200 and isinstance(node_id, str) and not any("version" in h.lower() for h in headers)
        state = _wait(lambda: (s := _get(port, "/state")[2])["runners"] and s)
        assert state["nodeIdentities"][node_id]["osBuildVersion"] == "25G83"
        assert "RunnerReady" in next(iter(state["runners"].values()))
        # a second instance is refused by the ~/.exo/exo.pid lock, like exo's
        second = _start_build(current / "bin" / "exo", home, _free_port(), fake)
        assert second.wait(timeout=10) == 1
    finally:
        assert _stop(proc) == 0
    assert (home / ".exo" / "node_zid").read_text().strip() == node_id
    assert "Starting EXO" in (home / ".exo" / "exo_log" / "exo.log").read_text()


@pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK), reason="needs /usr/bin/python3 like a lab node")
def test_broken_build_serves_but_never_reports_healthy(tmp_path: Path):
    release = build.write_build(tmp_path / "rel", "1.0.72-bad", broken=True)
    assert build.read_build(release)["broken"] is True
    home = tmp_path / "home"
    home.mkdir()
    port = _free_port()
    proc = _start_build(release / "bin" / "exo", home, port, _fake_commands(tmp_path / "fakebin"))
    try:
        _wait_http(port, "/node_id", proc)
        assert _get(port, "/models")[0] == 200
        start = _get(port, "/state")[2]["lastEventAppliedIdx"]

        def three_more_refreshes_never_ready() -> bool:  # counted in its refreshes, not in wall time
            state = _get(port, "/state")[2]
            assert all("RunnerReady" not in r for r in state["runners"].values())
            return state["lastEventAppliedIdx"] >= start + 3

        _wait(three_more_refreshes_never_ready, 30, every=0.3)
        with pytest.raises(urllib.error.HTTPError) as err:
            _get(port, exo.GOSSIP_PATH)
        assert err.value.code == 503
    finally:
        _stop(proc)


def test_write_build_refuses_bad_input(tmp_path: Path):
    with pytest.raises(ValueError):
        build.write_build(tmp_path / "a", "1.0 71")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x").write_text("")
    with pytest.raises(FileExistsError):
        build.write_build(tmp_path / "b", "1.0.71")
    assert build.main(["--version", "1.0.71", "--out", str(tmp_path / "c")]) == 0
    assert (tmp_path / "c" / "bin" / "exo").exists()


def test_launchd_plist(tmp_path: Path):
    data = plistlib.loads(build.render_launchd_plist("/opt/exo/current/bin/exo", home="/Users/admin"))
    assert data["Label"] == build.LABEL == "org.macfleet.exo"
    assert data["ProgramArguments"] == ["/opt/exo/current/bin/exo"]
    assert data["RunAtLoad"] is True and data["KeepAlive"] is True
    assert data["StandardOutPath"].startswith("/Users/admin/.exo/exo_log/")
    assert data["StandardErrorPath"].startswith("/Users/admin/.exo/exo_log/")
    assert data["EnvironmentVariables"]["HOME"] == "/Users/admin"
    assert "UserName" not in data
    daemon = plistlib.loads(build.render_launchd_plist("/x/bin/exo", home="/Users/admin", user="admin",
                                                       args=["--api-port", "52415"], env={"EXO_OFFLINE": "true"}))
    assert daemon["UserName"] == "admin" and daemon["ProgramArguments"][1:] == ["--api-port", "52415"]
    assert daemon["EnvironmentVariables"]["EXO_OFFLINE"] == "true"
    hook = plistlib.loads(build.launchd_plist("/opt/homebrew/exo", user="macadmin", home="/Users/macadmin"))
    assert hook["ProgramArguments"] == ["/opt/homebrew/exo/bin/exo"] and hook["UserName"] == "macadmin"
    assert build.plist_path(Path("/Users/admin")) == Path("/Users/admin/Library/LaunchAgents/org.macfleet.exo.plist")
    assert build.plist_path(Path("/Users/admin"), daemon=True) == Path("/Library/LaunchDaemons/org.macfleet.exo.plist")


def test_standin_imports_nothing_from_macfleet():
    source = Path(exo.__file__).read_text()
    assert "macfleet" not in "".join(line for line in source.splitlines(True) if line.startswith(("import", "from")))
    assert sys.version_info >= (3, 9)
