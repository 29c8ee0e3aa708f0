"""The exo stand-in's discovery: its election, the rank-0 addresses of its instance, and two faults.

Sources (docs/lab.md lists the guesses):
- Election: each node elects the greatest candidate it can hear; with equal clocks, seniority and commands seen,
  the greatest master node id wins (exo b5375f8 src/exo/shared/election.py:28-40,222). The lab's nodes are equal
  but for their ids. Each outcome is logged: `Node elected Master - promoting self` / `- maintaining self`,
  `Node <id> elected master - demoting self` / `Node <id> elected master` (src/exo/main.py:206-241).
- Rank-0 addresses (`jacclCoordinators`): rank 0 gets `0.0.0.0:<port>`, every other node an address of rank 0
  chosen ethernet first, then wifi, unknown, maybe_ethernet, thunderbolt (src/exo/master/placement_utils.py:
  296-325,431-461; exo PR #1059). The port: GUESS (exo picks a random ephemeral one, src/exo/utils/ports.py).
- Fault `discoverySplit` (lab fault exo-split): the node's exo hears no peer and no peer hears it, so it elects
  itself: every node electing itself (exo PR #2192, issues #2257, #2271); GUESS for how it comes about.
- Fault `coordinatorAddress` (lab fault exo-coordinator): this node's view of the instance tells every non-rank-0
  node to reach rank 0 at the given address: master and worker disagreeing on rank 0's address (exo#2309, #2310).
"""

from __future__ import annotations

import hashlib

WHERE = "exo.main:_elect_loop:235"
ANY = "0.0.0.0"
PRIORITY = ("ethernet", "wifi", "unknown", "maybe_ethernet", "thunderbolt")


def split(faults: dict) -> bool:
    return bool(faults.get("discoverySplit"))


class Election:
    """The master this node follows, and the log line each change of it gets."""

    def __init__(self, own_id: str) -> None:
        self.own_id = own_id
        self.master: str | None = None

    def update(self, heard: list[str]) -> str | None:
        """Elect among the ids heard (own included); the line to log when the outcome changed, else None."""
        elected = max([*heard, self.own_id])
        if elected == self.master:
            return None
        was_master = self.master == self.own_id
        self.master = elected
        if elected == self.own_id:
            return "Node elected Master - promoting self"
        return f"Node {elected} elected master" + (" - demoting self" if was_master else "")


def port_for(instance_id: str) -> int:
    """GUESS: a stable port in exo's ephemeral range (49153-65535) per instance."""
    return 49153 + int(hashlib.sha256(instance_id.encode()).hexdigest()[:8], 16) % 16000


def _rank0_address(network: dict) -> str | None:
    v4 = [i for i in (network or {}).get("interfaces", []) if ":" not in str(i.get("ipAddress", ""))]
    for kind in PRIORITY:
        for i in v4:
            if i.get("interfaceType") == kind:
                return str(i["ipAddress"])
    return None


def coordinators(ids: list[str], networks: dict, instance_id: str, faults: dict) -> dict:
    """`jacclCoordinators` of an instance over `ids` (rank order): node id -> "ip:port"."""
    if not ids:
        return {}
    port = port_for(instance_id)
    wrong = faults.get("coordinatorAddress")
    rank0 = _rank0_address(networks.get(ids[0], {}))
    out = {ids[0]: f"{ANY}:{port}"}
    for nid in ids[1:]:
        address = str(wrong) if wrong else rank0
        if address:
            out[nid] = f"{address}:{port}"
    return out
