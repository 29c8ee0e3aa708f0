"""`macfleet export …`: what macfleet knows about a mesh (cabling, RDMA ports, IP plan), handed to another
engine in that engine's own format. One collection pass, judged; nothing on the nodes changes."""

from __future__ import annotations

from pathlib import Path

from macfleet.act.files import check_plain_file_path, write_text_atomic
from macfleet.collect.gather import gather
from macfleet.errors import Refused, UnreachableError, UsageError
from macfleet.flow.rdma import RDMA_SPECS, rdma_facts
from macfleet.flow.topology import plan_live
from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge.ipplan import NodeNetworkFacts, bind_ports, plan_ip
from macfleet.judge.llama_rpc import RpcList, rpc_list
from macfleet.judge.mlx import BACKENDS as MLX_BACKENDS
from macfleet.judge.mlx import MlxBackend, MlxHostfile, mlx_hostfile
from macfleet.judge.model import Refusal
from macfleet.judge.rdma import NodeRdmaFacts, judge_rdma
from macfleet.judge.topology import NodeTopologyFacts, check_cabling

__all__ = ["MLX_BACKENDS", "export_llama_rpc", "export_mlx_hostfile"]


def _topology_facts(f: NodeRdmaFacts) -> NodeTopologyFacts:
    return NodeTopologyFacts(thunderbolt=f.thunderbolt, hardware_ports=f.hardware_ports, ibv_devices=f.ibv_devices,
                             ibv_devinfo=f.ibv_devinfo, ifconfig=f.ifconfig, problems=list(f.problems))


def _network_facts(f: NodeRdmaFacts) -> NodeNetworkFacts:
    return NodeNetworkFacts(hardware_ports=f.hardware_ports, ifconfig=f.ifconfig, problems=list(f.problems))


def export_mlx_hostfile(fleet: Fleet, mesh: Mesh, backend: MlxBackend, out: Path | None = None) -> MlxHostfile:
    """One pass over the mesh (the `rdma status` commands, which hold what the cabling check and the IP plan
    read too), then the hostfile, written to `out` when given; UnreachableError or Refused (naming the pairs)
    instead of a partial one, and then nothing is written."""
    if out is not None:
        check_plain_file_path(out)  # bad input is refused before any node is dialled
    gathered = gather(fleet, mesh.nodes, RDMA_SPECS)
    if gathered.unreachable:
        raise UnreachableError(dict(gathered.unreachable), hint="no hostfile: every rank must be read")
    if gathered.failed:  # a read that did not answer is not a missing cable: say which, and judge nothing
        unread = [f"{n}: {key} ({why})" for n, keys in sorted(gathered.failed.items()) for key, why in keys.items()]
        raise Refused("no hostfile: these reads did not answer: " + "; ".join(unread),
                      hint="run the export again; if a read keeps failing, run it by hand on that node",
                      details={"nodes": sorted(gathered.failed)})
    facts = {n: rdma_facts(gathered, n) for n in mesh.node_names}
    report = judge_rdma([mesh], facts)
    cabling = check_cabling(mesh, {n: _topology_facts(f) for n, f in facts.items()})
    plan = bind_ports(plan_ip(fleet, mesh.name), {mesh.name: cabling})
    result = mlx_hostfile(mesh, plan, report, {n: _network_facts(f) for n, f in facts.items()}, backend)
    if isinstance(result, Refusal):
        fix = ("`macfleet rdma status` and `macfleet topology check` say what each port lacks" if backend == "jaccl"
               else "`macfleet topology apply` puts the planned addresses on the cabled ports")
        raise Refused(result.reason, hint=fix, details={"nodes": result.nodes})
    if out is not None:
        write_text_atomic(out, result.text())
    return result



def export_llama_rpc(fleet: Fleet, mesh: Mesh, head: str | None) -> RpcList:
    """One pass (the IP plan's: the live cables and addresses), then the head's `--rpc` list; UsageError for a
    head not in the mesh, UnreachableError or Refused (naming the workers) instead of a list with a hole."""
    head = head or mesh.node_names[0]
    if head not in mesh.node_names:
        raise UsageError(f"--head {head!r} is not a node of mesh {mesh.name}",
                         hint="nodes: " + ", ".join(mesh.node_names))
    live = plan_live(fleet, [mesh])
    if live.gathered.unreachable:
        raise UnreachableError(live.unreachable, hint="no --rpc list: every worker must be read")
    result = rpc_list(mesh, live.plan, live.facts, head, mesh.settings.llama.rpc_port)
    if isinstance(result, Refusal):
        raise Refused(result.reason, hint="`macfleet topology check`, then `macfleet topology apply`",
                      details={"nodes": result.nodes})
    return result
