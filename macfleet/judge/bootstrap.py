"""What bootstrap cannot do over SSH and a person must: pure decisions from facts, each with its fix."""

from __future__ import annotations

from macfleet.facts.rdma import RdmaCtlFacts
from macfleet.facts.system import FdesetupFacts

# Apple TN3205: RDMA over Thunderbolt is switched on only in Recovery, at the Mac.
RDMA_STEPS = ("shut the Mac down; hold its power button until \"Loading startup options\"; Options > Continue; "
              "an admin password; Utilities > Terminal; `rdma_ctl enable`; restart")


def rdma_needs(node: str, rdma: RdmaCtlFacts | None) -> str | None:
    """A line for a node whose RDMA is off or could not be read; None when it is on."""
    if rdma is not None and rdma.enabled:
        return None
    state = "off" if rdma is not None else "unknown (`rdma_ctl status` could not be read)"
    return (f"RDMA over Thunderbolt is {state} on {node}; it can only be switched on at the Mac, in Recovery. "
            f"Fix: `macfleet rdma enable {node}` walks you through it ({RDMA_STEPS}).")


def filevault_record(fdesetup: FdesetupFacts | None) -> dict[str, bool | None]:
    """What goes into the inventory: whether FileVault is on and whether an unattended reboot comes back by
    itself (null: could not tell). With FileVault on it needs `fdesetup authrestart` or macOS 26's SSH unlock."""
    if fdesetup is None:
        return {"enabled": None, "unattended_reboot": None}
    return {"enabled": fdesetup.filevault_on, "unattended_reboot": not fdesetup.filevault_on}
