"""llama.cpp's RPC mode: the `--rpc host:port,…` list the head node passes to `llama-cli` / `llama-server`.

One entry per worker: that worker's planned address on its direct cable to the head, so the tensors go over
Thunderbolt and never over Ethernet; the port is the mesh's `macfleet_llama.rpc_port` (by default rpc-server's own,
LLAMA_RPC_PORT in macfleet/constants.py). A worker without a live cable to the head, or whose address is not live
on that port, is refused by name: a list with a hole would make llama.cpp fail, or silently run without that worker.

Pure: inventory, plan and facts in, the list or a refusal out.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from macfleet.constants import LLAMA_RPC_LABEL_PREFIX
from macfleet.inventory.model import Mesh
from macfleet.judge.ipplan import IpPlan, NodeNetworkFacts, find_drift
from macfleet.judge.model import Refusal


class RpcWorker(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    address: str
    port: int
    head_port: str  # the head's enX on that cable


class RpcList(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    head: str
    workers: list[RpcWorker]

    @property
    def rpc(self) -> str:
        return ",".join(f"{w.address}:{w.port}" for w in self.workers)

    def json_payload(self) -> dict:
        return {"head": self.head, "rpc": self.rpc,
                "workers": [{"node": w.node, "address": w.address, "port": w.port} for w in self.workers]}


def rpc_list(mesh: Mesh, plan: IpPlan, network: Mapping[str, NodeNetworkFacts], head: str, port: int
             ) -> RpcList | Refusal:
    """Workers in inventory order (every node of the mesh but the head)."""
    drift = {(d.node, d.port): d for d in find_drift(plan, network)}
    workers: list[RpcWorker] = []
    refused: list[str] = []
    named: list[str] = []
    for w in mesh.node_names:
        if w == head:
            continue
        lk = next((x for x in plan.links if x.mesh == mesh.name and {x.a.node, x.b.node} == {w, head}), None)
        end, far = (lk.end(w), lk.end(head)) if lk else (None, None)
        if end is None or far is None or end.port is None or far.port is None:
            refused.append(f"{w}: no live cable to {head}")
        elif network.get(w) is None or network[w].ifconfig is None:
            refused.append(f"{w}: its addresses could not be read")
        elif (w, end.port) in drift:
            d = drift[(w, end.port)]
            refused.append(f"{w} {end.port} (to {head}) has {', '.join(d.found) or 'no address'}, not the planned "
                           f"{d.expected}")
        else:
            workers.append(RpcWorker(node=w, address=end.address, port=port, head_port=far.port))
            continue
        named.append(w)
    if refused:
        return Refusal(reason=f"every worker needs its planned address live on a direct cable to {head}: "
                       + "; ".join(refused), nodes=named)
    return RpcList(head=head, workers=workers)


# ------------------------------------------------------------------------------------- where rpc-server binds

# One LaunchDaemon per address (rpc-server's `-H` takes one host): LLAMA_RPC_LABEL_PREFIX.<i>, i = 0..7 (a
# node of an 8-node mesh has 7 Thunderbolt links). The sudoers drop-in names these labels with one digit.
LABEL_PREFIX = LLAMA_RPC_LABEL_PREFIX
MAX_JOBS = 8


class RpcBinding(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    index: int  # the job's number: its label is LABEL_PREFIX.<index>
    address: str  # the node's planned address on one live Thunderbolt link
    port: str  # the enX carrying that link
    peer: str

    @property
    def label(self) -> str:
        return f"{LABEL_PREFIX}.{self.index}"


def rpc_bindings(plan: IpPlan, mesh: str, node: str) -> list[RpcBinding]:
    """The node's planned addresses on its live Thunderbolt links (the plan bound to the cabling), ordered by
    peer in the plan's order: rpc-server is bound to each, and to nothing else."""
    out: list[RpcBinding] = []
    for lk in plan.links:
        if lk.mesh != mesh or node not in (lk.a.node, lk.b.node):
            continue
        end, far = lk.end(node), lk.other(node)
        if end is None or end.port is None or far.port is None:
            continue
        out.append(RpcBinding(node=node, index=len(out), address=end.address, port=end.port, peer=far.node))
    return out[:MAX_JOBS]


def jobs_in_place(plists: Mapping[int, Mapping], bindings: list[RpcBinding], program: str, port: int,
                  user: str) -> bool:
    """Whether the node's rpc-server plists (index -> {"args", "user"}, read from the node) are exactly the jobs
    wanted: one per binding, running `program -H address -p port` as `user`, and no other. When they are,
    the playbook that writes them has nothing to do and is not run."""
    wanted = {b.index: [program, "-H", b.address, "-p", str(port)] for b in bindings}
    if set(plists) != set(wanted):
        return False
    return all(list(plists[i].get("args") or []) == args and plists[i].get("user") == user
               for i, args in wanted.items())


class ListenVerdict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    exposed: list[str]  # listeners outside the Thunderbolt addresses ("*" = every address, or a LAN address)
    missing: list[str]  # Thunderbolt addresses with no listener


def judge_listeners(listening: list[tuple[str, int | None]], bindings: list[RpcBinding], port: int
                    ) -> ListenVerdict:
    """`listening`: (local address, port) of every LISTEN socket on the node (netstat's `*` = every address).
    rpc-server must listen on `port` at each binding's address and at no other address."""
    wanted = {b.address for b in bindings}
    on_port = sorted({a for a, p in listening if p == port})
    exposed = [("every address (*)" if a == "*" else a) for a in on_port if a not in wanted]
    served = set(on_port) if "*" not in on_port else {b.address for b in bindings}  # * serves them, exposed
    missing = [f"{b.address} ({b.port}, to {b.peer})" for b in bindings if b.address not in served]
    return ListenVerdict(exposed=exposed, missing=missing)


# ----------------------------------------------------------------------------- rollout: health gate, report


def knock_targets(bindings: Mapping[str, list[RpcBinding]], port: int
                  ) -> tuple[dict[str, list[tuple[str, int]]], dict[str, RpcBinding]]:
    """Each job is knocked on from the peer at the other end of its cable (the way the head will reach it):
    prober -> [(address, port)], and "address:port" -> the job."""
    targets: dict[str, list[tuple[str, int]]] = {}
    by_key: dict[str, RpcBinding] = {}
    for node in bindings:
        for b in bindings[node]:
            targets.setdefault(b.peer, []).append((b.address, port))
            by_key[f"{b.address}:{port}"] = b
    return targets, by_key


def rpc_health(answers: Mapping[str, str | None], by_key: Mapping[str, RpcBinding]) -> list[str]:
    """Why the rollout is not healthy (empty: every job accepted a connection from its peer)."""
    reasons = []
    for key, b in sorted(by_key.items(), key=lambda kv: (kv[1].node, kv[1].index)):
        if key not in answers:
            reasons.append(f"{b.node} {b.label} ({key} on {b.port}): {b.peer} did not say whether it connected")
        elif answers[key] is not None:
            reasons.append(f"{b.node} {b.label} ({key} on {b.port}): {b.peer} could not connect: {answers[key]}")
    return reasons


class LlamaRolloutReport(BaseModel):
    """`rollout llama-rpc [--check]`: the release, the jobs each node runs (or would run), and what was done."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    result: str  # "switched", "already", "check"
    release: str
    previous: str | None
    rpc_port: int
    jobs: dict[str, list[RpcBinding]]
    staged: list[str]  # nodes that received the release (under --check: would receive it)
    would: list[str] = []  # under --check: each step, in words
    took_s: float = 0.0

    def json_payload(self) -> dict:
        return {"result": self.result, "release": self.release, "previous": self.previous, "rpc_port": self.rpc_port,
                "staged": self.staged, "would": self.would, "took_s": self.took_s,
                "jobs": {n: [{"label": b.label, "address": b.address, "port": b.port, "peer": b.peer} for b in js]
                         for n, js in self.jobs.items()}}
