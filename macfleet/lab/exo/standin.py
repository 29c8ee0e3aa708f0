"""exo stand-in: serves the part of exo's HTTP API that macfleet reads, from a lab node's own facts.

This file is self-contained on purpose: an exo build (see build.py) copies it verbatim into
`<release>/lib/exo_standin.py` and runs it with the node's Debian `/usr/bin/python3`. Standard library
only; nothing from `macfleet` is imported (the lab must not reuse macfleet's parsers).

What it does, like exo does (its source: github.com/exo-explore/exo):
- every `refresh_s` (1 s) it runs the node's macOS commands - `system_profiler SPThunderboltDataType -json`,
  `networksetup -listallhardwareports`, `ifconfig`, `ibv_devinfo`, `rdma_ctl status`, `sw_vers`
  (slow facts `system_profiler SPHardwareDataType`, `scutil --get ComputerName` every 10th tick) - and parses
  them with the small private parsers below;
- for every Thunderbolt interface ("Thunderbolt N" -> enX) with an IPv4 address on a /28../31, it probes the
  other address(es) of that subnet at `http://<addr>:52415/node_id`, then reads the peer's records from a
  small gossip endpoint, `GET /_lab/gossip` (not exo's: real exo gossips over libp2p/zenoh), so every node's
  /state shows the whole cluster. A peer whose gossip carries another version is not linked: exo's nodes of
  different versions do not connect (exo b5375f8 src/exo/main.py: `--namespace` defaults to `__version__`,
  "nodes with different namespaces will not connect"). The version is the build's VERSION; exo's API says
  nothing of it (no header, no field), so neither does the stand-in's;
- outgoing edges of this node: one socket connection per live link, and an RDMA connection
  `{"sourceRdmaIface", "sinkRdmaIface"}` when the Thunderbolt bus behind that link sees the peer's domain
  UUID, both ends have `rdma_ctl` enabled and both `rdma_enX` ports are PORT_ACTIVE;
- it logs to `~/.exo/exo_log/exo.log` in exo's loguru format; `ibv_devinfo` hanging past its timeout is a
  wedged RDMA stack: the runner fails with exo's JACCL signature (as exo's runner logs it, github.com/exo-explore/exo).

Fault hooks: the JSON file `~/.exo/lab_faults.json` (or `$EXO_LAB_FAULTS_FILE`) is re-read every tick:
  {"runnerFailed": "<errorMessage>" | true,   -> runner RunnerFailed{errorMessage}; crash line in the log
   "rdmaWedge": true,                          -> as if ibv_devinfo hung: no RDMA edges, JACCL signature
   "log": ["line", ...]}                       -> appended to exo.log once per distinct content
A missing or unreadable file means no faults.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

if __package__:  # macfleet.lab.exo.standin; in a build, lib/exo_standin.py next to lib/exo_<name>.py
    from macfleet.lab.exo import discovery
    from macfleet.lab.exo import instances as exo_instances
    from macfleet.lab.exo import runner as lab_runner
else:
    import exo_discovery as discovery  # type: ignore[no-redef]
    import exo_instances  # type: ignore[no-redef]
    import exo_runner as lab_runner  # type: ignore[no-redef]

API_PORT = 52415  # exo's own --api-port default (exo src/exo/main.py, v1.0.60 and HEAD: research/exo.md)
VERSION_HEADER = "X-Exo-Version"  # never sent (see LAB_ONLY): named only so the product cannot read it
GOSSIP_PATH = "/_lab/gossip"

# What this stand-in serves, reads or writes that real exo does not (nothing in exo's source defines it): the
# product must never read any of these names (tests/test_lab_only.py scans macfleet/ outside the lab, and
# playbooks/). Kept on the list after removal, so that a lab-only name cannot come back into the product.
LAB_ONLY = frozenset({
    VERSION_HEADER,  # a response header this stand-in once sent; exo sends none (exo b5375f8 src/exo/api/main.py)
    GOSSIP_PATH,  # how lab nodes share their records; real exo gossips over libp2p (1.0.x) / zenoh (HEAD)
    "lab_faults.json", "EXO_LAB_FAULTS_FILE",  # the fault overlay
    "EXO_LAB_API_PORT", "EXO_LAB_BIND", "EXO_LAB_REFRESH_S", "EXO_LAB_INSTANCE_MODEL",  # lab settings
    "node_zid",  # the lab's persisted node id (exo HEAD draws one per start)
    "lab_rdma_leak.json", "exo-lab-runner",  # the lab's RDMA leak record, its runner's name (lab/exo/runner.py)
    "--exo-version", "--peer-port",  # lab-only options of bin/exo
})
DEFAULT_INSTANCE_MODEL = "mlx-community/Llama-3.2-1B-Instruct-4bit"
EXTRA_PATH = ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin", "/opt/homebrew/bin")

# The JACCL strings a wedged RDMA stack produces, and exo's runner crash line.
RTR_ERRNO_22 = "[jaccl] Changing queue pair to RTR failed with errno 22"
NO_PD = "[jaccl] Couldn't allocate protection domain"
SEGV_MESSAGE = "Terminated (signal=11 (Segmentation fault: 11))"

# Illustrative model cards (not exo's catalogue): what /models lists besides the local model dirs.
KNOWN_MODELS = (
    ("mlx-community/Llama-3.2-1B-Instruct-4bit", "Llama 3.2 1B (4-bit)", "llama", "4bit", 696),
    ("mlx-community/Qwen3-0.6B-8bit", "Qwen3 0.6B (8-bit)", "qwen", "8bit", 663),
    ("mlx-community/Llama-3.3-70B-Instruct-4bit", "Llama 3.3 70B (4-bit)", "llama", "4bit", 39_710),
    ("mlx-community/DeepSeek-V3.1-4bit", "DeepSeek V3.1 (4-bit)", "deepseek", "4bit", 378_000),
)

Runner = Callable[[list, float], "tuple[int, str]"]


class Pace:
    """How many times slower than on a quiet host this node's commands answer now.

    The lab's Macs share the host's cores: a doctor pass over 32 simulated Macs keeps hundreds of processes
    runnable on 2 cores, and every command here then takes many times longer. A real Mac, with its own cores,
    never sees that, and its exo does not drop a link because another Mac is busy. So the timeouts and
    lifetimes that decide a peer or a link is gone (and that `ibv_devinfo` hangs) are stretched by this
    factor: starvation of the host is not taken for a pulled cable or a wedged RDMA stack. A command that
    never answers (the rdma-wedge fault) still times out, and is not counted. On a quiet host the factor is 1,
    so faults show as fast as before. It rises with the slowest recent command and falls back within a few."""

    QUIET_S = 0.1  # a stand-in command on a quiet host answers in 15-40 ms
    MAX = 30.0
    DECAY = 0.6

    def __init__(self) -> None:
        self.factor = 1.0

    def note(self, took_s: float) -> None:
        sample = min(self.MAX, max(1.0, took_s / self.QUIET_S))
        self.factor = max(sample, self.DECAY * self.factor + (1 - self.DECAY) * sample)


# --------------------------------------------------------------------------------------------- commands


class CommandTimeout(Exception):
    pass


def run_command(argv: list, timeout_s: float) -> tuple[int, str]:
    """Run a node command; (rc, stdout). Missing command -> rc 127. Hang -> CommandTimeout."""
    env = dict(os.environ)
    parts = [p for p in env.get("PATH", "").split(os.pathsep) if p]
    env["PATH"] = os.pathsep.join(parts + [p for p in EXTRA_PATH if p not in parts])
    exe = shutil.which(argv[0], path=env["PATH"])
    if exe is None:
        return 127, ""
    try:
        proc = subprocess.run(
            [exe, *argv[1:]], capture_output=True, text=True, timeout=timeout_s, env=env, check=False,
            errors="replace",
        )
    except subprocess.TimeoutExpired as exc:
        raise CommandTimeout(" ".join(argv)) from exc
    return proc.returncode, proc.stdout


# ---------------------------------------------------------------------------------------------- parsers


def parse_hardware_ports(text: str) -> dict:
    """`networksetup -listallhardwareports` -> {"Thunderbolt 1": "en2", ...}."""
    ports: dict = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Hardware Port:"):
            current = line.split(":", 1)[1].strip()
        elif line.startswith("Device:") and current is not None:
            ports[current] = line.split(":", 1)[1].strip()
            current = None
    return ports


_IFACE_HEAD = re.compile(r"^([A-Za-z0-9_.-]+):\s+flags=")


def _netmask_prefix(mask: str) -> int | None:
    try:
        value = int(mask, 16) if mask.lower().startswith("0x") else int(ipaddress.IPv4Address(mask))
    except ValueError:
        return None
    return bin(value).count("1")


def parse_ifconfig(text: str) -> dict:
    """`ifconfig` -> {iface: {"inet": [(addr, prefix)], "inet6": [addr], "status": str|None, "members": []}}."""
    out: dict = {}
    cur = None
    for raw in text.splitlines():
        head = _IFACE_HEAD.match(raw)
        if head:
            cur = out.setdefault(head.group(1), {"inet": [], "inet6": [], "status": None, "members": []})
            continue
        if cur is None:
            continue
        words = raw.split()
        if not words:
            continue
        if words[0] == "inet" and len(words) >= 2:
            prefix = None
            if "netmask" in words and words.index("netmask") + 1 < len(words):
                prefix = _netmask_prefix(words[words.index("netmask") + 1])
            cur["inet"].append((words[1], prefix if prefix is not None else 32))
        elif words[0] == "inet6" and len(words) >= 2:
            cur["inet6"].append(words[1].split("%")[0])
        elif words[0] == "status:" and len(words) >= 2:
            cur["status"] = words[1]
        elif words[0] == "member:" and len(words) >= 2:
            cur["members"].append(words[1])
    return out


_IBV_TOKEN = re.compile(r"\b(hca_id|port|state):\s*(\S+)")


def parse_ibv_devinfo(text: str) -> dict:
    """`ibv_devinfo` -> {"rdma_en2": "PORT_ACTIVE", ...} (state of the device's first port)."""
    ports: dict = {}
    hca = None
    for key, value in _IBV_TOKEN.findall(text):
        if key == "hca_id":
            hca = value
        elif key == "state" and hca is not None and hca not in ports:
            ports[hca] = value
    return ports


def parse_rdma_ctl(text: str) -> bool | None:
    low = text.strip().lower()
    if "disabled" in low:
        return False
    if "enabled" in low:
        return True
    return None


def parse_sw_vers(text: str) -> dict:
    vals = {}
    for line in text.splitlines():
        if ":" in line:
            key, _, value = line.partition(":")
            vals[key.strip()] = value.strip()
    return {"osVersion": vals.get("ProductVersion", "Unknown"), "osBuildVersion": vals.get("BuildVersion", "Unknown")}


def parse_hardware(text: str) -> dict:
    """`system_profiler SPHardwareDataType` text: the "Model Name" and "Chip" lines, as exo reads them."""
    vals = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(": ")
        if sep and key in ("Model Name", "Chip", "Model Identifier"):
            vals[key] = value.strip()
    return {"modelId": vals.get("Model Name", "Unknown Model"), "chipId": vals.get("Chip", "Unknown Chip")}


def parse_thunderbolt(text: str) -> list:
    """`system_profiler SPThunderboltDataType -json` -> buses as exo reads them (as exo's source reads them).

    [{"domainUuid", "receptacle", "linkSpeed", "peerUuid"}]; peerUuid = first `_items[]` entry with a
    `domain_uuid_key` (another Mac's bus), None when nothing or only a non-host device is attached.
    """
    data = json.loads(text)
    buses = []
    for bus in data.get("SPThunderboltDataType", []) or []:
        if not isinstance(bus, dict) or not bus.get("domain_uuid_key"):
            continue
        tag = bus.get("receptacle_1_tag") or {}
        items = [it for it in bus.get("_items") or [] if isinstance(it, dict)]
        peer = next((it["domain_uuid_key"] for it in items if it.get("domain_uuid_key")), None)
        buses.append({
            "domainUuid": bus["domain_uuid_key"],
            "receptacle": tag.get("receptacle_id_key"),
            "linkSpeed": tag.get("current_speed_key"),
            "peerUuid": peer,
        })
    return buses


def p2p_peers(addr: str, prefix: int) -> list:
    """The other host addresses of a small point-to-point subnet (/28 to /31); [] for anything larger."""
    if prefix < 28 or prefix > 31:
        return []
    net = ipaddress.IPv4Network(f"{addr}/{prefix}", strict=False)
    hosts = list(net) if prefix == 31 else list(net.hosts())
    return [str(h) for h in hosts if str(h) != addr]


def model_dir_complete(path: Path) -> bool:
    """Completeness rule (exo's model downloader): a `*.safetensors.index.json` whose weight_map files all exist and no
    `*.partial` file; a model without an index is complete when `model.safetensors` exists and nothing is partial."""
    try:
        names = {p.name for p in path.iterdir()}
    except OSError:
        return False
    if any(n.endswith(".partial") for n in names):
        return False
    indexes = [n for n in names if n.endswith(".safetensors.index.json")]
    if not indexes:
        return "model.safetensors" in names
    for index in indexes:
        try:
            weight_map = json.loads((path / index).read_text()).get("weight_map") or {}
        except (OSError, ValueError):
            return False
        if not weight_map or not all(str(f) in names for f in set(weight_map.values())):
            return False
    return True


def _dir_bytes(path: Path) -> int:
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size
        except OSError:
            pass
    return total


# ----------------------------------------------------------------------------------------------- config


class Config:
    def __init__(
        self,
        *,
        version: str,
        home: Path | None = None,
        broken: bool = False,
        bind: str = "0.0.0.0",
        api_port: int = API_PORT,
        peer_port: int | None = None,
        refresh_s: float = 1.0,
        probe_timeout_s: float = 1.0,
        link_ttl_s: float | None = None,
        node_ttl_s: float | None = None,
        ibv_timeout_s: float = 2.0,
        links_s: float = 2.0,
        config_s: float = 10.0,
        identity_s: float = 30.0,
        models_s: float = 5.0,
        env: dict | None = None,
    ) -> None:
        env = dict(os.environ if env is None else env)
        self.version = version
        self.broken = broken
        self.bind = bind
        self.api_port = api_port
        self.peer_port = peer_port if peer_port is not None else api_port
        self.refresh_s = refresh_s
        self.probe_timeout_s = probe_timeout_s
        # kept through missed probes: 2.5 and 5 ticks (a big lab ticks less often: EXO_LAB_REFRESH_S)
        self.link_ttl_s = link_ttl_s if link_ttl_s is not None else 2.5 * refresh_s
        self.node_ttl_s = node_ttl_s if node_ttl_s is not None else 5.0 * refresh_s
        self.ibv_timeout_s = ibv_timeout_s
        self.links_s = links_s
        self.config_s = config_s
        self.identity_s = identity_s
        self.models_s = models_s
        user_home = Path(home) if home is not None else Path(env.get("HOME") or Path.home())
        # exo: EXO_HOME is relative to $HOME, default ~/.exo
        self.exo_home = user_home / env.get("EXO_HOME", ".exo")
        self.log_dir = self.exo_home / "exo_log"
        self.log_file = self.log_dir / "exo.log"
        self.pid_file = self.exo_home / "exo.pid"
        self.node_id_file = self.exo_home / "node_zid"
        self.faults_file = Path(env["EXO_LAB_FAULTS_FILE"]) if env.get("EXO_LAB_FAULTS_FILE") else (
            self.exo_home / "lab_faults.json")
        default_models = env.get("EXO_DEFAULT_MODELS_DIR") or env.get("EXO_MODELS_DIR") or str(self.exo_home / "models")
        dirs = [Path(default_models)]
        for var in ("EXO_MODELS_DIRS", "EXO_MODELS_READ_ONLY_DIRS"):
            dirs += [Path(p) for p in env.get(var, "").split(":") if p]
        self.models_dirs = dirs
        self.instance_model = env.get("EXO_LAB_INSTANCE_MODEL", DEFAULT_INSTANCE_MODEL)


# -------------------------------------------------------------------------------------------------- log


class ExoLog:
    """Appends lines in exo's loguru format: `[ 2026-04-24 09:03:32.966 | WARNING  | module:func:line ] msg`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, level: str, where: str, message: str) -> None:
        now = _dt.datetime.now()
        stamp = now.strftime("%Y-%m-%d %H:%M:%S.") + f"{now.microsecond // 1000:03d}"
        line = f"[ {stamp} | {level:<8} | {where} ] {message}\n"
        with self._lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line)

    def info(self, where: str, message: str) -> None:
        self.write("INFO", where, message)

    def warning(self, where: str, message: str) -> None:
        self.write("WARNING", where, message)

    def error(self, where: str, message: str) -> None:
        self.write("ERROR", where, message)


# ----------------------------------------------------------------------------------------------- server


def _http_get(url: str, timeout_s: float) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()


class ExoStandin:
    """One node's exo. `runner(argv, timeout_s) -> (rc, stdout)` and `peer_endpoint(addr) -> (host, port)`
    are injectable so unit tests can feed canned command outputs and map lab addresses to 127.0.0.1."""

    def __init__(
        self,
        config: Config,
        *,
        runner: Runner | None = None,
        peer_endpoint: Callable[[str], tuple] | None = None,
        http_get: Callable[[str, float], tuple] | None = None,
    ) -> None:
        self.cfg = config
        self.run = runner or run_command
        self.peer_endpoint = peer_endpoint or (lambda addr: (addr, self.cfg.peer_port))
        self.http_get = http_get or _http_get
        self.cfg.exo_home.mkdir(parents=True, exist_ok=True)
        self.log = ExoLog(self.cfg.log_file)
        self.node_id = self._load_node_id()
        self.runner_id = str(uuid.uuid5(uuid.NAMESPACE_OID, "exo-lab-runner:" + self.node_id))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._servers: list = []
        self._threads: list = []
        self._tick = 0
        self._event_idx = 0
        self._gathered_at: dict = {}
        self._overlay_wedge = False
        self._facts: dict = {}
        self._links: dict = {}  # (iface, addr) -> {"peer": id, "seen": monotonic}
        self._records: dict = {}  # node id -> (record, monotonic time its seq last grew)
        self._faults: dict = {}
        self._logged_fault_lines: set = set()
        self._wedged = False
        self._wedge_logged_at = 0.0
        self._runner_failed_msg: str | None = None
        self._ready = False
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="exo-probe")
        self.pace = Pace()
        self._election = discovery.Election(self.node_id)
        self._leak = lab_runner.Leak(self.cfg.exo_home / lab_runner.LEAK_FILE)
        self._starts = lab_runner.Starts()
        self._boot: str | None = None
        self._runner_proc = None
        self._warned: set = set()
        self.registry = exo_instances.Registry()  # placed models, chat and bench: instances.py
        self.api = exo_instances.Api(self)

    # ---- identity

    def _load_node_id(self) -> str:
        # exo HEAD draws a random id per start (its node_id); the lab keeps one per node, in ~/.exo/node_zid,
        # so a restart is the same node (as exo's Dec-2025 persisted keypair was).
        try:
            value = self.cfg.node_id_file.read_text().strip()
            if re.fullmatch(r"[0-9a-f]{32}", value):
                return value
        except OSError:
            pass
        value = os.urandom(16).hex()
        self.cfg.node_id_file.write_text(value + "\n")
        return value

    @property
    def version(self) -> str:
        return self.cfg.version

    # ---- lifecycle

    def start(self) -> None:
        self.log.info("exo.main:main:301", f"Starting EXO (lab stand-in) version {self.cfg.version}")
        self.log.info("exo.main:main:302", f"Node ID: {self.node_id}")
        if self.cfg.broken:
            self.log.info("exo.main:main:303", "lab build marked broken: it will never become healthy")
        for host in [h.strip() for h in self.cfg.bind.split(",") if h.strip()]:
            server = ThreadingHTTPServer((host, self.cfg.api_port), _make_handler(self))
            server.daemon_threads = True
            self._servers.append(server)
            t = threading.Thread(target=server.serve_forever, name=f"exo-api-{host}", daemon=True)
            t.start()
            self._threads.append(t)
        self.log.info("exo.api.main:run:1942", f"API listening on {self.cfg.bind}:{self.port}")
        t = threading.Thread(target=self._loop, name="exo-refresh", daemon=True)
        t.start()
        self._threads.append(t)
        self._read_faults()
        self._runner_proc = lab_runner.start(self._faults)

    @property
    def port(self) -> int:
        return self._servers[0].server_address[1] if self._servers else self.cfg.api_port

    def stop(self) -> None:
        self._stop.set()  # first: the refresh loop starts no new runner meanwhile
        if self._runner_proc is not None:
            lab_runner.stop(self._runner_proc, self.log)
            if self._boot is not None:
                with contextlib.suppress(OSError):
                    self._note_holder(stopping=True)
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for t in self._threads:
            t.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.log.info("exo.main:main:330", "EXO stopped")

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.refresh()
            except Exception as exc:  # a stand-in must keep serving whatever the node says
                self.log.error("exo.worker.main:info_gatherer:508", f"refresh failed: {exc!r}")
            self._stop.wait(max(0.05, self.cfg.refresh_s - (time.monotonic() - started)))

    # ---- one refresh

    def _run(self, argv: list, timeout_s: float) -> tuple[int, str]:
        """Run a node command under `timeout_s` stretched by the host's pace, and note how long it took."""
        started = time.monotonic()
        result = self.run(argv, timeout_s * self.pace.factor)  # CommandTimeout is not a sample: it never ended
        self.pace.note(time.monotonic() - started)
        return result

    def _cmd(self, argv: list, timeout_s: float = 5.0) -> str | None:
        rc, out = self._run(argv, timeout_s)
        return out if rc == 0 else None

    def _warn_once(self, key: str, where: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.log.warning(where, message)

    def refresh(self) -> None:
        """Gather facts, probe links, merge peers' records, rebuild this node's record. One tick."""
        self._read_faults()
        if self._runner_proc is not None:
            self._runner_proc = lab_runner.ensure(self._runner_proc, self._faults, self.log)
        facts = self._gather()
        alone = self.cfg.broken or discovery.split(self._faults)
        targets = [] if alone else self._targets(facts)
        links = self._probe(targets)
        now = time.monotonic()
        slow = self.pace.factor
        with self._lock:
            self._facts = facts
            for key, peer in links.items():
                self._links[key] = {"peer": peer, "seen": now}
            # a link is kept through a missed probe or two (link_ttl_s), but not once its interface is down
            # or has lost the address it was probed from
            self._links = {k: v for k, v in self._links.items()
                           if k in targets and now - v["seen"] <= self.cfg.link_ttl_s * slow}
            self._records = {
                nid: (rec, seen) for nid, (rec, seen) in self._records.items()
                if now - seen <= self.cfg.node_ttl_s * slow
            }
            self._update_runner(facts)
            if alone:
                self._records = {}
            own = self._own_record(facts)
            self._records[self.node_id] = (own, now)
            elected = self._election.update(list(self._records))
        if elected:
            self.log.info(discovery.WHERE, elected)
        with self._lock:
            self._event_idx += 1
            self._tick += 1

    def _read_faults(self) -> None:
        try:
            faults = json.loads(self.cfg.faults_file.read_text() or "{}")
            if not isinstance(faults, dict):
                faults = {}
        except (OSError, ValueError):
            faults = {}
        self._faults = faults
        lines = faults.get("log") or []
        if isinstance(lines, str):
            lines = [lines]
        key = json.dumps(lines)
        if lines and key not in self._logged_fault_lines:
            self._logged_fault_lines.add(key)
            with self.log._lock, open(self.cfg.log_file, "a", encoding="utf-8") as fh:
                for line in lines:
                    fh.write(str(line).rstrip("\n") + "\n")

    def _due(self, name: str, period_s: float) -> bool:
        """True (and restarts the clock) when the facts called `name` are older than period_s."""
        now = time.monotonic()
        last = self._gathered_at.get(name)
        if last is not None and now - last < period_s:
            return False
        self._gathered_at[name] = now
        return True

    def _gather(self) -> dict:
        """The node's facts. Cadences follow exo's but quicker for links, which decide edges:
        links (`ifconfig`, `system_profiler SPThunderboltDataType -json`, `ibv_devinfo`) every links_s, config
        (`networksetup`, `rdma_ctl`) every config_s, identity every identity_s. Each command is a process on
        the node, so this, not the 1 s probe loop, is what a lab of many nodes pays for."""
        c = self.cfg
        f = dict(self._facts)
        if self._due("identity", c.identity_s):
            sw = self._cmd(["sw_vers"])
            hw = self._cmd(["system_profiler", "SPHardwareDataType"], 10.0)
            name = self._cmd(["scutil", "--get", "ComputerName"])
            mem = (self._cmd(["sysctl", "-n", "hw.memsize"]) or "").strip()
            f["memBytes"] = int(mem) if mem.isdigit() else None
            f["identity"] = {
                **(parse_sw_vers(sw) if sw else {"osVersion": "Unknown", "osBuildVersion": "Unknown"}),
                **(parse_hardware(hw) if hw else {"modelId": "Unknown Model", "chipId": "Unknown Chip"}),
                "friendlyName": (name or "").strip() or os.uname().nodename,
            }
        config_due = self._due("config", c.config_s)
        if config_due:
            hw_ports_text = self._cmd(["networksetup", "-listallhardwareports"])
            if hw_ports_text is None:
                self._warn_once("hwports", "exo.utils.info_gatherer.info_gatherer:_gather_iface_map:56",
                                "networksetup -listallhardwareports failed with code 1")
            f["hwPorts"] = parse_hardware_ports(hw_ports_text or "")
            rdma = self._cmd(["rdma_ctl", "status"])
            f["rdmaCtl"] = parse_rdma_ctl(rdma) if rdma is not None else None
        hw_ports = f["hwPorts"]

        overlay_wedge = bool(self._faults.get("rdmaWedge"))
        if self._due("links", c.links_s) or overlay_wedge != self._overlay_wedge:
            self._overlay_wedge = overlay_wedge
            f["ifaces"] = parse_ifconfig(self._cmd(["ifconfig"]) or "")
            tb_text = self._cmd(["system_profiler", "SPThunderboltDataType", "-json"])
            buses: list = []
            if tb_text:
                try:
                    buses = parse_thunderbolt(tb_text)
                except (ValueError, AttributeError):
                    self._warn_once("tbdata", "exo.utils.info_gatherer.info_gatherer:_monitor_tb:508",
                                    "Error gathering Thunderbolt data")
            f["buses"] = buses
            wedged = overlay_wedge
            ports: dict | None = None
            if not wedged:
                try:
                    _rc, out = self._run(["ibv_devinfo"], c.ibv_timeout_s)
                    ports = parse_ibv_devinfo(out)
                except CommandTimeout:
                    wedged = True
            f["rdmaPorts"] = None if wedged else ports
            self._set_wedged(wedged)
            links_due = True
        else:
            links_due = False
        if config_due:
            f["tbBridge"] = self._tb_bridge(hw_ports, f["ifaces"])
        if config_due or links_due:
            ifaces = f["ifaces"]
            for bus in f["buses"]:
                dev = hw_ports.get(f"Thunderbolt {bus['receptacle']}")
                bus["iface"] = dev
                bus["rdmaInterface"] = f"rdma_{dev}" if dev else None
            tb_devices = {dev for port, dev in hw_ports.items() if port.lower().startswith("thunderbolt ")}
            f["tbAddrs"] = {dev: ifaces.get(dev, {}).get("inet", []) for dev in sorted(tb_devices)}
            f["network"] = self._network(hw_ports, ifaces)
        if self._due("models", c.models_s):
            f["models"] = self._scan_models()
            f["disk"] = self._disk()
        return f

    def _set_wedged(self, wedged: bool) -> None:
        now = time.monotonic()
        if wedged and (not self._wedged or now - self._wedge_logged_at > 60):
            self._wedge_logged_at = now
            self.log.warning("exo.worker.runner.bootstrap:entrypoint:59",
                             f"Runner {self.runner_id} crashed with critical exception {RTR_ERRNO_22}")
            self.log.warning("exo.worker.runner.bootstrap:entrypoint:59",
                             f"Runner {self.runner_id} crashed with critical exception {NO_PD}")
        elif not wedged and self._wedged:
            self.log.info("exo.worker.main:plan_step:214", "RDMA devices answer again")
        self._wedged = wedged

    def _failed_start(self) -> None:
        """A runner start failed: it leaves its RDMA resources held until the node reboots (lab/exo/runner.py)."""
        if self._boot is None:
            self._boot = self._cmd(["sysctl", "-n", "kern.boottime"]) or ""
        self._leak.failed_start(self._boot)
        self.log.error("exo.worker.runner.supervisor:_check_runner:401", lab_runner.TERMINATED)

    def _note_holder(self, stopping: bool = False) -> None:
        """Note in the leak file the runner that holds its RDMA resources now (lab/exo/runner.py Leak): one that
        runs and has not failed, as doctor counts a runner holding."""
        if self._boot is None:
            self._boot = self._cmd(["sysctl", "-n", "kern.boottime"]) or ""
        p = self._runner_proc
        holds = not stopping and not self._runner_failed_msg and p is not None and p.poll() is None
        self._leak.holding(self._boot, p.pid if holds and p is not None else None)

    def _update_runner(self, facts: dict) -> None:
        fault = self._faults.get("runnerFailed")
        msg: str | None = None
        if self._starts.due(self._faults):
            self._failed_start()
        if self._boot is not None and self._leak.held(self._boot) >= lab_runner.CAPACITY:
            msg = lab_runner.EBUSY
        elif fault:
            msg = fault if isinstance(fault, str) else (
                fault.get("errorMessage") if isinstance(fault, dict) else None) or SEGV_MESSAGE
        elif self._wedged:
            msg = RTR_ERRNO_22
        if msg and msg != self._runner_failed_msg and not (self._wedged and not fault):
            self.log.warning("exo.worker.runner.bootstrap:entrypoint:59",
                             f"Runner {self.runner_id} crashed with critical exception {msg}")
            self._failed_start()
        self._runner_failed_msg = msg
        self._note_holder()
        if not self._ready and not self.cfg.broken and facts.get("identity"):
            self._ready = True
            self.log.info("exo.worker.runner.llm_inference.runner:main:210", "runner ready")

    def _network(self, hw_ports: dict, ifaces: dict) -> list:
        kinds = {}
        for port, dev in hw_ports.items():
            if port == "Wi-Fi":
                kinds[dev] = "wifi"
            elif "Ethernet" in port or "LAN" in port:
                kinds[dev] = "ethernet"
            elif port.startswith("Thunderbolt") and port != "Thunderbolt Bridge":
                kinds[dev] = "thunderbolt"
        out = []
        for name, info in sorted(ifaces.items()):
            if name.startswith("lo"):
                continue
            kind = kinds.get(name) or ("maybe_ethernet" if name.startswith("en") and name not in ("en0", "en1")
                                       else "unknown")
            for addr, _prefix in info["inet"]:
                out.append({"name": name, "ipAddress": addr, "interfaceType": kind})
            for addr in info["inet6"]:
                out.append({"name": name, "ipAddress": addr, "interfaceType": kind})
        return out

    def _tb_bridge(self, hw_ports: dict, ifaces: dict) -> dict:
        dev = hw_ports.get("Thunderbolt Bridge")
        if dev is None and "bridge0" not in ifaces:
            return {"enabled": False, "exists": False, "serviceName": None}
        enabled_text = self._cmd(["networksetup", "-getnetworkserviceenabled", "Thunderbolt Bridge"])
        if enabled_text is not None:
            enabled = enabled_text.strip().lower() == "enabled"
        else:
            enabled = ifaces.get(dev or "bridge0", {}).get("status") == "active"
        return {"enabled": enabled, "exists": True, "serviceName": "Thunderbolt Bridge"}

    def _scan_models(self) -> list:
        found = []
        for base in self.cfg.models_dirs:
            try:
                entries = sorted(p for p in base.iterdir() if p.is_dir() and "--" in p.name)
            except OSError:
                continue
            for path in entries:
                found.append({
                    "modelId": path.name.replace("--", "/", 1),
                    "path": str(path),
                    "complete": model_dir_complete(path),
                    "bytes": _dir_bytes(path),
                })
        return found

    def _disk(self) -> dict:
        for base in [*self.cfg.models_dirs, self.cfg.exo_home]:
            try:
                usage = shutil.disk_usage(base)
            except OSError:
                continue
            return {"total": {"inBytes": usage.total}, "available": {"inBytes": usage.free}}
        return {}

    # ---- peers

    def _targets(self, facts: dict) -> list:
        """(iface, peer address) for every Thunderbolt interface that is up and has a point-to-point IPv4."""
        targets = []
        for dev, addrs in facts["tbAddrs"].items():
            if facts["ifaces"].get(dev, {}).get("status") == "inactive":
                continue
            for addr, prefix in addrs:
                targets += [(dev, peer) for peer in p2p_peers(addr, prefix)]
        return targets

    def _probe(self, targets: list) -> dict:
        """{(iface, addr): peer node id} for links whose far end answers /node_id and has our version."""
        if not targets:
            return {}
        results = list(self._pool.map(self._probe_one, targets))
        return {t: peer for t, peer in zip(targets, results, strict=False) if peer}

    def _probe_one(self, target: tuple) -> str | None:
        _dev, addr = target
        host, port = self.peer_endpoint(addr)
        base = f"http://{host}:{port}"
        try:
            status, _h, body = self.http_get(base + "/node_id", self.cfg.probe_timeout_s * self.pace.factor)
            if status != 200:
                return None
            peer_id = json.loads(body)
            if not isinstance(peer_id, str) or peer_id == self.node_id:
                return None
            status, _h, body = self.http_get(base + GOSSIP_PATH, self.cfg.probe_timeout_s * self.pace.factor)
            if status != 200:
                return None
            gossip = json.loads(body)
            peer_version = gossip.get("version") if isinstance(gossip, dict) else None
            if peer_version != self.version:
                self._warn_once(f"version:{addr}:{peer_version}", "exo.routing.router:_on_peer:88",
                                f"ignoring peer {peer_id} at {addr}: version {peer_version} != {self.version}")
                return None
            self._merge(gossip)
            return peer_id
        except (OSError, ValueError, urllib.error.URLError):
            return None

    def _merge(self, gossip: dict) -> None:
        now = time.monotonic()
        with self._lock:
            for nid, rec in (gossip.get("records") or {}).items():
                if nid == self.node_id or not isinstance(rec, dict) or rec.get("version") != self.version:
                    continue
                known = self._records.get(nid)
                if known is None or rec.get("seq", 0) > known[0].get("seq", 0):
                    self._records[nid] = (rec, now)

    # ---- records and state

    def _live_links(self) -> dict:
        """{iface: (addr, peer id)} - the peer seen over each Thunderbolt interface."""
        out = {}
        for (dev, addr), info in sorted(self._links.items()):
            out.setdefault(dev, (addr, info["peer"]))
        return out

    def _own_record(self, facts: dict) -> dict:
        edges = []
        live = self._live_links()
        for addr, peer in live.values():
            edges.append({"sink": peer, "conn": {"sinkMultiaddr": {
                "address": f"/ip4/{addr}/tcp/{self.cfg.api_port}", "address_type": "ip4",
                "ip_address": addr, "port": self.cfg.api_port}}})
        ports = facts.get("rdmaPorts")
        if facts.get("rdmaCtl") and ports is not None:
            for bus in facts["buses"]:
                dev, iface, peer_uuid = bus.get("iface"), bus.get("rdmaInterface"), bus.get("peerUuid")
                if not dev or not peer_uuid or dev not in live or ports.get(iface) != "PORT_ACTIVE":
                    continue
                peer = live[dev][1]
                rec = self._records.get(peer, (None,))[0]
                if not rec or not rec.get("rdmaCtl") or rec.get("rdmaPorts") is None:
                    continue
                sink_iface = next((i["rdmaInterface"] for i in rec["thunderbolt"]["interfaces"]
                                   if i.get("domainUuid") == peer_uuid), None)
                if sink_iface and rec["rdmaPorts"].get(sink_iface) == "PORT_ACTIVE":
                    edges.append({"sink": peer, "conn": {"sourceRdmaIface": iface, "sinkRdmaIface": sink_iface}})
        if self.cfg.broken:
            runner = {"RunnerConnecting": {}}
        elif self._runner_failed_msg:
            runner = {"RunnerFailed": {"errorMessage": self._runner_failed_msg, "diagnostics": []}}
        elif self._ready:
            runner = {"RunnerReady": {"prefillServerPort": None}}
        else:
            runner = {"RunnerConnecting": {}}
        return {
            "nodeId": self.node_id,
            "version": self.version,
            "seq": time.time(),
            "identity": facts["identity"],
            "network": {"interfaces": facts["network"]},
            "thunderbolt": {"interfaces": [
                {"rdmaInterface": b["rdmaInterface"], "domainUuid": b["domainUuid"], "linkSpeed": b["linkSpeed"]}
                for b in facts["buses"] if b.get("rdmaInterface")]},
            "tbBridge": facts["tbBridge"],
            "rdmaCtl": facts["rdmaCtl"],
            "rdmaPorts": facts["rdmaPorts"],
            "disk": facts["disk"],
            "models": [{k: m[k] for k in ("modelId", "complete", "bytes")} for m in facts["models"]],
            "runner": {"id": self.runner_id, "status": runner},
            "edges": edges,
            "memBytes": facts.get("memBytes"),
            "linkSpeeds": {peer: next((b["linkSpeed"] for b in facts["buses"] if b.get("iface") == dev), None)
                           for dev, (_addr, peer) in live.items()},
            **self.registry.record(),
        }

    def records(self) -> dict:
        """{node id: record} as merged from the cluster (instances.py reads instances and links from them)."""
        with self._lock:
            return {nid: rec for nid, (rec, _s) in self._records.items()}

    def card(self, model_id: str) -> dict | None:
        """The lab's model card for `model_id`: a catalogue entry, or a model whose files some node holds."""
        size = next((mb * 1024 * 1024 for mid, _n, _f, _q, mb in KNOWN_MODELS if mid == model_id), None)
        held = [m["bytes"] for rec in self.records().values() for m in rec.get("models", [])
                if m["modelId"] == model_id]
        held += [m["bytes"] for m in self._scan_models() if m["modelId"] == model_id]  # exo reads its own disk
        size = size or max(held, default=None)
        return exo_instances.model_card(model_id, max(1, size)) if size is not None else None

    def gossip(self) -> dict:
        with self._lock:
            return {"nodeId": self.node_id, "version": self.version,
                    "records": {nid: rec for nid, (rec, _seen) in self._records.items()}}

    def visible_records(self, records: dict | None = None) -> dict:
        """{node id: record} of `records` (default: the merged ones) as this node's `/state` shows them (a broken
        build: itself only)."""
        records = self.records() if records is None else records
        if self.cfg.broken:
            records = {nid: rec for nid, rec in records.items() if nid == self.node_id}
        return records

    def own_instance(self, records: dict) -> dict | None:
        """The lab's own `MlxJacclInstance` of `cfg.instance_model` over every node in `records` (a GUESS, docs/lab.md:
        real exo has no instance until one is placed). Its runners are the nodes' own (`_update_runner`), so a
        runner fault or a wedge shows on it; instances.py answers completions through it as through any placed
        instance. None without a record."""
        ids = sorted(records)
        if not ids:
            return None
        node_to_runner = {nid: records[nid]["runner"]["id"] for nid in ids}
        instance_id = str(uuid.uuid5(uuid.NAMESPACE_OID, "exo-lab-instance:" + self.version))
        return {"MlxJacclInstance": {
            "instanceId": instance_id,
            "jacclCoordinators": discovery.coordinators(
                ids, {nid: records[nid]["network"] for nid in ids}, instance_id, self._faults),
            "shardAssignments": {
                "modelId": self.cfg.instance_model,
                "nodeToRunner": node_to_runner,
                "runnerToShard": {node_to_runner[nid]: {"PipelineShardMetadata": {
                    "modelCard": {"modelId": self.cfg.instance_model}, "deviceRank": rank, "worldSize": len(ids)}}
                    for rank, nid in enumerate(ids)},
            },
        }}

    def state(self) -> dict:
        """exo's `/state` (HEAD schema, camelCase) built from the merged records."""
        with self._lock:
            idx = self._event_idx
        records = self.visible_records()
        ids = sorted(records)
        connections: dict = {}
        for src in ids:
            for edge in records[src]["edges"]:
                if edge["sink"] in records:
                    connections.setdefault(src, {}).setdefault(edge["sink"], []).append(edge["conn"])
        runners = {rec["runner"]["id"]: rec["runner"]["status"] for rec in records.values()}
        own = self.own_instance(records)
        instances = {exo_instances.instance_id(own): own} if own else {}
        downloads = {}
        for nid in ids:
            entries = []
            for m in records[nid].get("models", []):
                shard = {"PipelineShardMetadata": {"modelCard": {"modelId": m["modelId"]}}}
                if m["complete"]:
                    # exo: DownloadCompleted.total (`totalBytes` until c45ff9ad4, 2026-02-19; v1.0.71 has `total`)
                    entries.append({"DownloadCompleted": {"nodeId": nid, "shardMetadata": shard,
                                                          "total": {"inBytes": m["bytes"]}}})
                else:
                    entries.append({"DownloadPending": {"nodeId": nid, "shardMetadata": shard}})
            downloads[nid] = entries
        state = {
            "instances": instances,
            "runners": runners,
            "downloads": downloads,
            "tasks": {},
            "lastSeen": {nid: _dt.datetime.fromtimestamp(records[nid]["seq"], _dt.timezone.utc).isoformat()  # noqa: UP017 - node python may be <3.11
                         for nid in ids},
            "topology": {"nodes": ids, "connections": connections},
            "lastEventAppliedIdx": idx,
            "nodeIdentities": {nid: records[nid]["identity"] for nid in ids},
            "nodeMemory": {},
            "nodeDisk": {nid: records[nid]["disk"] for nid in ids if records[nid].get("disk")},
            "nodeSystem": {},
            "nodeNetwork": {nid: records[nid]["network"] for nid in ids},
            "nodeThunderbolt": {nid: records[nid]["thunderbolt"] for nid in ids},
            "nodeThunderboltBridge": {nid: records[nid]["tbBridge"] for nid in ids},
            "nodeRdmaCtl": {nid: {"enabled": records[nid]["rdmaCtl"]} for nid in ids
                            if records[nid]["rdmaCtl"] is not None},
            "nodeBackends": {},
            "thunderboltBridgeCycles": [],
            "instanceLinks": {},
            "prefillServerPorts": {},
            "customModelCards": {},
        }
        exo_instances.view(state, records)
        return state

    def models(self, downloaded_only: bool = False) -> dict:
        with self._lock:
            local = list(self._facts.get("models", []))
        complete = {m["modelId"] for m in local if m["complete"]}
        cards = []
        seen = set()
        for model_id, name, family, quant, size_mb in KNOWN_MODELS:
            cards.append(_card(model_id, name, family, quant, size_mb, is_custom=False))
            seen.add(model_id)
        for m in local:
            if m["modelId"] not in seen:
                seen.add(m["modelId"])
                cards.append(_card(m["modelId"], m["modelId"].split("/")[-1], None, None,
                                   m["bytes"] // (1024 * 1024), is_custom=True))
        if downloaded_only:
            cards = [c for c in cards if c["id"] in complete]
        return {"data": cards}


def _card(model_id: str, name: str, family: str | None, quant: str | None, size_mb: int, *, is_custom: bool):
    return {
        "id": model_id,
        "hugging_face_id": model_id,
        "name": name,
        "storage_size_megabytes": size_mb,
        "supports_tensor": True,
        "tasks": ["TextGeneration"],
        "is_custom": is_custom,
        "family": family,
        "quantization": quant,
        "base_model": None,
        "capabilities": ["text"],
        "context_length": None,
    }


# ---------------------------------------------------------------------------------------------- handler


# Where each behaviour of this stand-in comes from (issue 31: every behaviour cites its source; what has none is
# listed in docs/lab.md "Guesses"). "exo" is github.com/exo-explore/exo at b5375f8cee43 unless a tag is named;
# "samples" is /work/shared/samples (shared/samples/SOURCES.md says where each came from).
SOURCES = {
    "GET /node_id": "exo src/exo/api/main.py:344 `lambda: self.node_id`: a bare JSON string",
    "GET /state, /state/<path>": "exo src/exo/api/main.py:411-427 get_state: the State model (camelCase, "
                                 "src/exo/shared/types/state.py), a path walked over model_dump(by_alias=True)",
    "404 for a path not in /state": "exo src/exo/api/main.py:424-427 (HTTPException 404, detail \"unable to find "
                                    "path '<dotted>' in state json\") through http_exception_handler :322-332 "
                                    "(ErrorResponse/ErrorInfo, src/exo/api/types/api.py:21-29)",
    "404 for an unknown route": "GUESS: FastAPI's own handler ({\"detail\": \"Not Found\"}); exo registers its "
                                "handler for fastapi.HTTPException only (main.py:16,320), the router raises "
                                "starlette's (inferred, not captured)",
    "GET /models, /v1/models, ?status=downloaded": "exo src/exo/api/main.py:357-358, 1786-1800 get_models "
                                                   "(ModelList/ModelListModel, src/exo/api/types/api.py:32-56)",
    "model cards listed": "GUESS: KNOWN_MODELS is illustrative, not exo's catalogue (src/exo/shared/models/)",
    "Server: hypercorn-h11": "exo serves with hypercorn (src/exo/api/main.py:20-23); hypercorn's h11 server "
                             "header (not captured from a Mac)",
    "Access-Control-Allow-Origin only with Origin": "exo src/exo/api/main.py:334-341 CORSMiddleware "
                                                   "(starlette adds CORS headers to cross-origin requests only)",
    "no version anywhere in the API": "exo src/exo/api/main.py (no header or field carries it; `/ollama/api/"
                                      "version` answers a constant 1.0.0, :1773-1775)",
    "peers of another version ignored": "exo src/exo/main.py:468-472 `--namespace` defaults to __version__: "
                                        "\"nodes with different namespaces will not connect\" (since 09f9ea313)",
    "peer discovery over the Thunderbolt /30s and GET /_lab/gossip": "LAB ONLY (LAB_ONLY): exo discovers and "
                                        "gossips over libp2p (v1.0.71) / zenoh (b5375f8), not HTTP",
    "RDMA edge rule": "exo src/exo/shared/types/topology.py RDMAConnection; rule (both ends rdma_ctl enabled, "
                      "both rdma_enX PORT_ACTIVE, same cable): research/macos-outputs.md section 8 (TN3205)",
    "facts gathered (networksetup, ifconfig, system_profiler -json, rdma_ctl status, sw_vers, "
    "-getnetworkserviceenabled)": "exo src/exo/utils/info_gatherer/info_gatherer.py:52,168,339, "
                                  "src/exo/shared/types/thunderbolt.py:78; cadences GUESS (exo's differ, "
                                  "info_gatherer.py:467-572)",
    "ibv_devinfo hanging = wedged RDMA": "GUESS (a lab fault; exo does not run ibv_devinfo)",
    "interfaceType wifi/ethernet/maybe_ethernet/thunderbolt": "exo src/exo/utils/info_gatherer/system_info.py:59-111,"
                                                             " src/exo/shared/types/profiling.py:69",
    "a model dir is complete": "exo src/exo/download/download_utils.py:283-306 (*.safetensors.index.json, "
                               "no .partial)",
    "models dirs from EXO_DEFAULT_MODELS_DIR / EXO_MODELS_DIRS / EXO_MODELS_READ_ONLY_DIRS, ~/.exo/models": "exo "
                               "src/exo/shared/constants.py:31-45",
    "~/.exo, EXO_HOME relative to $HOME": "exo src/exo/shared/constants.py:7-14",
    "log ~/.exo/exo_log/exo.log, loguru line format": "exo src/exo/shared/constants.py:69-70, "
                                                      "src/exo/shared/logging.py:77-79",
    "`runner ready` log line": "exo src/exo/worker/runner/runner.py:295",
    "`Runner … crashed with critical exception …`": "exo src/exo/worker/runner/bootstrap.py:94",
    "`Starting EXO` start line, module:function:line tags": "GUESS (exo logs `pid = …` first, main.py:342)",
    "JACCL messages": "samples exo__exo-issue-1390_exo_log_node2_jaccl_rtr_errno22.txt, "
                      "mlx__exo-issue-1390_jaccl_runner_log_rtr-errno22.txt; NO_PD: GUESS (no capture)",
    "RunnerFailed errorMessage `Terminated (signal=11 (…))`": "exo src/exo/worker/runner/supervisor.py:385",
    "single instance lock ~/.exo/exo.pid": "exo src/exo/shared/constants.py:76 EXO_PID_FILE",
    "node id kept in ~/.exo/node_zid": "LAB ONLY (LAB_ONLY): exo b5375f8 draws one per start",
    "DownloadCompleted.total / DownloadPending": "exo src/exo/shared/types/worker/downloads.py:26-41",
    "instances: one MlxJacclInstance over every node": "GUESS: shape from exo src/exo/shared/types/worker/"
                                                       "instances.py:20-37, its presence without a placed model is "
                                                       "the lab's; completions through it: instances.py SOURCES",
}


def _make_handler(app: ExoStandin):
    class Handler(BaseHTTPRequestHandler):
        def version_string(self) -> str:
            return "hypercorn-h11"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, code: int, payload: Any) -> None:
            body = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if self.headers.get("Origin"):  # exo's CORSMiddleware answers a cross-origin request only
                self.send_header("Access-Control-Allow-Origin", "*")
            self.end_headers()
            self.wfile.write(body)

        def _error(self, code: int, message: str, kind: str) -> None:
            self._send(code, {"error": {"message": message, "type": kind, "param": None, "code": code}})

        def do_POST(self) -> None:
            self._route("POST")

        def do_DELETE(self) -> None:
            self._route("DELETE")

        def _route(self, method: str) -> None:
            path, _, query = self.path.partition("?")
            args = dict(urllib.parse.parse_qsl(query))
            if not app.api.handle(self, method, path.rstrip("/") or "/", args):
                self._send(404, {"detail": "Not Found"})  # FastAPI's default for a route it does not have

        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            path = path.rstrip("/") or "/"
            if path == "/node_id":
                self._send(200, app.node_id)
            elif path == GOSSIP_PATH:
                if app.cfg.broken or discovery.split(app._faults):
                    self._error(503, "not ready", "Service Unavailable")
                else:
                    self._send(200, app.gossip())
            elif path == "/state" or path.startswith("/state/"):
                node: Any = app.state()
                for part in [p for p in path.split("/")[2:] if p]:
                    if isinstance(node, dict) and part in node:
                        node = node[part]
                    elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                        node = node[int(part)]
                    else:
                        dotted = path[len('/state/'):].replace("/", ".")
                        self._error(404, f"unable to find path '{dotted}' in state json", "Not Found")
                        return
                self._send(200, node)
            elif path in ("/models", "/v1/models"):
                self._send(200, app.models(downloaded_only="status=downloaded" in query))
            else:
                self._route("GET")

    return Handler


# ------------------------------------------------------------------------------------------------- main


def _read_build(build_root: Path | None) -> tuple[str | None, bool]:
    if build_root is None:
        return None, False
    version = None
    broken = False
    with contextlib.suppress(OSError):
        version = (build_root / "VERSION").read_text().strip() or None
    try:
        meta = json.loads((build_root / "BUILD.json").read_text())
        broken = bool(meta.get("broken"))
        version = version or meta.get("version")
    except (OSError, ValueError):
        pass
    return version, broken


def main(argv: list | None = None, *, build_root: Path | None = None) -> int:
    version, broken = _read_build(build_root)
    parser = argparse.ArgumentParser(prog="exo", description="exo stand-in for the macfleet lab")
    parser.add_argument("--api-port", type=int, default=int(os.environ.get("EXO_LAB_API_PORT", API_PORT)))
    parser.add_argument("--bind", default=os.environ.get("EXO_LAB_BIND", "0.0.0.0"),
                        help="comma-separated listen addresses (lab only; exo binds 0.0.0.0)")
    parser.add_argument("--peer-port", type=int, default=None, help="port probed on peers (default: --api-port)")
    parser.add_argument("--refresh", type=float, default=float(os.environ.get("EXO_LAB_REFRESH_S", 1.0)))
    parser.add_argument("--exo-version", default=None, help="override the build's VERSION")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument("-v", "--verbose", action="count", default=0)
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args(argv)
    version = args.exo_version or version or "0.0.0-lab"
    if args.version:
        print(version)
        return 0

    cfg = Config(version=version, broken=broken, bind=args.bind, api_port=args.api_port,
                 peer_port=args.peer_port, refresh_s=args.refresh)
    cfg.exo_home.mkdir(parents=True, exist_ok=True)
    # single instance, like exo's ~/.exo/exo.pid lock
    import fcntl

    pid_fh = open(cfg.pid_file, "a+")  # noqa: SIM115 - held for the process lifetime
    try:
        fcntl.flock(pid_fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        print(f"exo is already running (lock held on {cfg.pid_file})", file=sys.stderr)
        return 1
    pid_fh.seek(0)
    pid_fh.truncate()
    pid_fh.write(f"{os.getpid()}\n")
    pid_fh.flush()

    app = ExoStandin(cfg)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    try:
        app.start()
    except OSError as exc:
        app.log.error("exo.api.main:run:1942", f"cannot listen on {cfg.bind}:{cfg.api_port}: {exc}")
        print(f"exo: cannot listen on {cfg.bind}:{cfg.api_port}: {exc}", file=sys.stderr)
        return 1
    done.wait()
    app.stop()
    with contextlib.suppress(OSError):
        pid_fh.truncate(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
