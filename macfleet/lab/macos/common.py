"""State access shared by the stand-ins (stdlib only).

A node directory `<state>/nodes/<node>/` holds:
  persist.json  settings that survive a reboot (network services, RDMA, pmset, FileVault, host names, OS)
  boot.json     this boot only (power state, boot id and time, domain UUIDs, service UUIDs, wired limit)
  lock          flock'ed around every read-modify-write of the two files above
  request       a power request for the supervisor ("reboot" / "halt"), written by shutdown/reboot
The lab directory `<state>/` holds lab.json (nodes, models, cables, addresses), the plan all nodes share.
Each JSON state file has a marshal twin (`.<name>.marshal`, see write_json) that a stand-in reads instead, so
that a call need not import json (json's decoder pulls in re and enum: a third of a simple call's CPU).
"""

from __future__ import annotations

import fcntl
import marshal
import os
import sys

# Stand-ins run many times a second (Ansible, exo, doctor): a call should cost little more than the interpreter's
# start, so import only builtin modules at import time (no json, re, contextlib, pathlib, subprocess or tempfile);
# a function that needs more imports it where it needs it.
# Sources (issue 31): lab plumbing, no behaviour of a Mac of its own; each command's sources are above its handler.
IP = "/usr/sbin/ip" if os.path.exists("/usr/sbin/ip") else "/sbin/ip"
# chip -> (cores, performance cores, efficiency cores), for sysctl and system_profiler
CORES = {"Apple M3 Ultra": (32, 24, 8), "Apple M4 Max": (16, 12, 4), "Apple M4 Pro": (14, 10, 4)}


class Path(str):
    """A tiny str-based path (pathlib costs ~40 ms of imports per stand-in call)."""

    def __new__(cls, value: object) -> Path:
        return super().__new__(cls, os.fspath(value))

    def __truediv__(self, other: str) -> Path:
        return Path(os.path.join(self, other))

    def __fspath__(self) -> str:
        return str.__str__(self)

    @property
    def name(self) -> str:
        return os.path.basename(self)

    @property
    def parent(self) -> Path:
        return Path(os.path.dirname(self))

    def exists(self) -> bool:
        return os.path.exists(self)


def _twin(path: str) -> str:
    """The marshal twin of a JSON state file: `.<name>.marshal` next to it."""
    head, name = os.path.split(path)
    return os.path.join(head, f".{name}.marshal")


def _write_atomic(path: str, payload: bytes) -> None:
    tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:  # noqa: SIM105  (not contextlib.suppress: see the imports above)
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json(path, data: object) -> None:
    """Atomic write (temp file + rename), readable by the node's admin user; then its marshal twin: the JSON
    text's bytes and the value read back from them, so a reader that finds the same bytes in the JSON file
    gets exactly what json would give it (a file written by anything else, or a twin left stale, does not
    match and is read as JSON)."""
    import json

    path = os.fspath(path)
    raw = json.dumps(data, indent=1).encode()
    _write_atomic(path, raw)
    try:  # noqa: SIM105
        _write_atomic(_twin(path), marshal.dumps((raw, json.loads(raw)), 4))
    except OSError:
        pass  # no twin: readers fall back to the JSON


def read_json(path, default: object = None) -> object:
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return default
    try:
        with open(_twin(path), "rb") as f:
            twin_raw, value = marshal.load(f)
        if twin_raw == raw:
            return value
    except (OSError, EOFError, ValueError, TypeError):
        pass
    import json

    return json.loads(raw)


class Lab:
    def __init__(self, state_dir: Path):
        self.dir = Path(state_dir)
        self.spec = read_json(self.dir / "lab.json")
        if self.spec is None:
            raise SystemExit(f"macfleet lab: no lab at {self.dir}")

    @property
    def nodes(self) -> dict:
        return self.spec["nodes"]

    def node(self, name: str) -> Node:
        return Node(self, name)

    def cable_at(self, node: str, receptacle: int) -> tuple[dict, dict] | None:
        """The cable plugged into (node, receptacle): (cable, far end) or None."""
        for cable in self.spec["cables"]:
            a, b = cable["a"], cable["b"]
            if a["node"] == node and a["receptacle"] == receptacle:
                return cable, b
            if b["node"] == node and b["receptacle"] == receptacle:
                return cable, a
        return None


class Node:
    def __init__(self, lab: Lab, name: str):
        self.lab = lab
        self.name = name
        self.dir = lab.dir / "nodes" / name
        self.info = lab.nodes[name]
        self.model = lab.spec["models"][self.info["model"]]

    # -- state files ---------------------------------------------------------------------------
    @property
    def persist(self) -> dict:
        return read_json(self.dir / "persist.json", {})

    @property
    def boot(self) -> dict:
        return read_json(self.dir / "boot.json", {})

    @property
    def jobs(self) -> dict:
        """launchd jobs loaded this boot (in run/, which the admin user owns: gui/<uid> jobs are theirs)."""
        return read_json(self.dir / "run" / "jobs.json", {})

    def locked(self, lock: str = "lock") -> _Flock:
        return _Flock(self.dir / lock)

    def update(self, which: str, fn) -> dict:
        """Read-modify-write persist.json, boot.json or jobs (run/jobs.json) under a lock; fn mutates it."""
        lock, path = ("run/lock", self.dir / "run" / "jobs.json") if which == "jobs" else (
            "lock", self.dir / f"{which}.json")
        with self.locked(lock):
            data = read_json(path, {})
            fn(data)
            write_json(path, data)
            return data

    # -- hardware ------------------------------------------------------------------------------
    @property
    def ports(self) -> list[dict]:
        return self.model["ports"]

    def port(self, receptacle: int) -> dict | None:
        for p in self.ports:
            if p["receptacle"] == receptacle:
                return p
        return None

    def port_by_device(self, device: str) -> dict | None:
        for p in self.ports:
            if p["device"] == device:
                return p
        return None

    def mac(self, receptacle: int) -> str:
        """Locally administered MAC of Thunderbolt N; ports step by 4 as on Apple silicon (…:80, …:84)."""
        return f"{self.info['mac_base']}:{0x80 + (receptacle - 1) * 4:02x}"

    def uid(self, receptacle: int) -> str:
        return f"0x05AC{self.info['uid_base']}{receptacle - 1:X}"

    def peer(self, receptacle: int) -> tuple[dict, Node, dict] | None:
        """(cable, peer node, peer end) for the cable in this receptacle, or None."""
        hit = self.lab.cable_at(self.name, receptacle)
        if hit is None:
            return None
        cable, far = hit
        if far["node"] not in self.lab.nodes:
            return None
        return cable, self.lab.node(far["node"]), far

    @property
    def rdma_enabled(self) -> bool:
        return bool(self.persist.get("rdma"))


class _Flock:
    """`with node.locked():` an exclusive flock on one of the node's lock files (a class, not a
    contextlib.contextmanager: contextlib's import costs as much as the rest of a call)."""

    def __init__(self, path: str):
        self.path = path

    def __enter__(self) -> None:
        self.file = open(self.path, "a")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX)
        except BaseException:
            self.file.close()
            raise

    def __exit__(self, *exc) -> None:
        try:
            fcntl.flock(self.file, fcntl.LOCK_UN)
        finally:
            self.file.close()


def is_root() -> bool:
    return os.geteuid() == 0


def run(argv: list[str], *, input: str | None = None, check: bool = False):
    import subprocess

    return subprocess.run(argv, input=input, capture_output=True, text=True, check=check)


def ip_json(*args: str) -> list:
    import json

    out = run([IP, "-j", *args]).stdout
    try:
        return json.loads(out) if out.strip() else []
    except json.JSONDecodeError:
        return []


def ip_batch(lines: list[str]) -> None:
    if lines:
        run([IP, "-force", "-batch", "-"], input="\n".join(lines) + "\n")


class Links:
    """Live link state of the current network namespace: flags, carrier, MAC, MTU and master from /sys
    (cheap), IPv4 addresses from one rtnetlink dump (only when asked)."""

    def __init__(self):
        self._addrs: dict[str, list[tuple[str, int]]] | None = None

    @staticmethod
    def _read(dev: str, attr: str) -> str | None:
        try:
            with open(f"/sys/class/net/{dev}/{attr}") as f:
                return f.read().strip()
        except OSError:
            return None

    def exists(self, dev: str) -> bool:
        return os.path.exists(f"/sys/class/net/{dev}")

    def up(self, dev: str) -> bool:
        flags = self._read(dev, "flags")
        return flags is not None and bool(int(flags, 16) & 0x1)

    def carrier(self, dev: str) -> bool:
        return self.up(dev) and self._read(dev, "carrier") == "1"

    def ipv4(self, dev: str) -> list[tuple[str, int]]:
        if self._addrs is None:
            from .rtnl import ipv4_addresses

            self._addrs = ipv4_addresses()
        return list(self._addrs.get(dev, ()))

    def master(self, dev: str) -> str | None:
        try:
            return os.path.basename(os.readlink(f"/sys/class/net/{dev}/master"))
        except OSError:
            return None

    def mtu(self, dev: str) -> int:
        return int(self._read(dev, "mtu") or 1500)

    def mac(self, dev: str) -> str | None:
        return self._read(dev, "address")


def prefix_to_mask(prefix: int) -> str:
    bits = (0xFFFFFFFF << (32 - prefix)) & 0xFFFFFFFF if prefix else 0
    return ".".join(str((bits >> s) & 0xFF) for s in (24, 16, 8, 0))


def broadcast(ip: str, prefix: int) -> str:
    """The broadcast address of ip/prefix (what ipaddress.IPv4Network(..., strict=False) says, without its
    import)."""
    a, b, c, d = (int(x) for x in ip.split("."))
    bits = ((a << 24) | (b << 16) | (c << 8) | d) | ((1 << (32 - prefix)) - 1)
    return ".".join(str((bits >> s) & 0xFF) for s in (24, 16, 8, 0))


def mask_to_prefix(mask: str) -> int:
    if mask.startswith("0x"):
        bits = int(mask, 16)
    else:
        parts = [int(p) for p in mask.split(".")]
        if len(parts) != 4 or any(not 0 <= p <= 255 for p in parts):
            raise ValueError(mask)
        bits = (parts[0] << 24) | (parts[1] << 16) | (parts[2] << 8) | parts[3]
    prefix = bin(bits).count("1")
    if bits != ((0xFFFFFFFF << (32 - prefix)) & 0xFFFFFFFF if prefix else 0):
        raise ValueError(mask)
    return prefix


def eui64_fe80(mac: str) -> str:
    b = [int(x, 16) for x in mac.split(":")]
    b[0] ^= 0x02
    groups = [(b[0] << 8) | b[1], (b[2] << 8) | 0xFF, 0xFE00 | b[3], (b[4] << 8) | b[5]]
    return "fe80::" + ":".join(f"{g:x}" for g in groups)


def sha256(data: bytes) -> bytes:
    try:
        from _sha256 import sha256 as new  # builtin in Debian's python3.11; hashlib would load OpenSSL (~5 ms)
    except ImportError:
        from hashlib import sha256 as new
    return new(data).digest()


def secured_fe80(seed: str) -> str:
    h = sha256(seed.encode())
    groups = [int.from_bytes(h[i : i + 2], "big") for i in range(0, 8, 2)]
    return "fe80::" + ":".join(f"{g:x}" for g in groups)


def err(msg: str) -> None:
    sys.stderr.write(msg if msg.endswith("\n") else msg + "\n")
