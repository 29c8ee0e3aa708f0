"""llama.cpp's rpc-server, where the inventory enables it: on the Thunderbolt addresses only."""

from __future__ import annotations

from macfleet.facts.commands import PF_ANCHOR, spec_for
from macfleet.facts.sockets import parse_netstat_listen
from macfleet.judge.checks.base import (
    Check,
    HealthContext,
    HealthFinding,
    Probe,
    Unknown,
    Verdict,
)
from macfleet.judge.checks.network import CABLING, pf_exposure
from macfleet.judge.ipplan import bind_ports, plan_ip
from macfleet.judge.llama_rpc import LABEL_PREFIX, judge_listeners, rpc_bindings

# ------------------------------------------------------------------------------------ llama.cpp's rpc-server


def check_llama_rpc(ctx: HealthContext, node: str) -> Verdict:
    """Where the inventory enables llama-rpc: rpc-server (unauthenticated) listens on each of the node's
    Thunderbolt addresses, and on nothing else (not on every address, not on a LAN address)."""
    mesh = ctx.mesh_of(node)
    if not mesh.settings.llama.enabled:
        return []
    f = ctx.facts[node]
    report = ctx.cabling.get(mesh.name)
    if report is None:
        return Unknown(reason="the cabling could not be judged")
    if f.tcp_sockets is None:
        return Unknown(reason=f.why("netstat-listen"))
    bindings = rpc_bindings(bind_ports(plan_ip(ctx.fleet, mesh.name), {mesh.name: report}), mesh.name, node)
    if not bindings:
        return Unknown(reason=f"{node} has no live Thunderbolt link: no address for rpc-server to listen on")
    port = mesh.settings.llama.rpc_port
    # rpc-server binds its Thunderbolt addresses, but a Mac takes a packet for any of its addresses on any
    # interface: only the packet filter keeps a LAN host with a route to that subnet out (hostile.md row 11)
    pf = pf_exposure(f, port, sources_ok=False)
    v = judge_listeners([(s.local_address, s.local_port) for s in f.tcp_sockets.sockets if s.state == "LISTEN"],
                        bindings, port)
    evidence = "netstat -an -p tcp: " + (", ".join(f"{s.local_address}.{s.local_port}"
                                                    for s in f.tcp_sockets.listening(port)) or f"nothing on {port}")
    out = []
    if v.exposed:
        out.append(HealthFinding(
            node=node, check="llama-rpc", severity="error",
            message=f"rpc-server's port {port} on {node} listens on {', '.join(v.exposed)}: llama.cpp's RPC "
                    "server is unauthenticated and must listen on the Thunderbolt addresses only",
            fix=f"find the process (`lsof -nP -iTCP:{port} -sTCP:LISTEN` on {node}) and stop it; "
                "`macfleet rollout llama-rpc` runs rpc-server bound to each Thunderbolt address only",
            evidence=evidence))
    if v.missing:
        out.append(HealthFinding(
            node=node, check="llama-rpc", severity="error",
            message=f"rpc-server on {node} is not listening on {', '.join(v.missing)} (port {port})",
            fix=f"`macfleet rollout llama-rpc` (or `sudo launchctl kickstart -k system/{LABEL_PREFIX}.N` on "
                f"{node}); its log is ~/Library/Logs/llama-rpc.N.log",
            evidence=evidence))
    if isinstance(pf, str):
        out.append(HealthFinding(
            node=node, check="llama-rpc", severity="error",
            message=f"rpc-server's port {port} on {node} (unauthenticated) is reachable from the LAN: {pf}",
            fix=("switch pf on now (`sudo pfctl -E`); " if pf.startswith("pf is off") else "")
            + "`macfleet bootstrap` loads the packet-filter anchor that lets rpc-server's port in only on the "
              "Thunderbolt interfaces (docs/runbooks/llama-rpc.md)",
            evidence=f"pfctl -s info: {f.pf_info.status_line if f.pf_info else '?'}; pfctl -a {PF_ANCHOR} "
                     f"-s rules: {len(f.pf_rules.rules) if f.pf_rules else '?'} rules"))
    elif isinstance(pf, Unknown) and not out:
        return pf
    return out


# ------------------------------------------------------------------------------------------- declarations

PROBES = (
    # every TCP socket, read where llama-rpc is enabled
    Probe(key="netstat-listen", command=lambda s: (spec_for("netstat-listen"),) if s.mesh.settings.llama.enabled
          else (), fact="tcp_sockets", parse=parse_netstat_listen),
)
CHECKS = (
    Check(code="llama-rpc", title="where llama-rpc is enabled, rpc-server listens on each Thunderbolt address and "
          "nowhere else, and the packet filter lets its port in on the Thunderbolt interfaces only", order=250,
          judge=check_llama_rpc, reads=(*CABLING, "netstat-listen", "pf-info", "pf-rules"),
          depends=("reachable", "cabling", "bridge", "ip-plan"), mesh_wide=True),
)
