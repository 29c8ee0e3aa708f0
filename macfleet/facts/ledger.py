"""What the RDMA resource ledger reads besides `ibv_devinfo -v`'s limits: the kernel's count of the protection
domains and queue pairs in use (`ioclasscount`), when the node booted (`sysctl -n kern.boottime`) and how many of
exo's runners failed since then (exo's log).

The current use is the kernel's count: `ioclasscount AppleThunderboltRDMAProtectionDomain
AppleThunderboltRDMAQueuePair` (facts/commands.py IOCLASSCOUNT) prints the number of instances of each class,
all RDMA devices of the node together. dryvist/nix-ai docs/runbooks/cluster-link-truths.md (commit
af5aedae5636f2d473b2fed3bea2843ee203aa14): "The only direct kernel read is `ioclasscount
AppleThunderboltRDMAProtectionDomain` (and `AppleThunderboltRDMAQueuePair` for mesh state) — use it, not the
ledger, when deciding whether a host can still cluster"; its attempt-based ledger "once read `domains=3` against a
real count of zero". The output format is Apple's source (IOKitTools/ioclasscount.tproj/ioclasscount.c at
04b1b654a84a3c15e1420ab7913cbf701fa74cbc, `printInstanceCount` and `main`), not a capture: no real capture of
ioclasscount on an RDMA Mac is known. `ibv_devinfo -v` prints only the limits (research/macos-outputs.md §8) and
there is no /sys/class/infiniband.

What is counted besides, and used when the kernel's count cannot be read, is exo's failed runner starts since
boot: each failed start can leave its resources held until the holders are reaped (issue 28), and only a reboot
releases what a stuck process holds (dryvist/nix-ai docs/runbooks/rdma-protection-domains.md at
0109b839359efebde2b08d10ab9db4ec4af0cccd: "A leaked domain is a leaked process").
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from macfleet.errors import FactsParseError
from macfleet.facts._common import Facts
from macfleet.facts.commands import BOOTTIME, IOCLASSCOUNT, RDMA_PD_CLASS, RDMA_QP_CLASS

# `sysctl -n kern.boottime`: `{ sec = 1764660000, usec = 123456 } Tue Dec  2 08:20:00 2026` (the date part is
# the node's local time, ctime(3) layout)
_BOOTTIME = re.compile(r"^\{\s*sec\s*=\s*(?P<sec>\d+),\s*usec\s*=\s*\d+\s*\}\s*"
                       r"(?P<local>\w{3} \w{3}\s+\d+ [\d:]{8} \d{4})")
# exo's log file lines open with loguru's local time: `[ 2026-05-07 13:04:45.801 | INFO     | …` (exo b5375f8
# src/exo/shared/logging.py:79, the log file's format; sample tests/fixtures/exo-log/
# exo__exo-issue-2067_startup_node_elected_master.txt)
_STAMP = re.compile(r"^\[ (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
# Logged once per runner process that exited non-zero, whatever killed it: exo b5375f8
# src/exo/worker/runner/supervisor.py:375-401 (`Runner terminated with signal=N (…)` or `exitcode=N`)
FAILED_RUNNER = re.compile(r"\bRunner terminated with (?:signal|exitcode)=")


class BootTime(Facts):
    epoch_s: int
    local: datetime  # the node's local time of its boot (naive), to compare with exo's log stamps


class FailedStarts(Facts):
    """exo's failed runner starts since the node booted, counted in the log lines read."""

    count: int
    complete: bool  # False: the lines read start after the boot, so earlier failures may be missing
    last: str | None = None  # the last such line
    boot: datetime | None = None  # the node's local time of its boot
    log_from: datetime | None = None  # the first stamp of the lines read
    whole_file: bool = False  # the lines read are the whole log (else its last lines)


def parse_boottime(text: str) -> BootTime:
    m = _BOOTTIME.match(text.strip())
    local = _time(" ".join(m.group("local").split()), "%a %b %d %H:%M:%S %Y") if m else None
    if m is None or local is None:
        raise FactsParseError(BOOTTIME.command_line, "`{ sec = N, usec = N } <ctime date>`", line=1,
                              found=text.strip()[:80])
    return BootTime(epoch_s=int(m.group("sec")), local=local)


def _time(text: str, layout: str) -> datetime | None:
    """`text` read with strptime's `layout`; None when it is no such date (`Dec 32`, month 13)."""
    try:
        return datetime.strptime(text, layout)
    except ValueError:
        return None


AT_BOOT = timedelta(minutes=10)  # a start this soon after the boot is launchd's load at boot, not a restart


def failed_starts_since(log_text: str, boot: BootTime, *, whole_file: bool) -> FailedStarts:
    """Count the runner failures stamped at or after the boot. `whole_file`: the text is the whole log (fewer
    lines than the tail asked for). The count is complete only when the lines read began before the boot: exo
    rotates its log at each start (exo b5375f8 src/exo/shared/logging.py:75-86, `rotation=` `_once_then_never`),
    so a log that begins after the boot holds only the failures since exo's last start."""
    count, first, last = 0, None, None
    for line in log_text.splitlines():
        m = _STAMP.match(line)
        at = _time(m.group(1), "%Y-%m-%d %H:%M:%S") if m else None
        if at is None:  # a continuation line, or a stamp that is no date: not counted
            continue
        first = first or at
        if at >= boot.local and FAILED_RUNNER.search(line):
            count += 1
            last = line.strip()
    if first is None and log_text.strip():
        raise FactsParseError("exo-log", "lines stamped `[ YYYY-MM-DD HH:MM:SS.mmm | …` (exo's log file format)",
                              line=1, found=log_text.strip().splitlines()[0][:80])
    # exo's first start of a boot is its LaunchDaemon's load at boot (RunAtLoad: playbooks/roles/exo), so a whole
    # log that begins within AT_BOOT of the boot is that start's: every failure since boot is in it
    covers = first is not None and (first <= boot.local or (whole_file and first <= boot.local + AT_BOOT))
    complete = covers if first is not None else whole_file
    return FailedStarts(count=count, complete=complete, last=last, boot=boot.local, log_from=first,
                        whole_file=whole_file)


# ------------------------------------------------------------------------------------------ the kernel's count

# `ioclasscount CLASS...` (Apple's IOKitTools/ioclasscount.tproj/ioclasscount.c at
# 04b1b654a84a3c15e1420ab7913cbf701fa74cbc): `main` calls `printInstanceCount` once per class named, in the order
# given, which prints `NAME = ` then the count (`%lu` of the class's SInt32 instance count), `<no such class>` for a
# class the kernel does not know, or `?? (error reading/converting value)` for a value it cannot read; then `, `,
# or a newline after the last class. So `A = 3, B = 2\n` (the manual page ioclasscount(8): "instance counts are
# printed as a comma-separated list in the order specified", e.g. `IOPCIDevice = 2, AppleTestPCI = 1`). A count
# includes the class's direct subclasses that have an instance count of at least 1 (ioclasscount(8)). Errors go
# to stderr with exit status EX_OSERR (71): the collector notes those, they never reach the parser.
NO_SUCH_CLASS = "<no such class>"
UNREADABLE = "?? (error reading/converting value)"
SINT32_MAX = 2**31 - 1  # a count is an SInt32 printed unsigned: a larger number is a negative count, no count
_COUNT = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*) = (?P<value>[0-9]{1,10}|<no such class>|"
                    r"\?\? \(error reading/converting value\))")


class ClassCount(Facts):
    """One class's instance count: None when the kernel did not give one (`why`), never 0."""

    count: int | None
    why: str | None = None


class RdmaInUse(Facts):
    """The node's protection domains and queue pairs in use, all its RDMA devices together (ioclasscount)."""

    domains: ClassCount  # AppleThunderboltRDMAProtectionDomain
    queue_pairs: ClassCount  # AppleThunderboltRDMAQueuePair


def parse_ioclasscount(text: str, classes: tuple[str, ...], command: str) -> dict[str, ClassCount]:
    """The counts `ioclasscount CLASS...` printed for `classes` (the classes asked, in their order, on one line
    ending in a newline): anything else is a FactsParseError naming what was expected."""
    expected = (", ".join(f"`{c} = N`" for c in classes) + " on one line ending in a newline (N a count, "
                f"`{NO_SUCH_CLASS}` or `{UNREADABLE}`)")
    head = text[:120]
    if not text.endswith("\n") or "\n" in text[:-1] or "\r" in text:
        raise _bad(command, expected, head)
    items = text[:-1].split(", ")
    if len(items) != len(classes):
        raise _bad(command, expected, head)
    out: dict[str, ClassCount] = {}
    for want, item in zip(classes, items, strict=True):
        m = _COUNT.fullmatch(item)
        if m is None or m.group("name") != want:
            raise _bad(command, expected, item[:120])
        value = m.group("value")
        if value == NO_SUCH_CLASS:
            out[want] = ClassCount(count=None, why=f"{want} = {NO_SUCH_CLASS}: the kernel knows no such class")
        elif value == UNREADABLE:
            out[want] = ClassCount(count=None, why=f"{want} = {UNREADABLE}: the kernel's value could not be read")
        elif int(value) > SINT32_MAX:
            raise _bad(command, f"{expected}; a count is at most {SINT32_MAX}", item[:120])
        else:
            out[want] = ClassCount(count=int(value))
    return out


def _bad(command: str, expected: str, found: str) -> FactsParseError:
    return FactsParseError(command, expected, line=1, found=found)


def parse_rdma_in_use(text: str) -> RdmaInUse:
    got = parse_ioclasscount(text, (RDMA_PD_CLASS, RDMA_QP_CLASS), IOCLASSCOUNT.command_line)
    return RdmaInUse(domains=got[RDMA_PD_CLASS], queue_pairs=got[RDMA_QP_CLASS])
