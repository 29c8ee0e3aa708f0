"""The KINDs, defined once: each names the command macfleet runs, its timeout, its parser and its model.

The same strings name the CLI argument (`macfleet facts parse KIND FILE`), the fixture folders
(`tests/fixtures/captures/<kind>/`), the collector's command specs (built from this table by
`collect/commands.py`) and the lab's stand-ins. `detect_kind` is what `facts parse auto` uses to guess the
KIND of a pasted capture.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from macfleet.errors import FactsParseError
from macfleet.facts import network, rdma, sockets, system, thunderbolt
from macfleet.facts._common import register_command_line, split_transcript

DEFAULT_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class KindSpec:
    kind: str
    argv: tuple[str, ...]  # the command line macfleet runs (and names in parse errors)
    parser: Callable[[str], BaseModel]
    model: type[BaseModel]
    detect: Callable[[str], bool]  # does this text look like this KIND's output (cheap, for `auto`)
    timeout_s: float = DEFAULT_TIMEOUT_S
    needs_sudo: bool = False  # run as `sudo -n`: scoped, non-interactive, never a password prompt
    # False: parsed from saved captures only (it needs an argument per service, or no real capture proves it)
    collected: bool = True
    variants: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # name -> extra arguments

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


def _has(pattern: str, flags: int = re.MULTILINE) -> Callable[[str], bool]:
    rx = re.compile(pattern, flags)
    return lambda text: bool(rx.search(text))


def _only_word(*words: str) -> Callable[[str], bool]:
    def check(text: str) -> bool:
        body = [t.strip() for t in text.split("\n") if t.strip()]
        return len(body) == 1 and body[0].lower() in words

    return check


def _sysctl(text: str) -> bool:
    body = [t for t in text.split("\n") if t.strip()]
    if not body:
        return False
    if re.match(r"^[a-z_][\w\-]*(?:\.[\w\-]+)+: ", body[0]) or body[0].startswith("sysctl: unknown oid"):
        return True
    # `sysctl -n`: a few bare values, one of them a number
    return len(body) <= 32 and all(":" not in t and len(t) < 200 for t in body) and any(
        re.fullmatch(r"\s*-?\d+\s*", t) for t in body
    )


def _getinfo(text: str) -> bool:
    body = [t.strip() for t in text.split("\n") if t.strip()]
    return bool(body) and bool(re.match(r"^(DHCP|Manual|BOOTP|Manually Using DHCP Router) Configuration$", body[0]))


def _ifconfig(text: str) -> bool:
    if re.search(r"^[A-Za-z][\w.]*: flags=[0-9a-fA-F]+<", text, re.MULTILINE):
        return True
    body = [t for t in text.split("\n") if t.strip()]
    return bool(body) and all(re.match(r"^\s+(inet6?|ether|member:|status:|media:|options=)\s*", t) for t in body)


# Order matters for `auto`: the first detector that matches wins.
_SPECS = (
    KindSpec("thunderbolt", ("system_profiler", "SPThunderboltDataType", "-json"), thunderbolt.parse_thunderbolt,
             thunderbolt.ThunderboltFacts, _has(r"SPThunderboltDataType|^\s*(?:Thunderbolt(?:/USB4)?|USB4) Bus\b"),
             timeout_s=30),
    KindSpec("hardware", ("system_profiler", "SPHardwareDataType", "-json"), system.parse_hardware,
             system.HardwareFacts, _has(r"SPHardwareDataType"), timeout_s=30),
    KindSpec("hardware-ports", ("networksetup", "-listallhardwareports"), network.parse_hardware_ports,
             network.HardwarePortsFacts, _has(r"^Hardware Port: .*\n\s*Device: ")),
    KindSpec("service-order", ("networksetup", "-listnetworkserviceorder"), network.parse_service_order,
             network.ServiceOrderFacts, _has(r"^\((?:\d+|\*)\) .*\n\(Hardware Port: ")),
    KindSpec("services", ("networksetup", "-listallnetworkservices"), network.parse_services,
             network.ServicesFacts, _has(r"\A\s*An asterisk \(\*\) denotes")),
    # Needs a service name; the IP plan reads the same from ifconfig and the service order instead.
    KindSpec("getinfo", ("networksetup", "-getinfo"), network.parse_getinfo, network.GetInfoFacts, _getinfo,
             collected=False),
    # ibv_devices/ibv_devinfo hang on a wedged RDMA stack: a short timeout is itself a finding.
    KindSpec("ibv-devices", ("ibv_devices",), rdma.parse_ibv_devices, rdma.IbvDevicesFacts,
             _has(r"^\s*device\s+node GUID\s*$"), timeout_s=10),
    KindSpec("ibv-devinfo", ("ibv_devinfo",), rdma.parse_ibv_devinfo, rdma.IbvDevinfoFacts,
             _has(r"^\s*hca_id:\s*\S"), timeout_s=10, variants={"verbose": ("-v",)}),
    KindSpec("ifconfig", ("ifconfig",), network.parse_ifconfig, network.IfconfigFacts, _ifconfig),
    KindSpec("rdma-ctl", ("rdma_ctl", "status"), rdma.parse_rdma_ctl, rdma.RdmaCtlFacts,
             _only_word("enabled", "disabled"), timeout_s=10),
    # No real capture of `nvram rdma-enable` exists yet; `rdma_ctl status` answers the same question.
    KindSpec("nvram", ("nvram", "rdma-enable"), rdma.parse_nvram, rdma.NvramFacts,
             _has(r"^rdma-enable\s|^nvram: Error getting variable"), timeout_s=10, collected=False),
    KindSpec("sw-vers", ("sw_vers",), system.parse_sw_vers, system.SwVersFacts, _has(r"^ProductVersion:"),
             timeout_s=10),
    KindSpec("pmset", ("pmset", "-g"), system.parse_pmset, system.PmsetFacts,
             _has(r"^(?:Currently in use|System-wide power settings):"), timeout_s=10),
    KindSpec("fdesetup", ("fdesetup", "status"), system.parse_fdesetup, system.FdesetupFacts,
             _has(r"\A\s*FileVault is (?:On|Off)"), timeout_s=10),
    KindSpec("csrutil", ("csrutil", "status"), system.parse_csrutil, system.CsrutilFacts,
             _has(r"^System Integrity Protection status:|\A\s*(?:Kext Signing|Apple Internal|"
                  r"Filesystem Protections|Debugging Restrictions|DTrace Restrictions|NVRAM Protections): "
                  r"(?:enabled|disabled)\s*\Z"), timeout_s=10),
    KindSpec("remote-login", ("systemsetup", "-getremotelogin"), system.parse_remote_login,
             system.RemoteLoginFacts,
             _has(r"\A\s*(?:Remote Login: (?:On|Off)|You need administrator access to run this tool)"),
             timeout_s=10, needs_sudo=True),
    # The IPv4 routing table: the IP plan must not take addresses a node already routes elsewhere (a VPN).
    KindSpec("netstat-routes", ("netstat", "-rn", "-f", "inet"), network.parse_netstat_routes, network.RoutesFacts,
             _has(r"^Routing tables\s*$|^\s*Destination\s+Gateway\s+Flags\s"), timeout_s=10),
    # Every TCP socket: doctor's llama-rpc check reads where rpc-server listens.
    KindSpec("netstat-listen", ("netstat", "-an", "-p", "tcp"), sockets.parse_netstat_listen,
             sockets.TcpSocketsFacts, _has(r"^\s*tcp(?:4|6|46)\s+\d+\s+\d+\s+\S+\.(?:\d+|\*)\s+\S+"),
             timeout_s=10),
    KindSpec("sysctl", ("sysctl", "hw.memsize", "hw.ncpu", "hw.model", "iogpu.wired_limit_mb"), system.parse_sysctl,
             system.SysctlFacts, _sysctl, timeout_s=10),
)
KINDS: dict[str, KindSpec] = {spec.kind: spec for spec in _SPECS}
for _spec in _SPECS:
    register_command_line(_spec.kind, _spec.command)

KIND_NAMES: tuple[str, ...] = tuple(KINDS)


def detect_kind(text: str) -> str | None:
    """Guess the KIND of a capture: from the command line of a pasted transcript if there is one, else
    from the first detector that recognises the text. None when nothing does."""
    sections = split_transcript(text)
    for s in sections:
        if s.kind is not None and any(t.strip() for _, t in s.lines):
            return s.kind
    body = "\n".join(t for _, t in sections[0].lines) if sections else text
    for spec in KINDS.values():
        try:
            if spec.detect(body):
                return spec.kind
        except Exception:  # a detector must never break `auto`; treat as "not this kind"
            continue
    return None


def parse(kind: str, text: str) -> BaseModel:
    """Parse `text` as KIND's output. Raises KeyError for an unknown KIND (callers check `KINDS` first)
    and FactsParseError for text that is not that command's output."""
    return KINDS[kind].parser(text)


def parse_auto(text: str) -> tuple[str, BaseModel]:
    kind = detect_kind(text)
    if kind is None:
        first = next((t.strip() for t in text.split("\n") if t.strip()), "")
        raise FactsParseError("auto", "the output of one of: " + ", ".join(KIND_NAMES), line=1, found=first[:120])
    return kind, parse(kind, text)


def facts_from_outputs(
    outputs: Mapping[str, Any], failed: Mapping[str, str], kinds: Iterable[str]
) -> tuple[dict[str, BaseModel | None], list[str]]:
    """One node's collected outputs (objects with .stdout/.stderr/.rc, keyed by KIND) as facts.

    A kind that timed out, was not answered at all, exited non-zero with nothing on stdout, or did not parse
    maps to None, and the reason is added to the returned problems: "could not read" never looks like
    "nothing there".
    """
    facts: dict[str, BaseModel | None] = {}
    problems: list[str] = []
    for kind in kinds:
        facts[kind] = None
        if kind in failed:
            problems.append(f"{kind}: {failed[kind]}")
            continue
        raw = outputs.get(kind)
        if raw is None:
            problems.append(f"{kind}: no output was collected")
            continue
        if raw.rc != 0 and not raw.stdout.strip():
            problems.append(f"{kind}: exit {raw.rc}: {raw.stderr.strip()[-200:] or 'no output'}")
            continue
        try:
            facts[kind] = parse(kind, raw.stdout)
        except FactsParseError as e:
            problems.append(f"{kind}: {e.message}")
    return facts, problems
