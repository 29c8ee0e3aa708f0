"""MLX's hostfile (`mlx.launch --hostfile`) for one mesh, from the cabling, the RDMA ports and the IP plan.

The format MLX's launcher reads (mlx `python/mlx/_distributed_utils/common.py`, `Hostfile`):
`{"backend": …, "envs": […], "hosts": [{"ssh": …, "ips": […], "rdma": […]}]}`, one host per rank.

- jaccl: ranks in inventory order; `ips` the management address (rank 0's is the coordinator every other
  rank connects to, so it must be reachable from all of them: not a Thunderbolt address); `rdma[j]` the
  RDMA device (`rdma_enX`) of the port the cable to rank j is in on this node, null on the diagonal. A pair
  whose cable is missing or whose port is not PORT_ACTIVE with an IPv4-mapped GID is refused, naming the
  pair: JACCL would only fail at run time.
- ring: ranks in inventory order (a full mesh has every ring); `ips` this node's planned address on the
  cable to the rank before it (rank i connects to rank i+1's addresses), `rdma` empty. The address must be
  live on that port (`macfleet topology apply`), else refused.

Nothing the launcher computes itself (coordinator port, MLX_IBV_DEVICES, MLX_RANK) is pinned: `envs` is empty.

Pure: inventory, plan and facts in, the hostfile or a refusal out.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from macfleet.inventory.model import Mesh
from macfleet.judge.ipplan import IpLink, IpPlan, NodeNetworkFacts, find_drift
from macfleet.judge.model import Refusal
from macfleet.judge.rdma import PortRdma, RdmaReport

MlxBackend = Literal["jaccl", "ring"]
BACKENDS: tuple[str, ...] = ("jaccl", "ring")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MlxHost(_Model):
    ssh: str
    ips: list[str]
    rdma: list[str | None]


class MlxHostfile(_Model):
    backend: MlxBackend
    envs: list[str] = Field(default_factory=list)
    hosts: list[MlxHost]

    def json_payload(self) -> dict:
        """Exactly the keys MLX's `Hostfile.to_json` writes, in its order."""
        return {"backend": self.backend, "envs": list(self.envs),
                "hosts": [{"ssh": h.ssh, "ips": list(h.ips), "rdma": list(h.rdma)} for h in self.hosts]}

    def text(self) -> str:
        """The file as MLX's own `mlx.distributed_config` writes it (indent 4)."""
        return json.dumps(self.json_payload(), indent=4) + "\n"


def _pair_link(plan: IpPlan, mesh: str, x: str, y: str) -> IpLink | None:
    return next((lk for lk in plan.links if lk.mesh == mesh and {lk.a.node, lk.b.node} == {x, y}), None)


def _port(report: RdmaReport, node: str, device: str) -> PortRdma | None:
    n = report.node(node)
    return next((p for p in n.ports if p.port == device), None) if n else None


def _end_trouble(report: RdmaReport, node: str, device: str) -> str | None:
    """Why this end of a cable cannot carry JACCL, or None when it can."""
    p = _port(report, node, device)
    if p is None:
        return f"{node} {device}: its RDMA state was not read"
    if p.state != "active":
        return f"{node} {device} is {'PORT_DOWN' if p.state == 'down' else 'in an unknown state'}" + (
            f" ({p.why})" if p.why else "")
    if p.gid_v4 is None:
        return f"{node} {device} has no IPv4-mapped GID" + (f" ({p.why})" if p.why else "")
    return None


def _rdma_matrix(mesh: Mesh, plan: IpPlan, report: RdmaReport) -> tuple[list[list[str | None]], list[str], set[str]]:
    """Each rank's row of rdma_enX (null on the diagonal), the pairs refused with why, the nodes named."""
    names = mesh.node_names
    rows: list[list[str | None]] = [[None] * len(names) for _ in names]
    refused: list[str] = []
    nodes: set[str] = set()
    for j, y in enumerate(names):
        for i, x in enumerate(names[:j]):
            lk = _pair_link(plan, mesh.name, x, y)
            ex, ey = (lk.end(x), lk.end(y)) if lk else (None, None)
            if ex is None or ey is None or ex.port is None or ey.port is None:
                refused.append(f"{x} and {y}: no cable between them")
                nodes |= {x, y}
                continue
            troubles = [t for t in (_end_trouble(report, x, ex.port), _end_trouble(report, y, ey.port)) if t]
            if troubles:
                refused.append(f"{x} and {y}: no active RDMA port ({'; '.join(troubles)})")
                nodes |= {x, y}
                continue
            rows[i][j], rows[j][i] = f"rdma_{ex.port}", f"rdma_{ey.port}"
    return rows, refused, nodes


def _management_ips(mesh: Mesh) -> tuple[dict[str, str], list[str]]:
    ips: dict[str, str] = {}
    bad: list[str] = []
    for n in mesh.nodes:
        try:
            ips[n.name] = str(ipaddress.ip_address(n.address))
        except ValueError:
            bad.append(n.name)
    return ips, bad


def _ssh(mesh: Mesh) -> list[str]:
    return [f"{n.user}@{n.address}" if n.user else n.address for n in mesh.nodes]


def jaccl_hostfile(mesh: Mesh, plan: IpPlan, report: RdmaReport) -> MlxHostfile | Refusal:
    mgmt, bad = _management_ips(mesh)
    if bad:
        return Refusal(reason="the JACCL coordinator needs an IP address; the inventory gives a host name for "
                       + ", ".join(bad), nodes=bad)
    rows, refused, nodes = _rdma_matrix(mesh, plan, report)
    if refused:
        return Refusal(reason="JACCL needs an active RDMA port on a direct cable between every pair: "
                       + "; ".join(refused), nodes=[n for n in mesh.node_names if n in nodes])
    hosts = [MlxHost(ssh=s, ips=[mgmt[n]], rdma=row) for s, n, row in zip(_ssh(mesh), mesh.node_names, rows,
                                                                              strict=True)]
    return MlxHostfile(backend="jaccl", hosts=hosts)


def ring_hostfile(mesh: Mesh, plan: IpPlan, network: Mapping[str, NodeNetworkFacts]) -> MlxHostfile | Refusal:
    names = mesh.node_names
    drift = {(d.node, d.port): d for d in find_drift(plan, network)}
    ips: list[str] = []
    refused: list[str] = []
    nodes: set[str] = set()
    for i, x in enumerate(names):
        left = names[i - 1]
        lk = _pair_link(plan, mesh.name, x, left)
        end = lk.end(x) if lk else None
        far = lk.end(left) if lk else None
        why = None
        if end is None or far is None or end.port is None or far.port is None:
            why = f"{x} and {left}: no cable between them"
        elif network.get(x) is None or network[x].ifconfig is None:
            why = f"{x}: its addresses could not be read"
        elif (x, end.port) in drift:
            d = drift[(x, end.port)]
            why = (f"{x} {end.port} (to {left}) has {', '.join(d.found) or 'no address'}, not the planned "
                   f"{d.expected}")
        if why is not None:
            refused.append(why)
            nodes |= {x, left}
            continue
        ips.append(end.address)
    if refused:
        return Refusal(reason="the ring backend needs each node's planned address live on the cable to the node "
                       "before it: " + "; ".join(refused), nodes=[n for n in names if n in nodes])
    return MlxHostfile(backend="ring", hosts=[MlxHost(ssh=s, ips=[a], rdma=[]) for s, a in zip(_ssh(mesh), ips,
                                                                                               strict=True)])


def mlx_hostfile(mesh: Mesh, plan: IpPlan, report: RdmaReport, network: Mapping[str, NodeNetworkFacts],
                 backend: MlxBackend) -> MlxHostfile | Refusal:
    """The hostfile for `backend`, or why not. `plan` is bound to the live cables (`bind_ports`)."""
    if len(mesh.nodes) < 2:
        return Refusal(reason=f"mesh {mesh.name} has {len(mesh.nodes)} node(s); a distributed job needs two or more",
                       nodes=mesh.node_names)
    if backend == "jaccl":
        return jaccl_hostfile(mesh, plan, report)
    return ring_hostfile(mesh, plan, network)
