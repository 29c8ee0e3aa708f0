"""The inventory as typed, frozen models, and the catalogue of Mac models macfleet knows.

The inventory is what the operator says the fleet is; nothing here is collected from a node.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

from macfleet.constants import (
    EXO_INSTALL_ROOT,
    EXO_MODELS_DIR,
    EXO_PORT,
    IP_POOL,
    LLAMA_RPC_PORT,
    PMSET_DEFAULTS,
    WIRED_RESERVE_MB,
)
from macfleet.inventory.limits import MAX_MESH_NODES as MAX_MESH_NODES  # one place, light enough for --help

# ---------------------------------------------------------------------------------------------
# Mac models. Facts about the hardware, used to plan cabling and by the lab to stand in for it.
# Interface names (enX) are listed here only so the lab can name its ports as macOS does; the
# core always reads enX from `networksetup -listallhardwareports`, never from this table.
# ---------------------------------------------------------------------------------------------


class ThunderboltPortSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    receptacle: int
    device: str  # BSD name macOS gives "Thunderbolt <receptacle>" on this model
    max_speed_gbps: int  # the idle port's "Up to N Gb/s"
    rdma_capable: bool
    where: str  # how an operator finds it on the back or front of the box


class MacModelSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    slug: str
    model_identifier: str
    marketing_name: str
    chip: str
    memory_bytes: int
    thunderbolt_ports: tuple[ThunderboltPortSpec, ...]

    @property
    def rdma_ports(self) -> tuple[ThunderboltPortSpec, ...]:
        return tuple(p for p in self.thunderbolt_ports if p.rdma_capable)

    @property
    def max_full_mesh_nodes(self) -> int:
        """A full mesh of N Macs needs N-1 RDMA-capable ports on each."""
        return len(self.rdma_ports) + 1


def _ports(devices: list[str], *, speed: int, not_rdma: set[int], where: list[str]) -> tuple[ThunderboltPortSpec, ...]:
    return tuple(
        ThunderboltPortSpec(
            receptacle=i + 1, device=dev, max_speed_gbps=speed, rdma_capable=(i + 1) not in not_rdma, where=where[i]
        )
        for i, dev in enumerate(devices)
    )


# Sources: shared/research/macos-outputs.md §4 (en numbering per model: M3 Ultra en2-en7, M4 Max en2-en5,
# Mac mini M4 Pro en2-en4) and exo.md §3 (the Mac Studio TB5 port next to Ethernet, en2, cannot do RDMA;
# exo README and exo#1543; 6 M3 Ultras on 5 ports each is the largest full mesh, exo#1293/#1014).
MAC_MODELS: dict[str, MacModelSpec] = {
    m.slug: m
    for m in (
        MacModelSpec(
            slug="mac-studio-m3-ultra",
            model_identifier="Mac15,14",
            marketing_name="Mac Studio",
            chip="Apple M3 Ultra",
            memory_bytes=512 * 1024**3,
            thunderbolt_ports=_ports(
                ["en2", "en3", "en4", "en5", "en6", "en7"],
                speed=120,
                not_rdma={1},
                where=[
                    "rear, next to Ethernet",
                    "rear, second from Ethernet",
                    "rear, third from Ethernet",
                    "rear, far from Ethernet",
                    "front, left",
                    "front, right",
                ],
            ),
        ),
        MacModelSpec(
            slug="mac-studio-m4-max",
            model_identifier="Mac16,9",
            marketing_name="Mac Studio",
            chip="Apple M4 Max",
            memory_bytes=128 * 1024**3,
            thunderbolt_ports=_ports(
                ["en2", "en3", "en4", "en5"],
                speed=120,
                not_rdma={1},
                where=["rear, next to Ethernet", "rear, second", "rear, third", "rear, far from Ethernet"],
            ),
        ),
        MacModelSpec(
            slug="mac-mini-m4-pro",
            model_identifier="Mac16,11",
            marketing_name="Mac mini",
            chip="Apple M4 Pro",
            memory_bytes=64 * 1024**3,
            thunderbolt_ports=_ports(
                ["en2", "en3", "en4"],
                speed=120,
                not_rdma=set(),
                where=["rear, left", "rear, middle", "rear, right"],
            ),
        ),
        # Thunderbolt 4 only (idle "Up to 40 Gb/s"): it can never do RDMA over Thunderbolt. Its rear ports are
        # named Thunderbolt 1, 2 and 4 on en2, en3, en4 (a real capture: tests/fixtures/captures/hardware-ports/
        # macos__networksetup_listallhardwareports_macmini_m4_1.txt).
        MacModelSpec(
            slug="mac-mini-m4",
            model_identifier="Mac16,10",
            marketing_name="Mac mini",
            chip="Apple M4",
            memory_bytes=16 * 1024**3,
            thunderbolt_ports=tuple(
                ThunderboltPortSpec(receptacle=r, device=d, max_speed_gbps=40, rdma_capable=False, where=w)
                for r, d, w in ((1, "en2", "rear, left"), (2, "en3", "rear, middle"), (4, "en4", "rear, right"))
            ),
        ),
    )
}
MODEL_BY_IDENTIFIER: dict[str, MacModelSpec] = {m.model_identifier: m for m in MAC_MODELS.values()}


def model_spec(name: str | None) -> MacModelSpec | None:
    """Look a model up by slug (`mac-studio-m3-ultra`) or identifier (`Mac15,14`)."""
    if name is None:
        return None
    return MAC_MODELS.get(name) or MODEL_BY_IDENTIFIER.get(name)


def known_models() -> str:
    """The models macfleet knows, as every message that names them lists them."""
    return ", ".join(f"{m.model_identifier} ({m.slug})" for m in MAC_MODELS.values())


# ---------------------------------------------------------------------------------------------
# Settings (group_vars). Every block forbids unknown keys, so a typo is caught, not ignored.
# ---------------------------------------------------------------------------------------------


# Sane upper bounds for numbers read from group_vars: a value past them is a typo or an attack, never a setting.
HOUR_S = 3600.0
DAY_S = 24 * HOUR_S
MAX_MEMORY_MB = 1 << 24  # 16 TiB


class _Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


DEFAULT_IP_POOL = IP_POOL  # macfleet/constants.py
# Subnets reserved per mesh: 32 covers the 28 links of an 8-node full mesh, so a mesh can grow
# without moving another mesh's addresses.
SUBNETS_PER_MESH = 32


# Link addresses must be private (RFC 1918): anything else is someone's public range, loopback, link-local
# (macOS's own Thunderbolt Bridge uses 169.254/16), multicast, CGNAT or a benchmark/documentation range.
PRIVATE_RANGES = tuple(ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))


class IpPlanSettings(_Settings):
    pool: ipaddress.IPv4Network = Field(default=ipaddress.IPv4Network(DEFAULT_IP_POOL))
    prefix: Literal[30, 31] = 30
    mtu: int = Field(default=1500, ge=1280, le=16000)

    @field_validator("pool")
    @classmethod
    def _private(cls, pool: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
        if not any(pool.subnet_of(r) for r in PRIVATE_RANGES):
            raise ValueError("a private range inside 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16 (RFC 1918)")
        return pool


# exo's own build from a source checkout (its README: the dashboard with npm, then `uv sync`), run by
# `rollout exo --build-on NODE` inside the release directory on a builder Mac. A virtual environment is not
# relocatable (absolute paths in bin/ scripts and pyvenv.cfg `home`), so the interpreter is a uv-managed Python
# installed inside the release (UV_PYTHON_INSTALL_DIR) and the environment lives there too
# (UV_PROJECT_ENVIRONMENT); node_modules is only needed to build the dashboard and is left out of the release.
# $MACFLEET_UV_EXTRAS: the `--extra` options the builder finds the checkout calls for (act/build.py reads its
# pyproject.toml there: `--extra mlx` where MLX is an optional extra, as since exo 4466cd532; empty before).
DEFAULT_EXO_BUILD_COMMAND = (
    'set -eu; '
    'export UV_PYTHON_INSTALL_DIR="$PWD/.python" UV_PROJECT_ENVIRONMENT="$PWD/.venv" UV_LINK_MODE=copy; '
    'cd dashboard; if [ -f package-lock.json ]; then npm ci; else npm install; fi; npm run build; '
    'rm -rf node_modules; cd ..; '
    'uv sync --frozen --no-dev ${MACFLEET_UV_EXTRAS:-} --compile-bytecode --python-preference only-managed; '
    'mkdir -p bin; ln -sfn ../.venv/bin/exo bin/exo'
)
MAX_BUILD_COMMAND = 8192


class ExoBuildSettings(_Settings):
    """`rollout exo` building a source tree on a builder Mac of the mesh (`--build-on` overrides `node`)."""

    node: str | None = None  # None: the source is already built
    command: str = DEFAULT_EXO_BUILD_COMMAND  # one `sh -c` word, run in the release directory
    timeout_s: float = Field(default=2 * HOUR_S, gt=0, le=DAY_S, allow_inf_nan=False)

    @field_validator("command")
    @classmethod
    def _one_shell_word(cls, value: str) -> str:
        if not value.strip() or len(value) > MAX_BUILD_COMMAND:
            raise ValueError(f"a shell command of 1 to {MAX_BUILD_COMMAND} characters")
        if any(ord(c) < 32 and c not in "\n\t" for c in value) or "\x7f" in value:
            raise ValueError("a shell command without control characters (newlines and tabs allowed)")
        return value


def spotlight_skips(path: str) -> bool:
    """Whether Spotlight leaves `path` alone by its name: a hidden folder on its way (a name starting with "."), or
    a folder named *.noindex (playbooks/roles/spotlight: The X Lab's Spotlight FAQ; Apple TA24975). mdutil cannot
    switch indexing off for a folder, only for a volume."""
    parts = [p for p in path.split("/") if p not in ("", "~")]
    return any(p.startswith(".") or p.endswith(".noindex") for p in parts)


class ExoSettings(_Settings):
    source: str | None = None  # a directory with an exo build, or a git URL
    version: str | None = None
    install_root: str = EXO_INSTALL_ROOT
    models_dir: str = EXO_MODELS_DIR
    port: int = Field(default=EXO_PORT, ge=1, le=65535)
    env: dict[str, str] = Field(default_factory=dict)
    build: ExoBuildSettings = Field(default_factory=ExoBuildSettings)
    # Client networks let through the packet filter to exo's API port (its dashboard too): the people's laptops.
    # None by default: only the mesh and the controller reach it (playbooks/roles/pf, through bootstrap's vars).
    clients: list[str] = Field(default_factory=list, max_length=64)

    @field_validator("clients")
    @classmethod
    def _clients(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                if "%" in item:  # a scoped address (fe80::1%en0): pf's tables take none
                    raise ValueError
                net = ipaddress.ip_network(item, strict=True)
            except ValueError:
                raise ValueError(f"{item!r}: an IPv4 or IPv6 address or network (e.g. 192.168.1.0/24)") from None
            if net.prefixlen == 0:
                raise ValueError(f"{item!r} is everyone: exo's API has no authentication; list the client networks")
        return value

    # placing a model and loading it on every node it spans (a model of hundreds of GB takes minutes)
    place_timeout_s: float = Field(default=1800.0, gt=0, le=DAY_S, allow_inf_nan=False)

    @field_validator("models_dir")
    @classmethod
    def _models_dir(cls, value: str) -> str:
        if not (value == "~" or value.startswith(("/", "~/"))) or "/../" in f"{value}/" or any(
                ord(c) < 32 for c in value):
            raise ValueError(f"an absolute path or one under ~/ (e.g. {EXO_MODELS_DIR}), without .. or control "
                             "characters")
        if not spotlight_skips(value):
            raise ValueError(f"a path Spotlight does not index: {value} is neither inside a hidden folder nor a "
                             f"*.noindex one (Spotlight indexes folders; mdutil switches it off per volume only). "
                             f"Use e.g. {value.rstrip('/')}.noindex, or keep {EXO_MODELS_DIR}")
        return value


# A model as exo names it: a Hugging Face id, ORG/NAME (exo's ModelId; its files live in `<models dir>/org--name`).
MODEL_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
MODEL_ID_EXPECTED = ("a Hugging Face model id, ORG/NAME (letters, digits, . _ -), "
                     "e.g. mlx-community/Llama-3.2-1B-Instruct-4bit")
Sharding = Literal["pipeline", "tensor"]  # exo's Sharding.Pipeline / Sharding.Tensor
Transport = Literal["rdma", "ring"]  # exo's instance meta: MlxJaccl (RDMA over Thunderbolt) / MlxRing (TCP)


def is_model_id(value: str) -> bool:
    return bool(MODEL_ID_RE.match(value)) and ".." not in value


class KeepPlaced(_Settings):
    """A model that should be running on its mesh: placed again after every reboot and `rollout exo`, and
    reported by doctor while it is not."""

    sharding: Sharding = "pipeline"
    transport: Transport = "rdma"
    min_nodes: int | None = Field(default=None, ge=1, le=MAX_MESH_NODES, strict=True)  # None: as exo places it


class ModelToStage(_Settings):
    """One of `macfleet_models`: weights `rollout model` stages, and with `place`, a model kept running."""

    name: str
    source: str | None = None
    bytes: int | None = Field(default=None, ge=0, le=1 << 50)
    place: KeepPlaced | None = None  # None: staged only, never placed by macfleet on its own

    @field_validator("name")
    @classmethod
    def _model_id(cls, value: str) -> str:
        if not is_model_id(value):
            raise ValueError(MODEL_ID_EXPECTED)
        return value


class PowerSettings(_Settings):
    # pmset values for an always-on inference node (ops-anchors.md §4.2)
    pmset: dict[str, int] = Field(default_factory=lambda: dict(PMSET_DEFAULTS))
    # iogpu.wired_limit_mb: "auto" = total memory less a reserve, an integer = that many MB, 0 = macOS default
    wired_limit_mb: Annotated[int, Field(ge=0, le=MAX_MEMORY_MB)] | Literal["auto"] = "auto"
    wired_reserve_mb: int = Field(default=WIRED_RESERVE_MB, ge=0, le=MAX_MEMORY_MB)


class ProbeSettings(_Settings):
    interval_s: float = Field(default=30.0, gt=0, le=DAY_S, allow_inf_nan=False)
    command_timeout_s: float = Field(default=20.0, gt=0, le=HOUR_S, allow_inf_nan=False)
    gather_deadline_s: float = Field(default=60.0, gt=0, le=HOUR_S, allow_inf_nan=False)
    # doctor: a node's clock further than this from the controller's (beyond the round trip) is a warning
    clock_skew_max_s: float = Field(default=2.0, gt=0, le=DAY_S, allow_inf_nan=False)
    # doctor: less free space than this on the models volume is a warning (GB = 10^9 bytes)
    min_free_disk_gb: float = Field(default=20.0, ge=0, le=1_000_000, allow_inf_nan=False)
    # commands one pass runs at once on a node (collect.batch); a Mac's cores take 8 with room to spare
    lanes: int = Field(default=8, ge=1, le=16)
    # doctor: how old a node's cached `softwareupdate --list` answer may be before a pass asks Apple again
    # (act/probecache.py; 0 = every pass asks)
    updates_max_age_s: float = Field(default=6 * 3600.0, ge=0, le=7 * DAY_S, allow_inf_nan=False)
    # inference as health: a completion through a placed model that gives no token within this is a failure
    completion_timeout_s: float = Field(default=60.0, gt=0, le=HOUR_S, allow_inf_nan=False)


class BenchSettings(_Settings):
    """`macfleet bench links`: a link measured below `min_fraction` of its saved baseline is named (exit 1).
    `macfleet bench exo` and doctor's inference check: a model answering below `inference_min_fraction` of its
    saved tokens/s (prompt or generation) is named."""

    min_fraction: float = Field(default=0.8, gt=0, le=1, allow_inf_nan=False)
    inference_min_fraction: float = Field(default=0.6, gt=0, le=1, allow_inf_nan=False)
    iperf3_port: int = Field(default=5201, ge=1024, le=65535)  # iperf3's own default


class LlamaSettings(_Settings):
    """llama.cpp's RPC mode: the port every worker's rpc-server listens on (its own default); `enabled`: the
    mesh runs rpc-server (`macfleet rollout llama-rpc` puts it there and doctor's llama-rpc check watches it);
    `install_root`: where its releases live, relative to the admin's home unless absolute (no sudo needed)."""

    rpc_port: int = Field(default=LLAMA_RPC_PORT, ge=1024, le=65535)
    enabled: bool = False
    install_root: str = Field(default="llama.cpp", pattern=r"^[A-Za-z0-9_./-]{1,200}$")


_HHMM = r"^([01]\d|2[0-3]):[0-5]\d$"
Rung = Literal["restart-exo", "reboot"]


class MaintenanceWindow(_Settings):
    """When `watch` may reboot a mesh: these days, from start to end (HH:MM, end may be past midnight)."""

    days: list[Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]] = Field(
        default_factory=lambda: ["mon", "tue", "wed", "thu", "fri", "sat", "sun"], min_length=1
    )
    start: str = Field(default="00:00", pattern=_HHMM)
    end: str = Field(default="23:59", pattern=_HHMM)
    timezone: str = "UTC"

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (an IANA name such as Europe/Paris)") from None
        return value


def _default_ladder() -> dict[str, list[Rung]]:
    # A wedged RDMA stack is not released by restarting exo: straight to the mesh reboot.
    return {"rdma": ["reboot"], "exo-running": ["restart-exo"], "exo-runners": ["restart-exo", "reboot"]}


class RemediationSettings(_Settings):
    """`macfleet watch`'s policy: what it probes, when a problem counts, what it may do about it."""

    checks: list[str] = Field(default_factory=lambda: ["reachable", "rdma", "exo-running", "exo-runners"],
                              min_length=1, max_length=50)  # doctor's check codes run at every probe
    debounce: int = Field(default=3, ge=1, le=1000)  # consecutive bad probes before any action
    ladder: dict[str, list[Rung]] = Field(default_factory=_default_ladder)  # check -> rungs it may climb
    reboot_breaker_limit: int = Field(default=2, ge=0, le=1000)  # at most this many reboots per window, then stop
    reboot_breaker_window_s: float = Field(default=6 * HOUR_S, gt=0, le=30 * DAY_S, allow_inf_nan=False)
    restart_limit: int = Field(default=3, ge=0, le=1000)  # at most this many exo restarts per window, then climb
    restart_window_s: float = Field(default=HOUR_S, gt=0, le=30 * DAY_S, allow_inf_nan=False)
    settle_s: float = Field(default=60.0, ge=0, le=DAY_S, allow_inf_nan=False)  # after an action: not yet judged
    windows: list[MaintenanceWindow] = Field(default_factory=list)  # empty: reboots at any time
    webhook: str | None = Field(default=None, pattern=r"^https?://\S+$")
    pause_file: str = "watch.pause"  # relative to the inventory directory: while it exists, no action
    # storm protection (Medik8s NodeHealthCheck's minHealthy, 51 % by default): no action while fewer than this
    # share of the mesh's nodes answered the probe (a controller that lost its own network sees every node down)
    min_observed_share: float = Field(default=0.51, gt=0, le=1, allow_inf_nan=False)
    reboot_gap_s: float = Field(default=1800.0, ge=0, le=DAY_S, allow_inf_nan=False)  # between two mesh reboots
    reboot_retries: int = Field(default=1, ge=0, le=10)  # a reboot that failed is tried again this often, then page

    @field_validator("ladder")
    @classmethod
    def _rungs_once_in_order(cls, value: dict[str, list[Rung]]) -> dict[str, list[Rung]]:
        order = ["restart-exo", "reboot"]
        for check, rungs in value.items():
            if not rungs or rungs != sorted(set(rungs), key=order.index):
                raise ValueError(f"ladder.{check}: rungs must be a non-empty subset of {order}, in that order")
        return value


class RebootSettings(_Settings):
    """The coordinated mesh reboot. With FileVault on, a node comes back only through `fdesetup authrestart`
    with a FileVault user's password: read from this file (only its owner may read it), given on stdin."""

    filevault_credential_file: str | None = None  # relative to the inventory directory unless absolute
    timeout_s: float = Field(default=900.0, gt=0, le=DAY_S, allow_inf_nan=False)  # every node back within this
    lock_ttl_s: float = Field(default=HOUR_S, gt=0, le=30 * DAY_S, allow_inf_nan=False)


class SshSettings(_Settings):
    # Paths are relative to the inventory directory unless absolute.
    private_key_file: str | None = None
    known_hosts_file: str | None = "known_hosts"
    connect_timeout_s: float = Field(default=10.0, gt=0, le=600, allow_inf_nan=False)


# A macOS build number as sw_vers -buildVersion prints it: two digits (the major), the minor's letter, a number, and
# a letter for a beta or a Rapid Security Response (25C56, 25F80, 20C5061b; shared/samples macos__sw_vers_*).
MACOS_BUILD = r"^\d{2}[A-Z]\d{1,5}[a-z]?$"


class MacosSettings(_Settings):
    """The macOS build the mesh runs (`macfleet_macos`): doctor says, per node, whether it is on it or whether
    Apple offers it there; `macfleet upgrade` brings every node to it. exo and JACCL need one build on every node
    (exo's README: "even beta version numbers"). `deadline`: after this day a node not on the build is an error."""

    build: str | None = None
    deadline: dt.date | None = None

    @field_validator("build", mode="before")
    @classmethod
    def _a_build(cls, value: object) -> object:
        if value is not None and not (isinstance(value, str) and re.fullmatch(MACOS_BUILD, value)):
            raise ValueError(f"{value!r} is not a macOS build: give it as `sw_vers -buildVersion` prints it, e.g. "
                             "25C56 (not the version, 26.2)")
        return value


class Settings(_Settings):
    """Everything under `macfleet_*` in group_vars, after all → mesh overriding (Ansible's replace rule)."""

    ipplan: IpPlanSettings = Field(default_factory=IpPlanSettings)
    exo: ExoSettings = Field(default_factory=ExoSettings)
    models: list[ModelToStage] = Field(default_factory=list)
    power: PowerSettings = Field(default_factory=PowerSettings)
    probes: ProbeSettings = Field(default_factory=ProbeSettings)
    remediation: RemediationSettings = Field(default_factory=RemediationSettings)
    reboot: RebootSettings = Field(default_factory=RebootSettings)
    ssh: SshSettings = Field(default_factory=SshSettings)
    bench: BenchSettings = Field(default_factory=BenchSettings)
    llama: LlamaSettings = Field(default_factory=LlamaSettings)
    macos: MacosSettings = Field(default_factory=MacosSettings)

    @field_validator("models")
    @classmethod
    def _each_model_once(cls, value: list[ModelToStage]) -> list[ModelToStage]:
        names = [m.name.lower() for m in value]  # macOS's disk is case-insensitive: org/M is org/m's directory
        twice = sorted({m.name for m in value if names.count(m.name.lower()) > 1})
        if twice:
            raise ValueError(f"each model once: {', '.join(twice)} is listed more than once")
        return value

    @property
    def kept_placed(self) -> list[ModelToStage]:
        """The declared models that should be running, in the inventory's order."""
        return [m for m in self.models if m.place is not None]


SETTINGS_KEYS = {f"macfleet_{name}": name for name in Settings.model_fields}

# ---------------------------------------------------------------------------------------------
# Fleet, meshes, nodes
# ---------------------------------------------------------------------------------------------


class Node(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    mesh: str
    address: str  # ansible_host
    user: str | None = None  # ansible_user
    port: int | None = None  # ansible_port; None = what ssh would use (~/.ssh/config, else 22)
    # How Ansible logs in, read so macfleet's own connections log in the same way (collect/ssh.py):
    key_file: str | None = None  # ansible_ssh_private_key_file (or ansible_private_key_file), as written
    ssh_common_args: str | None = None  # ansible_ssh_common_args, as written
    ssh_extra_args: str | None = None  # ansible_ssh_extra_args, as written
    model: str | None = None  # macfleet_model: a model identifier such as "Mac15,14", or a catalogue slug
    port_labels: dict[int, str] = Field(default_factory=dict)  # macfleet_port_labels: receptacle -> label

    @property
    def model_spec(self) -> MacModelSpec | None:
        return model_spec(self.model)


class Mesh(BaseModel):
    """Macs cabled every-to-every over Thunderbolt; one Ansible group under `macfleet`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    nodes: tuple[Node, ...]
    settings: Settings

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """Every pair the full mesh needs, in inventory order (the order IP planning keys on)."""
        names = self.node_names
        return [(names[i], names[j]) for j in range(len(names)) for i in range(j)]


class Fleet(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    root: Path
    meshes: tuple[Mesh, ...]
    settings: Settings  # the `all` group's
    # What is allowed but deserves a word (an ssh option that runs a local command): errors.Problem items.
    warnings: tuple[Any, ...] = Field(default=(), exclude=True)

    @property
    def nodes(self) -> tuple[Node, ...]:
        return tuple(n for m in self.meshes for n in m.nodes)

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def mesh(self, name: str) -> Mesh:
        for m in self.meshes:
            if m.name == name:
                return m
        raise KeyError(name)

    def path(self, relative: str | None) -> Path | None:
        """A settings path resolved against the inventory directory."""
        if relative is None:
            return None
        p = Path(relative).expanduser()
        return p if p.is_absolute() else self.root / p
