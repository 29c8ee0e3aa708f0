"""Whether a coordinated mesh reboot may go ahead: pure `preflight(...) -> RebootPlan | Refusal`.

Refused before any node goes down when: the cluster lock is held by a live holder; a node could not be
read (its FileVault state is unknown, so its reboot might strand it at the unlock screen); FileVault is on
somewhere and no usable credential is stored for `fdesetup authrestart`; or (for `watch`) now is outside
every maintenance window. Each refusal says why and what to do. No I/O: the caller passes what it read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from macfleet.facts.system import FdesetupFacts
from macfleet.inventory.model import Mesh
from macfleet.judge.model import Refusal
from macfleet.judge.remediation import describe_window, in_windows

Method = Literal["shutdown", "authrestart", "unknown"]  # unknown: its FileVault state could not be read


@dataclass(frozen=True)
class NodeReboot:
    node: str
    method: Method  # `sudo shutdown -r now`, or `sudo fdesetup authrestart` with the stored credential
    why: str


# A mesh reboot's phases, in words.
PHASES = ("stop exo on every node", "reboot every node at once", "wait for every node",
          "verify RDMA ports, IP plan and cabling", "start exo where it ran", "verify exo's /state",
          "place the declared models again, a token through every placed model")
ISSUED = 2  # PHASES[ISSUED:] are what a resumed reboot runs


@dataclass(frozen=True)
class RebootPlan:
    mesh: str
    nodes: list[NodeReboot]
    reason: str
    timeout_s: float
    phases: list[str] = field(default_factory=lambda: list(PHASES))

    def describe(self) -> list[str]:
        lines = [f"reboot mesh {self.mesh} ({len(self.nodes)} nodes): {self.reason}"]
        lines += [f"  {n.node}: {n.method} ({n.why})" for n in self.nodes]
        lines += [f"  {i}. {p}" for i, p in enumerate(self.phases, 1)]
        lines.append(f"  every node must be back within {self.timeout_s:g} s")
        return lines


def preflight(
    mesh: Mesh,
    nodes: list[str],
    filevault: dict[str, FdesetupFacts | str],
    *,
    credential: str | None,
    lock_holder: str | None,
    now: datetime,
    reason: str,
    respect_windows: bool,
) -> RebootPlan | Refusal:
    """`filevault`: node -> its `fdesetup status`, or why it could not be read. `credential`: None when a
    usable FileVault credential is stored, else why not. `lock_holder`: who holds a live cluster lock."""
    if lock_holder is not None:
        return Refusal(reason=f"the cluster is locked by {lock_holder}; wait for it to finish", nodes=[])
    windows = mesh.settings.remediation.windows
    if respect_windows and not in_windows(windows, now):
        return Refusal(reason=f"now ({now.isoformat(timespec='minutes')}) is outside the maintenance window "
                              f"({'; '.join(describe_window(w) for w in windows)})", nodes=[])
    unread = {n: v for n, v in filevault.items() if isinstance(v, str)}
    missing = [n for n in nodes if n not in filevault]
    if unread or missing:
        why = "; ".join([*(f"{n}: {v}" for n, v in sorted(unread.items())), *(f"{n}: not read" for n in missing)])
        return Refusal(reason=f"could not read FileVault on {', '.join(sorted([*unread, *missing]))} ({why}): "
                              "a node whose state is unknown may stay at the unlock screen; nothing was rebooted",
                       nodes=sorted([*unread, *missing]))
    locked = [n for n in nodes if isinstance(filevault[n], FdesetupFacts) and filevault[n].filevault_on]
    if locked and credential is not None:
        return Refusal(reason=f"FileVault is on on {', '.join(locked)} and {credential}: after a plain reboot "
                              "they would wait at the unlock screen. Store a FileVault user's password in a file "
                              "only you can read (mode 0600) and name it in macfleet_reboot.filevault_credential_file, "
                              "or turn FileVault off at the Mac (docs/runbooks/unattended-reboot.md); "
                              "nothing was rebooted", nodes=locked)
    return sketch(mesh, nodes, filevault, reason)  # every node read: the whole plan


def sketch(mesh: Mesh, nodes: list[str], filevault: dict[str, FdesetupFacts | str], reason: str) -> RebootPlan:
    """The plan as far as it can be told, shown beside a refusal under --check (a hung node must not hide the
    rest of the plan): a node that could not be read says so, and what to do about it."""
    def one(n: str) -> NodeReboot:
        f = filevault.get(n)
        if isinstance(f, FdesetupFacts):
            return (NodeReboot(n, "authrestart", "FileVault on: one-time unlock with the stored credential")
                    if f.filevault_on else NodeReboot(n, "shutdown", "FileVault off"))
        return NodeReboot(n, "unknown", f"could not be read ({f or 'not read'}): power-cycle it at the rack, "
                                        "unlock it if it waits at the FileVault screen (`macfleet unlock`), "
                                        "then run this again")
    return RebootPlan(mesh=mesh.name, nodes=[one(n) for n in nodes], reason=reason,
                      timeout_s=mesh.settings.reboot.timeout_s)
