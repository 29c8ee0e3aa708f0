"""RDMA over Thunderbolt: `ibv_devices`, `ibv_devinfo` (plain and `-v`), `rdma_ctl status`, `nvram rdma-enable`.
Layouts: shared/research/macos-outputs.md §8 and research/mlx.md."""

from __future__ import annotations

import ipaddress
import re

from pydantic import Field

from macfleet.facts._common import Facts, fail, guarded, is_elision, lines_for, nonblank

# ------------------------------------------------------------------------------------------ ibv_devices


class IbvDevice(Facts):
    name: str  # "rdma_en2"
    guid: str  # node GUID as printed (may be redacted, e.g. "9016aXXX")


class IbvDevicesFacts(Facts):
    """Devices in printed (kernel) order. Empty with RDMA disabled, and on TB4 Macs even when enabled."""

    devices: list[IbvDevice]


_IBV_HEADER = re.compile(r"^\s*device\s+node GUID\s*$")
_IBV_RULE = re.compile(r"^\s*-+\s+-+\s*$")


@guarded("ibv-devices")
def parse_ibv_devices(text: str) -> IbvDevicesFacts:
    kind = "ibv-devices"
    lines = nonblank(lines_for(kind, text))
    if not lines or not _IBV_HEADER.match(lines[0][1]):
        first = lines[0] if lines else (1, "")
        raise fail(kind, "the header 'device  node GUID'", line=first[0], found=first[1].strip())
    devices: list[IbvDevice] = []
    for n, raw in lines[1:]:
        if _IBV_RULE.match(raw) or is_elision(raw):
            continue
        parts = raw.split()
        if len(parts) == 2:
            devices.append(IbvDevice(name=parts[0], guid=parts[1]))
        elif (n, raw) == lines[-1] and len(parts) == 1:
            continue  # a row cut off after the device name
        else:
            raise fail(kind, "'<device> <node GUID>' rows", line=n, found=raw.strip())
    return IbvDevicesFacts(devices=devices)


# ------------------------------------------------------------------------------------------ ibv_devinfo


class Gid(Facts):
    index: int
    gid: str


class IbvDeviceInfo(Facts):
    """One `hca_id:` block (macOS RDMA devices have one port). Fields not printed are None: plain
    `ibv_devinfo` prints no GID table, so `has_ipv4_gid` is None there (unknown), not False."""

    name: str
    transport: str | None = None
    node_guid: str | None = None
    phys_port_cnt: int | None = None
    port: int | None = None
    state: str | None = None  # "PORT_ACTIVE", "PORT_DOWN"...
    state_code: int | None = None
    max_mtu: int | None = None
    active_mtu: int | None = None
    link_layer: str | None = None
    active_width: str | None = None
    active_speed: str | None = None
    gids: list[str] = Field(default_factory=list)  # in table order
    gid_table: list[Gid] = Field(default_factory=list)
    has_ipv4_gid: bool | None = None  # a ::ffff:a.b.c.d entry; None when no GID table was printed
    ipv4_gid_address: str | None = None  # the a.b.c.d of the first IPv4-mapped GID
    ipv4_gid_index: int | None = None  # JACCL uses index 1 (mlx.md)
    # The device's limits, printed by `-v` only (None when not printed: no public capture of a Mac's shows
    # them yet; reported as 11 protection domains and queue pairs, 100 memory regions: macos-outputs.md §8)
    max_pd: int | None = None
    max_qp: int | None = None
    max_mr: int | None = None


class IbvDevinfoFacts(Facts):
    devices: list[IbvDeviceInfo]
    verbose: bool  # a GID table was seen (`ibv_devinfo -v`)


_LIMIT_KEYS = ("pd", "qp", "mr")  # the device limits kept (the `max_*` lines `-v` prints)
_DEVINFO_KEYS = (
    "hca_id", "transport", "node_guid", "sys_image_guid", "vendor_id", "vendor_part_id", "hw_ver", "fw_ver",
    "phys_port_cnt", "port", "state", "max_mtu", "active_mtu", "sm_lid", "port_lid", "port_lmc", "link_layer",
    "active_width", "active_speed", "phys_state", "GID", *(f"max_{k}" for k in _LIMIT_KEYS),
)
# Copies that lost their line breaks run several "key: value" pairs together: split them apart again.
_JOINED = re.compile(r"(?<=\S)\s+(?=(?:" + "|".join(_DEVINFO_KEYS) + r")(?:\[\s*\d+\])?:(?:\s|$))")
_KV = re.compile(r"^(?P<key>[A-Za-z_]+)(?:\[\s*(?P<idx>\d+)\])?:\s*(?P<value>.*?)\s*$")
_VALUE_CODE = re.compile(r"^(?P<v>\S+)(?:\s+\((?P<code>\d+)\))?")


def _int(value: str) -> int | None:
    m = _VALUE_CODE.match(value)
    if not m:
        return None
    try:
        return int(m.group("v"), 0)
    except ValueError:
        return None


def _ipv4_of(gid: str) -> str | None:
    try:
        ip = ipaddress.IPv6Address(gid)
    except ValueError:
        return None
    return str(ip.ipv4_mapped) if ip.ipv4_mapped is not None else None


@guarded("ibv-devinfo")
def parse_ibv_devinfo(text: str) -> IbvDevinfoFacts:
    kind = "ibv-devinfo"
    split: list[tuple[int, str]] = []
    for n, raw in nonblank(lines_for(kind, text)):
        split.extend((n, part) for part in _JOINED.split(raw.strip()))
    blocks: list[dict] = []
    cur: dict | None = None
    pending_key: str | None = None
    for n, t in split:
        t = t.strip()
        if is_elision(t):
            continue
        m = _KV.match(t)
        if not m:
            if cur is not None and pending_key == "node_guid":  # value pushed onto the next line
                cur["node_guid"] = t.split()[0]
                pending_key = None
                continue
            raise fail(kind, "'hca_id: <device>' blocks of 'key: value' lines", line=n, found=t)
        key, value = m.group("key"), m.group("value")
        value = value.removesuffix("...").strip()
        pending_key = key if not value else None
        if key == "hca_id":
            if not value:
                raise fail(kind, "a device name after 'hca_id:'", line=n, found=t)
            cur = {"name": value.split()[0], "gid_table": []}
            blocks.append(cur)
            continue
        if cur is None:
            raise fail(kind, "'hca_id: <device>' first", line=n, found=t)
        if key == "GID":
            if m.group("idx") is not None and value:
                cur["gid_table"].append(Gid(index=int(m.group("idx")), gid=value.split()[0]))
        elif key in ("transport", "link_layer", "active_width", "active_speed"):
            cur[key] = value or None
        elif key == "node_guid":
            if value:
                cur["node_guid"] = value.split()[0]
        elif key == "state":
            vm = _VALUE_CODE.match(value)
            if vm:
                cur["state"] = vm.group("v")
                cur["state_code"] = int(vm.group("code")) if vm.group("code") else None
        elif key in ("phys_port_cnt", "port", "max_mtu", "active_mtu", *(f"max_{k}" for k in _LIMIT_KEYS)):
            cur[key] = _int(value) if value else None
        # other keys (vendor_id, hw_ver, sm_lid, max_cq...) are tolerated and not kept
    if not blocks:
        first = split[0] if split else (1, "")
        raise fail(kind, "'hca_id: <device>' blocks", line=first[0], found=first[1].strip())
    verbose = any(b["gid_table"] for b in blocks)
    devices = []
    for b in blocks:
        table: list[Gid] = b.pop("gid_table")
        mapped = [(g.index, _ipv4_of(g.gid)) for g in table]
        mapped = [(i, a) for i, a in mapped if a is not None]
        devices.append(
            IbvDeviceInfo(
                **b,
                gids=[g.gid for g in table],
                gid_table=table,
                has_ipv4_gid=(bool(mapped) if table else None),
                ipv4_gid_address=mapped[0][1] if mapped else None,
                ipv4_gid_index=mapped[0][0] if mapped else None,
            )
        )
    return IbvDevinfoFacts(devices=devices, verbose=verbose)


# --------------------------------------------------------------------------------------------- rdma_ctl


class RdmaCtlFacts(Facts):
    enabled: bool
    status: str  # the word printed: "enabled" / "disabled"


# What rdma_ctl prints when it refuses to run outside Recovery (`enable`/`disable` on a booted Mac): exit 77 by
# dryvist/nix-darwin docs/TB5-RDMA-CLUSTER.md ("verified 2026-07-10 ... even as root") and SQCU/mesh's README,
# exit 0 by jundot/omlx's notes. The exit code is contested, so the text is what tells a refusal.
NOT_IN_RECOVERY = "needs to be executed from Recovery OS"


def refused_outside_recovery(text: str) -> bool:
    """Whether rdma_ctl's output (stdout and stderr together) is its refusal to run outside Recovery, whatever its
    exit code."""
    return NOT_IN_RECOVERY.lower() in text.lower()


@guarded("rdma-ctl")
def parse_rdma_ctl(text: str) -> RdmaCtlFacts:
    kind = "rdma-ctl"
    lines = nonblank(lines_for(kind, text))
    words = [t.strip() for _, t in lines]
    if len(words) == 1 and words[0].lower() in ("enabled", "disabled"):
        return RdmaCtlFacts(enabled=words[0].lower() == "enabled", status=words[0].lower())
    first = lines[0] if lines else (1, "")
    if refused_outside_recovery(text):  # an answer, but not the state: the refusal is never "enabled"/"disabled"
        raise fail(kind, "the single word 'enabled' or 'disabled' (rdma_ctl refused: it runs that only in Recovery)",
                   line=first[0], found=first[1].strip())
    raise fail(kind, "the single word 'enabled' or 'disabled'", line=first[0], found=first[1].strip())


# ------------------------------------------------------------------------------------------------ nvram


class NvramFacts(Facts):
    """`nvram rdma-enable` (or several variables). A variable that is not set is listed in `missing`;
    `rdma_enable` is None then (not set is not the same as "0")."""

    variables: dict[str, str]
    missing: list[str] = Field(default_factory=list)

    @property
    def rdma_enable(self) -> str | None:
        return self.variables.get("rdma-enable")


# boot-args, rdma-enable, SystemAudioVolume, or GUID:name for a variable outside the Apple namespace.
_NVRAM_NAME = re.compile(r"^(?:[0-9A-Fa-f]{8}-[0-9A-Fa-f-]{27}:)?[A-Za-z0-9][A-Za-z0-9_.%-]*$")
_NVRAM_MISSING = re.compile(r"^nvram: Error getting variable - '(?P<name>[^']+)'")


@guarded("nvram")
def parse_nvram(text: str) -> NvramFacts:
    kind = "nvram"
    lines = nonblank(lines_for(kind, text))
    variables: dict[str, str] = {}
    missing: list[str] = []
    for n, raw in lines:
        t = raw.strip()
        if m := _NVRAM_MISSING.match(t):
            missing.append(m.group("name"))
            continue
        # nvram separates name and value with a tab; a capture pasted from a web page may have spaces
        # instead, and then a line is exactly two words.
        parts = raw.strip("\n").split("\t", 1) if "\t" in raw else t.split()
        name = parts[0].strip()
        if len(parts) != 2 or not _NVRAM_NAME.match(name):
            raise fail(kind, "'<name>\\t<value>' lines", line=n, found=t)
        variables[name] = parts[1].strip()
    if not variables and not missing:
        raise fail(kind, "'<name>\\t<value>' lines", line=1, found="")
    return NvramFacts(variables=variables, missing=missing)
