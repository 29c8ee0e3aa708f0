"""RDMA over Thunderbolt as `rdma status` judges it: enabled, not wedged, every cabled port ACTIVE with an
IPv4-mapped GID."""

from __future__ import annotations

from macfleet.facts.commands import BOOTTIME, EXO_LOG_LINES, IOCLASSCOUNT
from macfleet.facts.ledger import BootTime, failed_starts_since, parse_boottime, parse_rdma_in_use
from macfleet.inventory.model import Mesh
from macfleet.judge.checks.base import (
    Answers,
    Check,
    HealthContext,
    HealthFinding,
    NodeFacts,
    Probe,
    Unknown,
    Verdict,
    kind_probe,
    parsed,
)
from macfleet.judge.checks.network import CABLING, ok_cable_ends
from macfleet.judge.rdma import NodeRdma, NodeRdmaFacts, Problem
from macfleet.judge.rdma import check_rdma as check_rdma_mesh
from macfleet.judge.rdma_ledger import REBOOT_FIRST, ledger, undecided
from macfleet.judge.rdma_ledger import verdict as ledger_verdict

# `rdma status`'s judgement, read by doctor: the problems of a node's own RDMA stack and ports. What the cabling
# check already says (a slow cable, a hub, a port that cannot do RDMA, a cable to a stranger), the macOS check
# (the build) and the peer's own finding (its RDMA off) are not said twice.
RDMA_FINDINGS = ("not-tb5", "rdma-off", "no-rdma-devices", "rdma-wedged", "port-down", "no-ipv4-gid")
RDMA_UNKNOWNS = ("rdma-unknown", "devices-unread", "devinfo-unread", "ports-unknown")


def rdma_facts(f: NodeFacts) -> NodeRdmaFacts:
    """doctor's facts of a node as `rdma status` reads them (doctor asks `ibv_devinfo -v` as its own kind)."""
    kind = {"ibv-devinfo:verbose": "ibv-devinfo"}
    return NodeRdmaFacts(
        sw_vers=f.sw_vers, thunderbolt=f.thunderbolt, hardware_ports=f.hardware_ports, ifconfig=f.ifconfig,
        rdma_ctl=f.rdma_ctl, ibv_devices=f.ibv_devices, ibv_devinfo=f.ibv_devinfo,
        timed_out=[kind.get(k, k) for k in f.timed_out],
        problems=[f"{kind.get(k, k)}: {why}" for k, why in f.problems.items()])


def _rdma_finding(node: str, p: Problem) -> HealthFinding:
    return HealthFinding(node=node, check="rdma", severity="error", message=p.message, fix=p.fix,
                         evidence=p.evidence or p.code)


def _rdma_of(ctx: HealthContext, mesh: Mesh) -> dict[str, NodeRdma]:
    if mesh.name not in ctx.rdma:
        unreachable = {n: (ctx.facts[n].unreachable_reason or "no answer") if n in ctx.facts else "not read"
                       for n in mesh.node_names if not ctx.up(n)}
        facts = {n: rdma_facts(ctx.facts[n]) for n in mesh.node_names if ctx.up(n)}
        ctx.rdma[mesh.name] = {r.name: r for r in check_rdma_mesh(mesh, facts, unreachable)}
    return ctx.rdma[mesh.name]


def check_rdma(ctx: HealthContext, node: str) -> Verdict:
    mesh = ctx.mesh_of(node)
    me = _rdma_of(ctx, mesh)[node]
    own = [p for p in me.problems if p.code in RDMA_FINDINGS and p.port is None]
    if own:
        return [_rdma_finding(node, p) for p in own]
    unknown = [p.message for p in me.problems if p.code in RDMA_UNKNOWNS]
    if unknown:
        return Unknown(reason="; ".join(unknown))
    report = ctx.cabling.get(mesh.name)
    if report is None:
        return Unknown(reason="the cabling could not be judged")
    good = ok_cable_ends(report, node)  # a port on a bad cable is the cabling check's finding
    found = [_rdma_finding(node, p) for p in me.problems if p.code in RDMA_FINDINGS and p.port in good]
    if found:
        return found
    unread = [f"{p.port}: {p.why}" for p in me.ports
              if p.port in good and (p.state == "unknown" or p.why == "GID table not read")]
    return Unknown(reason="RDMA ports not read: " + "; ".join(unread)) if unread else []


NOT_HOLDING = ("RunnerFailed", "RunnerShutdown", "RunnerIdle")  # runner states that hold no RDMA resources


def check_rdma_ledger(ctx: HealthContext, node: str) -> Verdict:
    """Room for the next runner starts on the node's RDMA devices (judge/rdma_ledger.py): the kernel's count in
    use when it can be read, else exo's failed starts since boot and the running runner."""
    f = ctx.facts[node]
    if f.ibv_devinfo is None:
        return Unknown(reason=f.why("ibv-devinfo:verbose"))
    failed = f.exo_failed_starts if f.exo_failed_starts is not None else f.why("exo-log", "boottime")
    kernel = f.rdma_in_use if f.rdma_in_use is not None else f.why(IOCLASSCOUNT.key)
    running = f.exo_state is not None and any(r.node_id == f.exo_node_id and r.status not in NOT_HOLDING
                                               for r in f.exo_state.runners)
    led = ledger(node, f.ibv_devinfo, failed, running, kernel)
    if isinstance(led, str):
        return Unknown(reason=led)
    said = ledger_verdict(led)
    if said is None:
        why = undecided(led)
        return [] if why is None else Unknown(reason=f"{led.evidence()}; {why}")
    return [HealthFinding(node=node, check="rdma-ledger", severity=said[0], message=said[1], fix=REBOOT_FIRST,
                          evidence=led.evidence())]


def _read_failed_starts(answers: Answers) -> dict[str, object]:
    """The node's boot time, and exo's failed runner starts since then counted in the end of its log read."""
    boot = parsed(answers, BOOTTIME.key, parse_boottime)
    if not isinstance(boot, BootTime):
        return {}
    failed = parsed(answers, "exo-log", lambda log: failed_starts_since(
        log, boot, whole_file=len(log.splitlines()) < EXO_LOG_LINES))
    return {"boottime": boot} if failed is None else {"boottime": boot, "exo_failed_starts": failed}


# ------------------------------------------------------------------------------------------- declarations

PROBES = (
    kind_probe("ibv_devices", "ibv-devices"),
    kind_probe("ibv_devinfo", "ibv-devinfo", "verbose"),  # `ibv_devinfo -v`: states and GID tables
    kind_probe("rdma_ctl", "rdma-ctl"),
    # needs exo's log too: read by the checks that read this (the exo family's probe "exo-log")
    Probe(key=BOOTTIME.key, command=lambda s: (BOOTTIME,), read=_read_failed_starts,
          fills=("boottime", "exo_failed_starts")),
    # the kernel's count of RDMA protection domains and queue pairs in use (facts/ledger.py)
    Probe(key=IOCLASSCOUNT.key, command=lambda s: (IOCLASSCOUNT,), fact="rdma_in_use", parse=parse_rdma_in_use),
)
CHECKS = (
    Check(code="rdma", title="RDMA enabled and not wedged; every cabled port ACTIVE with an IPv4-mapped GID",
          order=60, judge=check_rdma, reads=(*CABLING, "rdma-ctl", "sw-vers"),
          depends=("reachable", "bridge", "ip-plan"), mesh_wide=True),
    Check(code="rdma-ledger", title="room on the node's RDMA devices (max_pd, max_qp) for the next runner starts: "
          "the kernel's count in use (ioclasscount), else exo's failed starts since boot", order=155,
          judge=check_rdma_ledger,
          reads=("ibv-devinfo:verbose", IOCLASSCOUNT.key, "boottime", "exo-log", "exo-node-id", "exo-state"),
          depends=("reachable", "rdma")),
)
