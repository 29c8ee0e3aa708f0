"""exo on each node: its API answers, one version, peers that see each other, RDMA connections, runners, its
log, one master and reachable rank-0 addresses, its models directory, its app's network daemon, and who may reach
its API."""

from __future__ import annotations

import re
from collections.abc import Callable

from macfleet.constants import CURL_REFUSED, EXO_MODELS_DIR
from macfleet.errors import FactsParseError
from macfleet.facts.commands import PF_ANCHOR, CommandSpec, exo_daemons_spec, exo_specs
from macfleet.facts.daemons import (
    EXO_JOB_PLIST,
    NETWORKSETUP_LABEL,
    NETWORKSETUP_PLIST,
    parse_exo_daemons,
)
from macfleet.facts.discovery import coordinators_of, master_followed
from macfleet.facts.exo import (
    HEALTHY_RUNNERS,
    exo_state_facts,
    load_state,
    log_since_start,
    parse_exo_release,
    parse_http_response,
    parse_node_id,
)
from macfleet.facts.exoapi import cluster_of
from macfleet.inventory.model import Mesh
from macfleet.judge.checks.base import (
    Answers,
    Check,
    HealthContext,
    HealthFinding,
    NodeFacts,
    Probe,
    Scope,
    Unknown,
    Verdict,
    odd_one_out,
    parsed,
    pick,
)
from macfleet.judge.checks.network import CABLING, ok_cable_ends, pf_exposure
from macfleet.judge.discovery import NodeDiscovery, coordinators, masters
from macfleet.judge.exolog import UNRECOGNISED, Signature, match_signature, shown

# --------------------------------------------------------------------------------------------------- exo


def check_exo_running(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.exo_api is None:
        return Unknown(reason=f.why("exo"))
    if f.exo_api == "up" and f.exo_node_id:
        return []
    return [HealthFinding(node=node, check="exo-running", severity="error",
                          message=f"exo does not answer on {node} (its API refuses connections)",
                          fix="`macfleet doctor --fix` starts it again (playbooks/exo-service.yml)",
                          evidence=f.problems.get("exo", "connection refused on the API port"))]


def check_exo_version(ctx: HealthContext, node: str) -> Verdict:
    mine = ctx.facts[node].exo_version
    if mine is None:
        return Unknown(reason=ctx.facts[node].why("exo-release"))
    versions = {n: ctx.facts[n].exo_version if ctx.up(n) and ctx.facts[n].exo_api == "up" else None
                for n in ctx.mesh_of(node).node_names}
    versions[node] = mine
    odd = odd_one_out(versions, node, "exo version")
    if isinstance(odd, Unknown) or not odd:
        return odd
    others = ", ".join(f"{n} {v}" for n, v in sorted(versions.items()) if n != node and v is not None)
    return [HealthFinding(node=node, check="exo-version", severity="error",
                          message=f"{node} runs exo {mine}, not the version the rest of the mesh runs: exo nodes "
                                  "of different versions ignore each other",
                          fix="install one exo build everywhere (`macfleet rollout`)",
                          evidence=f"{node} {mine}; {others}")]


def _views(ctx: HealthContext, mesh: Mesh) -> dict[str, set[str]]:
    """Each node's exo view of the mesh, in inventory names (node ids mapped through each node's /node_id)."""
    ids = {ctx.facts[n].exo_node_id: n for n in mesh.node_names if ctx.up(n) and ctx.facts[n].exo_node_id}
    return {n: {ids[i] for i in ctx.facts[n].exo_state.nodes if i in ids}
            for n in mesh.node_names if ctx.up(n) and ctx.facts[n].exo_state is not None}


def check_exo_peers(ctx: HealthContext, node: str) -> Verdict:
    if ctx.facts[node].exo_state is None:
        return Unknown(reason=ctx.facts[node].why("exo-state"))
    views = _views(ctx, ctx.mesh_of(node))
    live = set(views)
    others = live - {node}
    if not others:
        return []
    mine = views[node]
    unseen_by = sorted(n for n in others if node not in views[n])
    not_seen = sorted(others - mine)
    if 2 * len(unseen_by) <= len(others) and 2 * len(not_seen) <= len(others):
        return []  # a minority that disagrees is judged on its own nodes
    peers_seen = sorted(mine - {node})
    sees = f"it sees {', '.join(peers_seen)}" if peers_seen else "it sees nobody"
    seen = (f"{', '.join(unseen_by)} {'does' if len(unseen_by) == 1 else 'do'} not see it" if unseen_by
            else "every peer sees it")
    return [HealthFinding(node=node, check="exo-peers", severity="error",
                          message=f"exo on {node} is cut off from the mesh: {sees}; {seen}",
                          fix="check the Thunderbolt addresses (`macfleet topology ipplan`) and restart exo on it",
                          evidence=f"/state on {node}: {sorted(mine)}")]


# A pair is judged for exo's RDMA connection only where none of these found a problem on either end.
RDMA_PAIR_DEPENDS = ("reachable", "cabling", "rdma", "bridge", "ip-plan", "exo-running", "exo-version", "exo-peers")


def _pair_clear(ctx: HealthContext, a: str, b: str) -> bool:
    return not any(ctx.found_by(n, RDMA_PAIR_DEPENDS) for n in (a, b))


def check_exo_rdma(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.exo_state is None or f.exo_node_id is None:
        return Unknown(reason=f.why("exo-state"))
    mesh = ctx.mesh_of(node)
    report = ctx.cabling.get(mesh.name)
    if report is None:
        return Unknown(reason="the cabling could not be judged")
    ids = {n: ctx.facts[n].exo_node_id for n in mesh.node_names if ctx.up(n) and ctx.facts[n].exo_node_id}
    edges = set(f.exo_state.rdma_edges)
    missing = []
    for peer in sorted(set(ok_cable_ends(report, node).values())):
        if peer not in ids or not _pair_clear(ctx, node, peer):
            continue
        if ctx.facts[peer].rdma_ctl is None or not ctx.facts[peer].rdma_ctl.enabled:
            continue
        if (ids[node], ids[peer]) not in edges or (ids[peer], ids[node]) not in edges:
            missing.append(peer)
    if not missing:
        return []
    return [HealthFinding(node=node, check="exo-rdma", severity="error",
                          message=f"exo has no RDMA connection between {node} and {', '.join(missing)} although "
                                  "the cables, ports and addresses are good",
                          fix="restart exo on the mesh (`macfleet doctor --fix`); if it stays, reboot the mesh",
                          evidence=f"/state on {node}: {len(edges)} RDMA edges")]


def _runner_failures(f: NodeFacts) -> list[str]:
    if f.exo_state is None or f.exo_node_id is None:
        return []
    return [r.error_message or r.status for r in f.exo_state.runners
            if r.node_id == f.exo_node_id and r.status == "RunnerFailed"]


def check_exo_runners(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.exo_state is None:
        return Unknown(reason=f.why("exo-state"))
    out = []
    for message in _runner_failures(f):
        sig = match_signature(message)
        out.append(HealthFinding(
            node=node, check="exo-runners", severity="error",
            message=f"exo's runner on {node} failed: {message}" + (f" ({sig.cause})" if sig else ""),
            fix=sig.fix if sig else "read exo's log on the node, then restart exo (`macfleet doctor --fix`)",
            evidence=f"/state runners: RunnerFailed {message}"))
    return out


def check_exo_log(ctx: HealthContext, node: str) -> Verdict:
    """Error signatures since exo's last start, judged while the node has no healthy runner (none at all after
    exo gave up on a crash loop, or one stuck connecting): once its runner is ready again, they are history."""
    f = ctx.facts[node]
    if f.exo_log is None:
        return Unknown(reason=f.why("exo-log"))
    if f.exo_state is not None and any(r.node_id == f.exo_node_id and r.status in HEALTHY_RUNNERS
                                       for r in f.exo_state.runners):
        return []
    told = {_log_key(m, s) for m in _runner_failures(f) if (s := match_signature(m)) is not None}
    seen: dict[tuple[Signature, str], list[str]] = {}
    for line in f.exo_log:
        sig = match_signature(line)
        if sig is not None and (key := _log_key(line, sig)) not in told:
            seen.setdefault(key, []).append(line.strip())
    unknown = [k for k in seen if k[0] is UNRECOGNISED]
    for key in unknown[MAX_UNRECOGNISED:]:  # the first few distinct ones are named; the rest only counted
        del seen[key]
    more = len(unknown) - MAX_UNRECOGNISED
    return [HealthFinding(node=node, check="exo-log", severity="error",
                          message=f"exo's log on {node} since its last start: {sig.cause}"
                                  + (f": {text}" if sig is UNRECOGNISED else "")
                                  + f" ({len(lines)} line{'s' if len(lines) != 1 else ''})"
                                  + (f"; {more} more unrecognised JACCL line{'s' if more != 1 else ''}"
                                     if sig is UNRECOGNISED and more > 0 and (sig, text) == unknown[0] else ""),
                          fix=sig.fix, evidence=shown(lines[-1][-300:]))
            for (sig, text), lines in seen.items()]


MAX_UNRECOGNISED = 3


def _log_key(line: str, sig: Signature) -> tuple[Signature, str]:
    """Known signatures are reported once each; unrecognised JACCL lines once per distinct line."""
    return (sig, shown(line) if sig is UNRECOGNISED else "")


def check_exo_api_exposure(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    port = ctx.mesh_of(node).settings.exo.port
    why = pf_exposure(f, port, sources_ok=True)
    if isinstance(why, Unknown):
        return why
    if why is None or f.pf_info is None or f.pf_rules is None:
        return []
    now = "switch pf on now (`sudo pfctl -E`); " if not f.pf_info.enabled else ""
    return [HealthFinding(
        node=node, check="exo-api-exposure", severity="warning",
        message=f"exo's API on {node} (unauthenticated, on every interface, port {port}) is open to the whole "
                f"LAN: {why}",
        fix=f"{now}`macfleet bootstrap` loads the packet-filter anchor that lets exo's ports in only from the "
            "Thunderbolt networks and the controller, and switches pf on at every boot (docs/runbooks/doctor.md)",
        evidence=f"pfctl -s info: {f.pf_info.status_line}; pfctl -a {PF_ANCHOR} -s rules: "
                 f"{len(f.pf_rules.rules)} rules")]


# -------------------------------------------------------------------- exo's models dir, exo's network daemon

EXO_MODELS_ENV = "EXO_DEFAULT_MODELS_DIR"  # exo src/exo/shared/constants.py since 15f1b61f4
EXO_DEFAULT_MODELS = EXO_MODELS_DIR.removeprefix("~/")  # its default, under HOME (same file; macfleet/constants.py)


def _clean(path: str) -> str:
    return re.sub(r"/+", "/", path).rstrip("/") or "/"


def check_exo_models_dir(ctx: HealthContext, node: str) -> Verdict:
    """exo looks for models where its LaunchDaemon's environment says (EXO_DEFAULT_MODELS_DIR, else its
    default, EXO_MODELS_DIR): the directory rollout fills (exo.models_dir), or exo downloads every model again."""
    f = ctx.facts[node]
    if f.exo_daemons is None:
        return Unknown(reason=f.why("exo-daemons"))
    if f.exo_daemons.exo_job is None:
        return Unknown(reason=f"exo's LaunchDaemon could not be read: {f.exo_daemons.exo_job_problem}")
    env = f.exo_daemons.exo_job.environment
    home = env.get("HOME")
    want = ctx.mesh_of(node).settings.exo.models_dir
    if want == "~" or want.startswith("~/"):
        if not home:
            return Unknown(reason="exo's LaunchDaemon sets no HOME, so ~ in exo.models_dir cannot be placed")
        want = home + want[1:]
    looks = env.get(EXO_MODELS_ENV) or (f"{home}/{EXO_DEFAULT_MODELS}" if home else None)
    if looks is None:
        return Unknown(reason=f"exo's LaunchDaemon sets neither {EXO_MODELS_ENV} nor HOME")
    if _clean(looks) == _clean(want):
        return []
    return [HealthFinding(
        node=node, check="exo-models-dir", severity="error",
        message=f"exo on {node} looks for models in {looks}, but rollout puts them in {want} (exo.models_dir): "
                "exo does not see the models pushed there and downloads them again",
        fix="`macfleet bootstrap` writes exo's LaunchDaemon with EXO_DEFAULT_MODELS_DIR set to exo.models_dir "
            "and restarts exo",
        evidence=f"{EXO_JOB_PLIST}: {EXO_MODELS_ENV}="
                 f"{env.get(EXO_MODELS_ENV, '(not set)')}, HOME={home or '(not set)'}")]


def check_exo_networksetup(ctx: HealthContext, node: str) -> Verdict:
    """exo's app installs the LaunchDaemon io.exo.networksetup, which at load and every ~30 min rewrites the
    network services and sets the Thunderbolt ports to DHCP (exo app/EXO/EXO/Services/NetworkSetupHelper.swift
    at b5375f8; exo#1158, #2007, #2067): it undoes the IP plan. Loaded, or installed and not disabled (so it loads
    at the next boot), is a finding."""
    f = ctx.facts[node]
    if f.exo_daemons is None:
        return Unknown(reason=f.why("exo-daemons"))
    ns = f.exo_daemons.networksetup
    if not ns.plist_present and not ns.loaded:
        return []
    if not ns.loaded and ns.disabled:
        return []
    if not ns.loaded and not ns.disabled_read:
        return Unknown(reason=f"{NETWORKSETUP_LABEL} is installed, not loaded; whether it is disabled could not "
                              "be read (launchctl print-disabled system)")
    ran = ", ".join(x for x in (f"state {ns.state}" if ns.state else "", f"{ns.runs} runs" if ns.runs is not None
                                else "", f"last exit {ns.last_exit}" if ns.last_exit else "") if x)
    now = (f"is loaded ({ran or 'launchctl print answers'})" if ns.loaded
           else "is installed and not disabled: it loads at the next boot")
    return [HealthFinding(
        node=node, check="exo-networksetup", severity="error" if ns.loaded else "warning",
        message=f"exo's network daemon {NETWORKSETUP_LABEL} on {node} {now}; at load and every ~30 minutes it "
                "rewrites the network services, destroys bridge0 and puts the Thunderbolt ports on DHCP, undoing "
                "the IP plan",
        fix=f"`macfleet bootstrap` boots it out and disables it (`sudo launchctl bootout system/{NETWORKSETUP_LABEL}"
            f"; sudo launchctl disable system/{NETWORKSETUP_LABEL}`), then `macfleet doctor --fix` re-applies the "
            "IP plan; do not run exo's app on the nodes (docs/runbooks/bootstrap.md)",
        evidence=f"{NETWORKSETUP_PLIST} "
                 f"{'present' if ns.plist_present else 'absent'}; launchctl print system/{NETWORKSETUP_LABEL}: "
                 f"{ran or ('loaded' if ns.loaded else 'not loaded')}; disabled: "
                 f"{'unread' if not ns.disabled_read else 'yes' if ns.disabled else 'no'}")]


# A node cut off from exo's cluster by one of these is that check's finding, not a split of the cluster.
DISCOVERY_CAUSES = ("reachable", "cabling", "bridge", "ip-plan", "exo-running", "exo-version")


def _discovery(ctx: HealthContext, mesh: Mesh) -> dict[str, NodeDiscovery]:
    out = {}
    for n in mesh.node_names:
        f = ctx.facts[n]
        if not ctx.up(n) or f.exo_state is None or ctx.found_by(n, DISCOVERY_CAUSES):
            continue
        addresses = {a.address: i.name for i in (f.ifconfig.interfaces if f.ifconfig else []) if i.name
                     for a in i.inet}
        out[n] = NodeDiscovery(node_id=f.exo_node_id, master=f.exo_master, sees=set(f.exo_state.nodes),
                               coordinators=f.exo_coordinators or [], addresses=addresses)
    return out


def check_exo_discovery(ctx: HealthContext, node: str) -> Verdict:
    """One master for the mesh and rank-0 addresses a peer can reach (judge/discovery.py); nodes that do not see
    each other are exo-peers' finding. A finding is told on the first node it names (for a split: the smallest
    group's)."""
    f = ctx.facts[node]
    if f.exo_state is None:
        return Unknown(reason=f.why("exo-state"))
    mesh = _discovery(ctx, ctx.mesh_of(node))
    return [HealthFinding(node=node, check="exo-discovery", severity="error", message=d.message, fix=d.fix,
                          evidence=d.evidence)
            for d in masters(mesh) + coordinators(mesh) if d.nodes[0] == node]


# ------------------------------------------------------------------------------------------- declarations



def _exo(kind: str) -> Callable[[Scope], tuple[CommandSpec, ...]]:
    """The exo read of this kind, at the mesh's exo port and install root."""
    return lambda s: pick(exo_specs(s.mesh.settings.exo.port, s.mesh.settings.exo.install_root), kind)


def _read_node_id(answers: Answers) -> dict[str, object]:
    """exo's API: up (its node id), refused (nothing listens), or could not tell (noted under "exo")."""
    raw = answers.raw("exo-node-id")
    if raw is not None and raw.rc == CURL_REFUSED:
        answers.unread("exo", f"connection refused: {raw.stderr.strip()[-200:] or 'curl exit 7'}")
        return {"exo_api": "refused"}
    http = parsed(answers, "exo", parse_http_response, answers.text("exo-node-id") or "")
    if answers.problem("exo-node-id") is not None:
        answers.unread("exo", answers.problem("exo-node-id") or "no answer")
        return {}
    if http is None:
        return {}
    if http.status != 200:
        answers.unread("exo", f"GET /node_id answered {http.status}")
        return {"exo_api": None, "exo_node_id": None}
    node_id = parsed(answers, "exo", parse_node_id, http.body)
    return {"exo_api": "up", "exo_node_id": node_id}


def _read_log(answers: Answers) -> dict[str, object]:
    text = answers.text("exo-log")
    return {} if text is None else {"exo_log": log_since_start(text), "exo_master": master_followed(text)}


def _read_state(answers: Answers) -> dict[str, object]:
    """exo's /state, once read: what the exo checks judge, its instances' rank-0 addresses (facts/discovery.py)
    and its instances as `macfleet exo` reads them (the models checks')."""
    state = parsed(answers, "exo-state", load_state)
    if not isinstance(state, dict):
        return {}
    try:
        coordinators = coordinators_of(state)
    except FactsParseError as e:  # the rest of /state is still read
        answers.unread("exo-state", e.message)
        coordinators = None
    return {"exo_state": exo_state_facts(state), "exo_coordinators": coordinators, "exo_cluster": cluster_of(state)}


def _read_release(answers: Answers) -> dict[str, object]:
    """The version of the release `current` points at; why not, when it cannot be told."""
    release = parsed(answers, "exo-release", parse_exo_release)
    if release is None:
        return {}
    if release.version is None:
        answers.unread("exo-release", release.why_unknown())
    return {"exo_version": release.version}


PROBES = (
    Probe(key="exo-node-id", command=_exo("exo-node-id"), read=_read_node_id,
          fills=("exo_api", "exo_node_id")),
    Probe(key="exo-state", command=_exo("exo-state"), read=_read_state,
          fills=("exo_state", "exo_coordinators", "exo_cluster")),
    Probe(key="exo-log", command=_exo("exo-log"), read=_read_log, fills=("exo_log", "exo_master")),
    Probe(key="exo-release", command=_exo("exo-release"), read=_read_release,
          fills=("exo_version",)),
    Probe(key="exo-daemons", command=lambda s: (exo_daemons_spec(),), fact="exo_daemons", parse=parse_exo_daemons),
)
_R = ("reachable",)
_API = ("exo-node-id",)
CHECKS = (
    Check(code="exo-running", title="exo's API answers on the node", order=100, judge=check_exo_running,
          reads=_API, depends=_R, fix="exo-service"),
    Check(code="exo-version", title="the same exo version on every node", order=110, judge=check_exo_version,
          reads=(*_API, "exo-release"), depends=(*_R, "exo-running"), mesh_wide=True),
    Check(code="exo-peers", title="exo on the node sees the mesh and the mesh sees it", order=120,
          judge=check_exo_peers, reads=(*_API, "exo-state"),
          depends=(*_R, "exo-running", "exo-version", "bridge", "ip-plan"), mesh_wide=True),
    Check(code="exo-rdma", title="an exo RDMA connection for every pair whose cable and ports are good", order=130,
          judge=check_exo_rdma, reads=(*_API, "exo-state", "rdma-ctl", *CABLING), depends=(*_R, "exo-running"),
          peers_depend=RDMA_PAIR_DEPENDS, mesh_wide=True),
    # JACCL errors on a node whose RDMA is off or wedged are that problem's consequence: reported by `rdma`.
    Check(code="exo-runners", title="no failed exo runner", order=140, judge=check_exo_runners,
          reads=(*_API, "exo-state"), depends=(*_R, "exo-running", "rdma")),
    Check(code="exo-log", title="no JACCL or runner error signature in exo's log since its last start, while it "
          "has no healthy runner", order=150, judge=check_exo_log, reads=(*_API, "exo-state", "exo-log"),
          depends=(*_R, "rdma", "exo-running", "exo-runners")),
    Check(code="exo-discovery", title="one exo master for the mesh, rank-0 addresses rank 0 holds (not its "
          "Thunderbolt Bridge)", order=158, judge=check_exo_discovery,
          reads=(*_API, "exo-state", "exo-log", "ifconfig"), depends=(*_R, "exo-running"),
          peers_depend=DISCOVERY_CAUSES, mesh_wide=True),
    Check(code="exo-models-dir", title="exo looks for models in the directory rollout fills (exo.models_dir)",
          order=220, judge=check_exo_models_dir, reads=("exo-daemons",), depends=_R),
    Check(code="exo-networksetup", title="exo's app's network daemon (io.exo.networksetup) is not loaded and will "
          "not load at boot", order=230, judge=check_exo_networksetup, reads=("exo-daemons",), depends=_R),
    Check(code="exo-api-exposure", title="exo's API reachable only from the Thunderbolt networks and the "
          "controller (pf anchor loaded, pf on)", order=240, judge=check_exo_api_exposure,
          reads=("pf-info", "pf-rules", "hardware-ports"), depends=_R, mesh_wide=True),
)
