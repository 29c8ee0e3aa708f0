"""The RDMA resource ledger: how many more exo runner starts a node's RDMA devices can take before one fails for
want of a protection domain or a queue pair, and "reboot the mesh before the next start" while one is still left.

The model, with its sources:
- A Thunderbolt RDMA device has a small fixed number of protection domains and queue pairs (`ibv_devinfo -v`
  max_pd, max_qp: reported as 11 on every RDMA device, dryvist/nix-ai docs/runbooks/rdma-protection-domains.md
  at 0109b839359efebde2b08d10ab9db4ec4af0cccd; research/macos-outputs.md §8). The 11th `ibv_create_qp` on a
  device fails with errno 16 (EBUSY): "CAUGHT after 10 queue pairs" (ml-explore/mlx#4209, samples
  exo__mlx-pr-4209_queue_pair_limit_output.txt), so a device takes max_qp - 1 queue pairs, and max_pd domains.
- A runner start takes one protection domain and one queue pair on each device that faces a peer (JACCL opens
  each device of its row of the device matrix once, one connection per peer: research/exo.md §2.5; GUESS that
  it is exactly one each, docs/lab.md).
- The use is the kernel's count when it can be read: `ioclasscount AppleThunderboltRDMAProtectionDomain
  AppleThunderboltRDMAQueuePair` (facts/ledger.py; dryvist/nix-ai docs/runbooks/cluster-link-truths.md at
  af5aedae5636f2d473b2fed3bea2843ee203aa14: "The only direct kernel read", "use it, not the ledger"). It counts
  the whole node, every device together, and says nothing of how the count is spread. As JACCL opens each
  peer-facing device once per runner, the ledger takes each active device to hold an equal share:
  ceil(count / active devices), which is the least the fullest device holds (exact when every runner opened
  every active device, a lower bound for the fullest device otherwise). Left = max_pd - that share of the
  domains, or max_qp - 1 - that share of the queue pairs, whichever is less, on the tightest device.
- When the kernel's count cannot be read (the command fails, its output is not ioclasscount's, or a class is
  `<no such class>` or `??`), the use is estimated as before: a failed start may leave what it took held until
  a reboot (issue 28: "each failed runner start can leak some until the holders are reaped"; dryvist's "A
  leaked domain is a leaked process": only a reboot returns what a stuck process holds), so every failed start
  since boot counts as leaked, the safe side: use = failed starts since boot + the running runner. The
  evidence says which was used. exo rotates its log at each start (exo b5375f8
  src/exo/shared/logging.py:75-86), so a log that begins after the boot gives only a lower bound: a finding
  when that bound already reaches it ("at least N"), else "could not tell", never "fine".
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from macfleet.facts.ledger import FailedStarts, RdmaInUse
from macfleet.facts.rdma import IbvDevinfoFacts

RESERVE = 1  # starts that must stay possible after the next one fails: below this, reboot before the next start
REBOOT_FIRST = "reboot the mesh before the next start of exo's model (`macfleet reboot`)"


@dataclass(frozen=True)
class Rooms:
    """What the node's active RDMA devices take per boot, on the tightest of them."""

    device: str  # the device that takes the fewest starts
    starts: int  # runner starts it takes: min(max_pd, max_qp - 1)
    domains: int  # the fewest max_pd of the active devices
    queue_pairs: int  # the fewest max_qp - 1 of the active devices
    active: int  # PORT_ACTIVE devices: the kernel's node-wide counts are shared among them


@dataclass(frozen=True)
class KernelUse:
    """The kernel's counts in use (ioclasscount), all devices together."""

    domains: int
    queue_pairs: int
    devices: int  # the active devices they are shared among

    @property
    def per_device(self) -> tuple[int, int]:
        """(domains, queue pairs) the fullest device holds at least: ceil(count / devices)."""
        return -(-self.domains // self.devices), -(-self.queue_pairs // self.devices)


@dataclass(frozen=True)
class Ledger:
    node: str
    room: Rooms
    failed: FailedStarts | None  # exo's failed runner starts since boot; None: not counted (`failed_unread`)
    running: int  # runners holding the device now (0 or 1)
    kernel: KernelUse | None = None  # the kernel's count: the use, when read
    kernel_unread: str | None = None  # why the kernel's count is not the use
    failed_unread: str | None = None

    @property
    def capacity(self) -> int:
        return self.room.starts

    @property
    def device(self) -> str:
        return self.room.device

    @property
    def complete(self) -> bool:
        """Whether the use is all of it: the kernel's count, or every failed start since boot."""
        return self.kernel is not None or (self.failed is not None and self.failed.complete)

    @property
    def short(self) -> str | None:
        """Why the failed starts counted are only a lower bound, when the ledger rests on them."""
        return None if self.complete or self.failed is None else _short(self.failed)

    @property
    def left(self) -> int:
        if self.kernel is not None:
            domains, queue_pairs = self.kernel.per_device
            return min(self.room.domains - domains, self.room.queue_pairs - queue_pairs)
        assert self.failed is not None  # ledger() gives a reason instead when neither is known
        return self.room.starts - self.failed.count - self.running

    def _failed_text(self) -> str:
        if self.failed is None:
            return f"failed starts since boot not counted ({self.failed_unread})"
        return f"{'' if self.failed.complete else 'at least '}{self.failed.count} failed starts since boot"

    def evidence(self) -> str:
        head = f"{self.device}: room for {self.capacity} runner starts per boot (max_pd/max_qp)"
        k = self.kernel
        if k is not None:
            domains, queue_pairs = k.per_device
            return (f"{head}; kernel: {_n(k.domains, 'domain')}, {_n(k.queue_pairs, 'queue pair')} over "
                    f"{_n(k.devices, 'active device')} (the fullest holds at least {_n(domains, 'domain')} and "
                    f"{_n(queue_pairs, 'queue pair')}); {self._failed_text()}: {self.left} left")
        assert self.failed is not None
        at_least = "" if self.failed.complete else "at least "
        return (f"{head}; estimated, the kernel's count not read ({self.kernel_unread}): {at_least}"
                f"{self.failed.count} failed since boot, {self.running} running: {self.left} left")


def _n(count: int, what: str) -> str:
    return f"{count} {what}{'' if count == 1 else 's'}"


def device_rooms(devinfo: IbvDevinfoFacts) -> Rooms | None:
    """What the active devices take, on the tightest; None when no active device printed its limits (plain
    `ibv_devinfo`, or a macOS that prints none)."""
    active = [d for d in devinfo.devices if d.state == "PORT_ACTIVE"]
    limits = [(min(d.max_pd, d.max_qp - 1), d.name, d.max_pd, d.max_qp - 1) for d in active
              if d.max_pd is not None and d.max_qp is not None]
    if not limits:
        return None
    starts, device, _, _ = min(limits)
    return Rooms(device=device, starts=starts, domains=min(x[2] for x in limits),
                 queue_pairs=min(x[3] for x in limits), active=len(active))


def device_capacity(devinfo: IbvDevinfoFacts) -> tuple[int, str] | None:
    """The fewest starts any active device takes, and which device; None when no active device printed its
    limits."""
    room = device_rooms(devinfo)
    return None if room is None else (room.starts, room.device)


def kernel_use(kernel: RdmaInUse | str, room: Rooms) -> KernelUse | str:
    """The kernel's counts shared among the active devices, or why they cannot be the use."""
    if isinstance(kernel, str):
        return kernel
    unknown = [c.why or "no count" for c in (kernel.domains, kernel.queue_pairs) if c.count is None]
    if unknown:
        return "; ".join(unknown)
    assert kernel.domains.count is not None and kernel.queue_pairs.count is not None
    return KernelUse(domains=kernel.domains.count, queue_pairs=kernel.queue_pairs.count, devices=room.active)


def ledger(node: str, devinfo: IbvDevinfoFacts, failed: FailedStarts | str, running: bool,
           kernel: RdmaInUse | str) -> Ledger | str:
    """The node's ledger, or why it cannot be kept (a reason, never a guess). `failed` and `kernel` are the facts
    read, or why they could not be."""
    room = device_rooms(devinfo)
    if room is None:
        return "no active RDMA device printed its limits (max_pd, max_qp in `ibv_devinfo -v`)"
    use = kernel_use(kernel, room)
    if isinstance(use, str) and isinstance(failed, str):
        return (f"exo's failed runner starts since boot could not be counted: {failed}; and the kernel's count "
                f"was not read: {use}")
    return Ledger(node=node, room=room, failed=None if isinstance(failed, str) else failed, running=int(running),
                  kernel=None if isinstance(use, str) else use, kernel_unread=use if isinstance(use, str) else None,
                  failed_unread=failed if isinstance(failed, str) else None)


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
    failed = 0 if led.failed is None else led.failed.count
    bound = "" if led.complete else f" (at least {failed} failed runner starts since boot: {led.short})"
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
