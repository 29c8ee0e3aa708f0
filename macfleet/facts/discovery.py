"""exo's discovery as one node sees it: the master it follows (its log) and the coordinator addresses of the
instances in its `/state`.

- exo's `/state` does not say who is master (exo b5375f8 src/exo/shared/types/state.py:30-72); each node logs
  the outcome of every election: `Node elected Master` (itself; `- maintaining self` / `- promoting self` at
  HEAD) or `Node <id> elected master` (`- demoting self`): exo b5375f8 src/exo/main.py:206-241; the plain
  `Node elected Master` of exo 1.0.71 is in exo#2067's log. The last one since exo's last start is the master
  it follows now.
- A JACCL instance carries `jacclCoordinators`: node id -> "ip:port" of rank 0 as that node must reach it,
  `0.0.0.0:port` for rank 0 itself (exo b5375f8 src/exo/shared/types/worker/instances.py:33-35;
  src/exo/master/placement_utils.py:431-461). A ring instance carries `hostsByNode`: node id -> [{ip, port}]
  (instances.py:28-30; shared/types/common.py:67-72).
"""

from __future__ import annotations

import re

from pydantic import Field

from macfleet.errors import FactsParseError
from macfleet.facts._common import Facts
from macfleet.facts.exo import START_LINE, load_state

_SELF = re.compile(r"\bNode elected Master\b")
_OTHER = re.compile(r"\bNode (?P<id>[A-Za-z0-9]+) elected master\b")
SELF = "self"
ANY_ADDRESS = "0.0.0.0"


class Coordinators(Facts):
    instance_id: str
    backend: str  # "MlxJacclInstance", "MlxRingInstance"
    addresses: dict[str, list[str]] = Field(default_factory=dict)  # node id -> the ip(s) it was given


def master_followed(log_text: str) -> str | None:
    """The node id this node's exo follows as master since its last start, SELF for itself; None when no
    election outcome is in the lines read."""
    found = None
    for line in log_text.splitlines():
        if START_LINE.search(line):
            found = None
        elif _SELF.search(line):
            found = SELF
        elif m := _OTHER.search(line):
            found = m.group("id")
    return found


def _ip(address: str) -> str:
    return address.rsplit(":", 1)[0] if ":" in address else address


def parse_coordinators(state_text: str) -> list[Coordinators]:
    return coordinators_of(load_state(state_text))


def coordinators_of(state: dict) -> list[Coordinators]:
    """Each instance's rank-0 addresses from `/state` (facts/exo.py `load_state`; its `instances`); an instance
    of another kind has none."""
    instances = state.get("instances") or {}
    if not isinstance(instances, dict):
        raise FactsParseError("GET /state", "an `instances` map", line=1, found=str(instances)[:80])
    out = []
    for iid, tagged in instances.items():
        if not isinstance(tagged, dict) or len(tagged) != 1:
            continue
        [(backend, body)] = tagged.items()
        if not isinstance(body, dict):
            continue
        if isinstance(coords := body.get("jacclCoordinators"), dict):
            addrs = {str(n): [_ip(str(a))] for n, a in coords.items()}
        elif isinstance(hosts := body.get("hostsByNode"), dict):
            addrs = {str(n): [str(h.get("ip")) for h in hs if isinstance(h, dict)] for n, hs in hosts.items()
                     if isinstance(hs, list)}
        else:
            continue
        out.append(Coordinators(instance_id=str(iid), backend=str(backend), addresses=addrs))
    return out
