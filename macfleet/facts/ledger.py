"""What the RDMA resource ledger reads besides `ibv_devinfo -v`'s limits: when the node booted (`sysctl -n
kern.boottime`) and how many of exo's runners failed since then (exo's log).

macfleet reads no current use of an RDMA device's protection domains or queue pairs: `ibv_devinfo -v` prints
only the limits (research/macos-outputs.md §8) and there is no /sys/class/infiniband.
`ioclasscount AppleThunderboltRDMAProtectionDomain` is reported to be a direct kernel count of the protection
domains (research/users-2026-12.md, dryvist/nix-ai), but no capture of its output is known, so it is not read
yet. What is counted is exo's failed runner starts since boot: each failed start can leave its resources held
until the holders are reaped (issue 28), and only a reboot releases them.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from macfleet.errors import FactsParseError
from macfleet.facts._common import Facts
from macfleet.facts.commands import BOOTTIME

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
