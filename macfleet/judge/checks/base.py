"""The catalogue's parts: a probe (one command, or a few, and how its answer becomes a fact), a check (a pure
judgement of a node over one pass, naming the probes it reads), and what they share: the facts of one node
(`NodeFacts`), one pass (`HealthContext`) and a check's verdict (findings, or `Unknown(reason)`: "could not tell"
is never "ok"). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from macfleet.errors import FactsParseError
from macfleet.facts.commands import CommandSpec, spec_for
from macfleet.facts.daemons import ExoDaemonsFacts
from macfleet.facts.defaults import DefaultsFacts
from macfleet.facts.discovery import Coordinators
from macfleet.facts.disk import DfFacts
from macfleet.facts.exo import ExoStateFacts
from macfleet.facts.exoapi import ExoCluster
from macfleet.facts.ledger import BootTime, FailedStarts, RdmaInUse
from macfleet.facts.network import HardwarePortsFacts, IfconfigFacts, RoutesFacts, ServiceOrderFacts
from macfleet.facts.probes import PfInfoFacts, PfRulesFacts, PingFacts, UpdatesFacts
from macfleet.facts.rdma import IbvDevicesFacts, IbvDevinfoFacts, RdmaCtlFacts
from macfleet.facts.registry import parse
from macfleet.facts.sockets import TcpSocketsFacts
from macfleet.facts.system import FdesetupFacts, PmsetFacts, SwVersFacts, SysctlFacts
from macfleet.facts.thunderbolt import ThunderboltFacts
from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge.inference import InferenceInput
from macfleet.judge.links_bench import LinksBenchInput
from macfleet.judge.rdma import NodeRdma
from macfleet.judge.topology import TopologyReport

Result = Literal["ok", "finding", "unknown"]


class Frozen(BaseModel):
    """A report part: immutable, and nothing but its fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class HealthFinding(Frozen):
    node: str
    check: str
    severity: Literal["error", "warning"]
    message: str
    fix: str
    evidence: str = ""


class CheckResult(Frozen):
    check: str
    node: str
    result: Result
    reason: str | None = None  # why unknown (or which finding); None when ok


class Unknown(Frozen):
    reason: str


class ClockReading(Frozen):
    """`date -u +%s` on the node, and when its answer reached the controller after how long a round trip."""

    node_epoch_s: int
    controller_at_s: float  # the controller's clock (epoch s) when the answer was in
    round_trip_s: float

    @property
    def offset_s(self) -> float:
        """Node minus controller, taking the node's reading at the middle of the round trip."""
        return self.node_epoch_s - (self.controller_at_s - self.round_trip_s / 2)

    @property
    def slack_s(self) -> float:
        """How far off the offset may be: half the round trip, and `date`'s whole seconds."""
        return self.round_trip_s / 2 + 1.0


class NodeFacts(Frozen):
    """Everything one node told us in one pass. A fact that is None could not be read: `problems` says why."""

    reachable: bool = True
    unreachable_reason: str | None = None
    thunderbolt: ThunderboltFacts | None = None
    hardware_ports: HardwarePortsFacts | None = None
    service_order: ServiceOrderFacts | None = None
    ifconfig: IfconfigFacts | None = None
    netstat_routes: RoutesFacts | None = None
    ibv_devices: IbvDevicesFacts | None = None
    ibv_devinfo: IbvDevinfoFacts | None = None  # `ibv_devinfo -v`: states and GID tables
    rdma_ctl: RdmaCtlFacts | None = None
    sw_vers: SwVersFacts | None = None
    sysctl: SysctlFacts | None = None
    pmset: PmsetFacts | None = None
    fdesetup: FdesetupFacts | None = None
    exo_api: Literal["up", "refused"] | None = None  # None: could not tell (see problems["exo"])
    exo_node_id: str | None = None
    exo_version: str | None = None  # the release `current` points at: its exo package's version (facts/exo.py)
    exo_state: ExoStateFacts | None = None
    exo_cluster: ExoCluster | None = None  # the same /state: its instances, for the models checks
    exo_log: list[str] | None = None  # exo's log lines since its last start
    clock: ClockReading | None = None
    df: DfFacts | None = None  # `df -k` of the models directory
    updates: UpdatesFacts | None = None
    update_prefs: dict[str, DefaultsFacts] | None = None  # Software Update preferences domain -> `defaults read`
    pf_info: PfInfoFacts | None = None
    pf_rules: PfRulesFacts | None = None  # the macfleet anchor's rules
    pings: dict[str, PingFacts] = Field(default_factory=dict)  # peer's planned address -> one ping to it
    tcp_sockets: TcpSocketsFacts | None = None  # `netstat -an -p tcp` (read where llama-rpc is enabled)
    exo_daemons: ExoDaemonsFacts | None = None  # exo's job's plist, exo's app's network daemon (facts/daemons)
    boottime: BootTime | None = None  # `sysctl -n kern.boottime` (facts/ledger.py)
    exo_failed_starts: FailedStarts | None = None  # exo's failed runner starts since boot (facts/ledger.py)
    rdma_in_use: RdmaInUse | None = None  # the kernel's RDMA domains/queue pairs in use, `ioclasscount` (ledger)
    exo_master: str | None = None  # the node id its exo follows as master, "self": itself (facts/discovery.py)
    exo_coordinators: list[Coordinators] | None = None  # its /state instances' rank-0 addresses
    timed_out: list[str] = Field(default_factory=list)  # kinds whose command gave no answer in time
    problems: dict[str, str] = Field(default_factory=dict)  # kind -> why it is missing
    ages: dict[str, float] = Field(default_factory=dict)  # probe key -> age (s) of the cached answer used

    def why(self, *kinds: str) -> str:
        got = [f"{k}: {self.problems[k]}" for k in kinds if k in self.problems]
        return "; ".join(got) or f"{', '.join(kinds)} not collected"


Verdict = list[HealthFinding] | Unknown


@dataclass
class HealthContext:
    """One pass, with what several checks share computed once."""

    fleet: Fleet
    meshes: list[Mesh]
    facts: dict[str, NodeFacts]
    now: datetime
    cabling: dict[str, TopologyReport] = field(default_factory=dict)  # mesh -> report
    links_bench: Mapping[str, LinksBenchInput] = field(default_factory=dict)  # mesh -> latest `bench links`
    inference: Mapping[str, InferenceInput] = field(default_factory=dict)  # mesh -> its models' answers
    found: dict[tuple[str, str], bool] = field(default_factory=dict)  # (check, node) -> has a finding
    rdma: dict[str, dict[str, NodeRdma]] = field(default_factory=dict)  # mesh -> node -> `rdma status`'s verdict

    def mesh_of(self, node: str) -> Mesh:
        return next(m for m in self.meshes if node in m.node_names)

    def up(self, node: str) -> bool:
        f = self.facts.get(node)
        return f is not None and f.reachable

    def found_by(self, node: str, checks: Iterable[str]) -> list[str]:
        """Those of `checks` (judged before) that found a problem on `node`."""
        return [c for c in checks if self.found.get((c, node))]


# ------------------------------------------------------------------------------------------------ probes


@dataclass(frozen=True)
class Scope:
    """Where a probe's command runs: a node of a mesh of the inventory (a command may take their settings)."""

    fleet: Fleet
    mesh: Mesh
    node: str


class Answers(Protocol):
    """One node's answers of a pass, as a probe reads them (flow/checks.py holds them)."""

    def text(self, key: str) -> str | None:
        """The command's stdout, or None with why it could not be read noted under `key`."""

    def raw(self, key: str) -> Any:
        """The command's answer as it came (stdout, stderr, rc, took_s, ended_at), or None."""

    def keys(self, kind: str) -> list[str]:
        """The keys of the commands of this kind asked of the node (`tb-ping:ADDRESS`...)."""

    def unread(self, key: str, why: str) -> None:
        """Note why the fact under `key` could not be read."""

    def problem(self, key: str) -> str | None:
        """Why the fact under `key` could not be read, when it could not."""


@dataclass(frozen=True)
class Probe:
    """One thing read from a node: its command(s) from the settings, and how the answer becomes facts.

    A plain probe runs one command whose answer is filed under `key` (the command's key) and parsed by `parse`
    into the NodeFacts field `fact`; a parse error is the fact's problem, never "nothing there". A probe whose
    answer needs more (the exit code, stderr, several commands) gives `read` instead: answers -> the facts it
    `fills`."""

    key: str
    command: Callable[[Scope], tuple[CommandSpec, ...]]
    fact: str | None = None
    parse: Callable[[str], object] | None = None
    read: Callable[[Answers], dict[str, object]] | None = None
    fills: tuple[str, ...] = ()
    cache: str | None = None  # a ProbeSettings field: its answer is kept that long between passes (a slow probe)

    @property
    def fields(self) -> tuple[str, ...]:
        """The NodeFacts fields this probe fills."""
        return (self.fact,) if self.fact else self.fills

    def facts(self, answers: Answers) -> dict[str, object]:
        """This probe's NodeFacts fields from one node's answers; what could not be read is noted, not filled."""
        if self.read is not None:
            return self.read(answers)
        text = answers.text(self.key)
        if text is None or self.parse is None or self.fact is None:
            return {}
        try:
            return {self.fact: self.parse(text)}
        except FactsParseError as e:
            answers.unread(self.key, e.message)
            return {}


def parsed(answers: Answers, key: str, parser: Callable[[str], object], text: str | None = None) -> object | None:
    """`parser` on the answer under `key` (or on `text`), None with the reason noted when it cannot be read."""
    text = answers.text(key) if text is None else text
    if text is None:
        return None
    try:
        return parser(text)
    except FactsParseError as e:
        answers.unread(key, e.message)
        return None


def odd_one_out(values: Mapping[str, str | None], node: str, what: str) -> list[str] | Unknown:
    """Whether `node`'s value stands apart from the rest of its mesh's: `values` holds every node of the mesh,
    None where the value is not known. [] when the node's value is the one most common (or the node is alone);
    else the most common values other than its own (on a tie, every node of it stands apart); Unknown when no
    other node's value is known."""
    others = [v for n, v in values.items() if n != node]
    if not others:
        return []
    if all(v is None for v in others):
        return Unknown(reason=f"no other node's {what} is known, so there is nothing to compare {node}'s with")
    counts = Counter(v for v in values.values() if v is not None)
    top = max(counts.values())
    majority = sorted(v for v, c in counts.items() if c == top)
    mine = values.get(node)
    if majority == [mine]:
        return []
    return [v for v in majority if v != mine]


def kind_probe(fact: str, kind: str, variant: str | None = None) -> Probe:
    """A KIND's command (facts/kinds.py) parsed by its parser (facts/registry.py) into NodeFacts' `fact`."""
    spec = spec_for(kind, variant)
    return Probe(key=spec.key, command=lambda _: (spec,), fact=fact, parse=lambda text: parse(kind, text))


def pick(specs: tuple[CommandSpec, ...], kind: str) -> tuple[CommandSpec, ...]:
    """The commands of one kind among a family of them (`probe_specs`, `exo_specs`)."""
    return tuple(s for s in specs if s.kind == kind)


# ------------------------------------------------------------------------------------------------ checks


class CheckSpec(Frozen):
    """What `doctor --list` says of a check."""

    code: str
    title: str
    fixable: bool = False  # `doctor --fix` applies its fix through a playbook
    depends: tuple[str, ...] = ()  # not judged on a node where one of these found a problem


@dataclass(frozen=True)
class Check:
    """One check, declared once: its stable code and title, where it stands in doctor's order, the probes it
    reads, the checks it depends on (it is not judged on a node where one of them found a problem; a mesh-wide
    check also leaves out the peers where one of `peers_depend` did: its judgement names the same tuple), the
    playbook that fixes it (playbooks/FIX.yml, applied by `doctor --fix`; None: left to a human), whether it is
    judged across a whole mesh (left out when `--limit` names part of one), and the judgement itself."""

    code: str
    title: str
    order: int
    judge: Callable[[HealthContext, str], Verdict]
    reads: tuple[str, ...] = ()
    depends: tuple[str, ...] = ()
    peers_depend: tuple[str, ...] = ()  # a mesh-wide check: a peer where one of these found a problem is left out
    fix: str | None = None
    mesh_wide: bool = False

    @property
    def fixable(self) -> bool:
        return self.fix is not None

    @property
    def spec(self) -> CheckSpec:
        return CheckSpec(code=self.code, title=self.title, fixable=self.fixable, depends=self.depends)
