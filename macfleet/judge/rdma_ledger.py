"""The RDMA resource ledger: how many more exo runner starts a node's RDMA devices can take before one fails for
want of a protection domain or a queue pair, and "reboot the mesh before the next start" while one is still left.

The model, with its sources:
- A Thunderbolt RDMA device has a small fixed number of protection domains and queue pairs (`ibv_devinfo -v`
  max_pd, max_qp: reported as 11; research/macos-outputs.md §8). The 11th `ibv_create_qp` on a device fails with
  errno 16 (EBUSY): "CAUGHT after 10 queue pairs" (ml-explore/mlx#4209, samples
  exo__mlx-pr-4209_queue_pair_limit_output.txt), so a device takes max_qp - 1 queue pairs, and max_pd domains.
- A runner start takes one protection domain and one queue pair on each device that faces a peer (JACCL opens
  each device of its row of the device matrix once, one connection per peer: research/exo.md §2.5; GUESS that
  it is exactly one each, docs/lab.md).
- A failed start may leave what it took held until a reboot (issue 28: "each failed runner start can leak some
  until the holders are reaped"). The ledger counts every failed start since boot as leaked: the safe side.
- macfleet reads no current use (facts/ledger.py: `ioclasscount AppleThunderboltRDMAProtectionDomain` is
  reported to count the protection domains, research/users-2026-12.md, dryvist/nix-ai, but is not read yet), so
  use = failed starts since boot + the running runner.
- exo rotates its log at each start (exo b5375f8 src/exo/shared/logging.py:75-86), so a log that begins after the
  boot gives only a lower bound: a finding when that bound already reaches it ("at least N"), else "could not
  tell", never "fine".
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from macfleet.facts.ledger import FailedStarts
from macfleet.facts.rdma import IbvDevinfoFacts

RESERVE = 1  # starts that must stay possible after the next one fails: below this, reboot before the next start
REBOOT_FIRST = "reboot the mesh before the next start of exo's model (`macfleet reboot`)"


@dataclass(frozen=True)
class Ledger:
    node: str
    capacity: int  # runner starts the tightest device takes since boot
    device: str  # that device
    failed: int  # failed runner starts since boot (at least, when not complete)
    complete: bool
    running: int  # runners holding the device now (0 or 1)
    short: str | None = None  # why `failed` is only a lower bound, when it is

    @property
    def left(self) -> int:
        return self.capacity - self.failed - self.running

    def evidence(self) -> str:
        at_least = "" if self.complete else "at least "
        return (f"{self.device}: room for {self.capacity} runner starts per boot (max_pd/max_qp); {at_least}"
                f"{self.failed} failed since boot, {self.running} running: {self.left} left")


def device_capacity(devinfo: IbvDevinfoFacts) -> tuple[int, str] | None:
    """The fewest starts any active device takes, and which device; None when no active device printed its
    limits (plain `ibv_devinfo`, or a macOS that prints none)."""
    caps = [(min(d.max_pd, d.max_qp - 1), d.name) for d in devinfo.devices
            if d.state == "PORT_ACTIVE" and d.max_pd is not None and d.max_qp is not None]
    return min(caps) if caps else None


def ledger(node: str, devinfo: IbvDevinfoFacts, failed: FailedStarts, running: bool) -> Ledger | str:
    """The node's ledger, or why it cannot be kept (a reason, never a guess)."""
    cap = device_capacity(devinfo)
    if cap is None:
        return "no active RDMA device printed its limits (max_pd, max_qp in `ibv_devinfo -v`)"
    return Ledger(node=node, capacity=cap[0], device=cap[1], failed=failed.count, complete=failed.complete,
                  running=int(running), short=None if failed.complete else _short(failed))


def _short(failed: FailedStarts) -> str:
    """Why the failed starts counted are only those since some time after the boot."""
    stamp = "%Y-%m-%d %H:%M:%S"
    boot = failed.boot.strftime(stamp) if failed.boot else "?"
    if failed.log_from is None:
        return f"exo's log holds no stamped line to compare with the boot at {boot}"
    start = failed.log_from.strftime(stamp)
    if not failed.whole_file:
        return (f"the end of exo's log read starts at {start}, after the boot at {boot}: failed starts before "
                "that are not counted")
    return (f"exo's log starts at {start}, after the boot at {boot}: exo was restarted since and rotates its log "
            "at each start; failed starts before that are not counted")


def verdict(led: Ledger) -> tuple[str, str] | None:
    """(severity, message) when the node should not see another start before a reboot, else None."""
    bound = "" if led.complete else f" (at least {led.failed} failed runner starts since boot: {led.short})"
    if led.left <= 0:
        return "error", (f"{led.node}'s RDMA device {led.device} is out of protection domains or queue pairs: the "
                         f"next runner start fails with errno 16 (EBUSY){bound}")
    if led.left <= RESERVE:
        return "warning", (f"{led.node}'s RDMA device {led.device} has room for {led.left} more runner start"
                           f"{'s' if led.left != 1 else ''}{'' if led.complete else ' at most'}: if the next one "
                           f"fails, the device is out{bound}")
    return None


def undecided(led: Ledger) -> str | None:
    """Why there is no telling, when the count is a lower bound that does not reach a finding."""
    return led.short if verdict(led) is None and not led.complete else None
