"""Maintenance: "I am working on this mesh, leave it alone" (issue 28 item 2). Pure: records, durations, whether
one is in force, in words. The state lives in act/maintenance.py; the healer reads it at every probe.

A person's maintenance names who started it, why, and when it ends: it ends by itself then (an operator who
forgets never leaves the healer off for good). A command's maintenance (`rollout`, `reboot`, `upgrade`) is
taken for the command's duration and ended by it; it also names the command's process, and is over as soon as
that process is gone (a killed command does not hold the mesh for hours) or at its bound, whichever is first.
While a mesh is in maintenance the healer observes and reports, and does nothing to it and pages nobody."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

MAX_FOR_S = 7 * 24 * 3600.0  # a week: longer is not maintenance, it is switching the healer off
COMMAND_BOUND_S = 12 * 3600.0  # a command's maintenance, should its end never be written (an exo build: ~2 h)
MAX_REASON = 300
MAX_PID = 2**31 - 1  # pid_t: a larger one is no process (and os.kill overflows on it)
_UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([dhms])")


def parse_duration(text: str) -> float:
    """Seconds in "2h", "90m", "1h30m", "45s", "1d"; ValueError saying what is expected."""
    raw = text.strip().lower()
    parts = _DURATION.findall(raw)
    units = [u for _, u in parts]
    if not raw or not parts or "".join(n + u for n, u in parts) != raw or len(set(units)) != len(units):
        raise ValueError(f"{text[:40]!r}: expected a duration such as 2h, 90m, 1h30m or 1d")
    seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if not 0 < seconds <= MAX_FOR_S:
        raise ValueError(f"{text[:40]!r}: expected more than 0 and at most {MAX_FOR_S / 86400:g} days")
    return seconds


def check_reason(reason: str) -> str:
    """The reason, one printable line of at most MAX_REASON characters; ValueError otherwise."""
    r = reason.strip()
    if not r or len(r) > MAX_REASON or not r.isprintable():
        raise ValueError(f"expected one printable line of 1 to {MAX_REASON} characters, e.g. \"recabling studio-3\"")
    return r


@dataclass(frozen=True)
class Maintenance:
    mesh: str
    reason: str
    by: str  # the person (login name), or the command ("reboot")
    started: str  # ISO 8601, aware
    until: str  # ISO 8601, aware: it ends by itself then
    command: str = ""  # "" for a person's; else the command that took it for its duration
    pid: int = 0  # a command's process,
    host: str = ""  # on this controller,
    process_started: str = ""  # started then (a reused pid is another process)

    @property
    def planned_by_person(self) -> bool:
        return not self.command

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> Maintenance:
        """Strict: ValueError naming what is wrong (a damaged file is not "no maintenance")."""
        if not isinstance(data, dict) or set(data) - set(asdict(cls("", "", "", "", ""))):
            raise ValueError(f"not a maintenance record: {str(data)[:80]!r}")
        try:
            m = cls(**{k: (int(v) if k == "pid" else str(v)) for k, v in data.items()})
            if not 0 <= m.pid <= MAX_PID or (m.command and m.pid == 0):
                raise ValueError(f"pid {m.pid} is no process's")
            started, until = (datetime.fromisoformat(t) for t in (m.started, m.until))
            if started.tzinfo is None or until.tzinfo is None:
                raise ValueError("a time without a time zone")
            longest = COMMAND_BOUND_S if m.command else MAX_FOR_S
            if not timedelta(0) <= until - started <= timedelta(seconds=longest):
                raise ValueError(f"it runs from {m.started} to {m.until}: at most {longest / 3600:g} h")
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"not a maintenance record ({exc})") from None
        return m


def person(mesh: str, reason: str, by: str, for_s: float, now: datetime) -> Maintenance:
    return Maintenance(mesh=mesh, reason=reason, by=by, started=now.isoformat(),
                       until=(now + timedelta(seconds=for_s)).isoformat())


def for_command(mesh: str, command: str, reason: str, pid: int, host: str, process_started: str,
                now: datetime) -> Maintenance:
    return Maintenance(mesh=mesh, reason=reason, by=command, started=now.isoformat(),
                       until=(now + timedelta(seconds=COMMAND_BOUND_S)).isoformat(), command=command, pid=pid,
                       host=host, process_started=process_started)


def expired(m: Maintenance, now: datetime) -> bool:
    return now >= datetime.fromisoformat(m.until)


def in_force(m: Maintenance | None, now: datetime, *, command_alive: bool = True) -> bool:
    """Whether `m` holds its mesh now: not expired, and for a command's, its process still alive."""
    return m is not None and not expired(m, now) and (m.planned_by_person or command_alive)


def describe(m: Maintenance, now: datetime) -> str:
    until = datetime.fromisoformat(m.until)
    left = max(0, int((until - now).total_seconds()))
    who = f"{m.command} (pid {m.pid} on {m.host})" if m.command else m.by
    return (f"mesh {m.mesh} in maintenance by {who} until {until.isoformat(timespec='minutes')} "
            f"({left // 3600} h {left % 3600 // 60:02d} min left): {m.reason}")
