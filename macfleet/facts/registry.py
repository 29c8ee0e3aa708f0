"""The KINDs, defined once: each KIND's command (from `facts/kinds.py`) with its parser, model and detector.

The same strings name the CLI argument (`macfleet facts parse KIND FILE`), the fixture folders
(`tests/fixtures/captures/<kind>/`), the collector's command specs (built from this table by
`collect/commands.py`) and the lab's stand-ins. `detect_kind` is what `facts parse auto` uses to guess the
KIND of a pasted capture.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from macfleet.errors import FactsParseError
from macfleet.facts import network, rdma, sockets, system, thunderbolt
from macfleet.facts._common import split_transcript
from macfleet.facts.kinds import KIND_COMMANDS


@dataclass(frozen=True)
class KindSpec:
    """A KIND's parser, model and detector; its command (argv, timeout, sudo, variants) is `facts/kinds.py`'s."""

    kind: str
    parser: Callable[[str], BaseModel]
    model: type[BaseModel]
    detect: Callable[[str], bool]  # does this text look like this KIND's output (cheap, for `auto`)

    @property
    def command(self) -> str:
        return KIND_COMMANDS[self.kind].command


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


# Each KIND's parser, model and detector; its command comes from facts/kinds.py.
# Order matters for `auto`: the first detector that matches wins.
_PARSERS: tuple[tuple[str, Callable[[str], BaseModel], type[BaseModel], Callable[[str], bool]], ...] = (
    ("thunderbolt", thunderbolt.parse_thunderbolt, thunderbolt.ThunderboltFacts,
     _has(r"SPThunderboltDataType|^\s*(?:Thunderbolt(?:/USB4)?|USB4) Bus\b")),
    ("hardware", system.parse_hardware, system.HardwareFacts, _has(r"SPHardwareDataType")),
    ("hardware-ports", network.parse_hardware_ports, network.HardwarePortsFacts,
     _has(r"^Hardware Port: .*\n\s*Device: ")),
    ("service-order", network.parse_service_order, network.ServiceOrderFacts,
     _has(r"^\((?:\d+|\*)\) .*\n\(Hardware Port: ")),
    ("services", network.parse_services, network.ServicesFacts, _has(r"\A\s*An asterisk \(\*\) denotes")),
    ("getinfo", network.parse_getinfo, network.GetInfoFacts, _getinfo),
    ("ibv-devices", rdma.parse_ibv_devices, rdma.IbvDevicesFacts, _has(r"^\s*device\s+node GUID\s*$")),
    ("ibv-devinfo", rdma.parse_ibv_devinfo, rdma.IbvDevinfoFacts, _has(r"^\s*hca_id:\s*\S")),
    ("ifconfig", network.parse_ifconfig, network.IfconfigFacts, _ifconfig),
    ("rdma-ctl", rdma.parse_rdma_ctl, rdma.RdmaCtlFacts, _only_word("enabled", "disabled")),
    ("nvram", rdma.parse_nvram, rdma.NvramFacts, _has(r"^rdma-enable\s|^nvram: Error getting variable")),
    ("sw-vers", system.parse_sw_vers, system.SwVersFacts, _has(r"^ProductVersion:")),
    ("pmset", system.parse_pmset, system.PmsetFacts, _has(r"^(?:Currently in use|System-wide power settings):")),
    ("fdesetup", system.parse_fdesetup, system.FdesetupFacts, _has(r"\A\s*FileVault is (?:On|Off)")),
    ("csrutil", system.parse_csrutil, system.CsrutilFacts,
     _has(r"^System Integrity Protection status:|\A\s*(?:Kext Signing|Apple Internal|"
          r"Filesystem Protections|Debugging Restrictions|DTrace Restrictions|NVRAM Protections): "
          r"(?:enabled|disabled)\s*\Z")),
    ("remote-login", system.parse_remote_login, system.RemoteLoginFacts,
     _has(r"\A\s*(?:Remote Login: (?:On|Off)|You need administrator access to run this tool)")),
    ("netstat-routes", network.parse_netstat_routes, network.RoutesFacts,
     _has(r"^Routing tables\s*$|^\s*Destination\s+Gateway\s+Flags\s")),
    ("netstat-listen", sockets.parse_netstat_listen, sockets.TcpSocketsFacts,
     _has(r"^\s*tcp(?:4|6|46)\s+\d+\s+\d+\s+\S+\.(?:\d+|\*)\s+\S+")),
    ("sysctl", system.parse_sysctl, system.SysctlFacts, _sysctl),
)


_SPECS = tuple(KindSpec(*entry) for entry in _PARSERS)
_UNPAIRED = {s.kind for s in _SPECS} ^ set(KIND_COMMANDS)
if _UNPAIRED:  # every KIND has both a command and a parser
    raise ImportError(f"facts/kinds.py and facts/registry.py disagree on: {', '.join(sorted(_UNPAIRED))}")
KINDS: dict[str, KindSpec] = {spec.kind: spec for spec in _SPECS}

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
