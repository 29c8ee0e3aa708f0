"""The cluster lock: one JSON file on the controller that says who is changing a cluster right now.

Every command that changes a whole mesh at once (`rollout`, `reboot`) takes it first. The record describes
itself (owner, pid, host, created, ttl_s, reason) and carries the holder's `phase`: what it was in the middle
of (e.g. "switching every node from release A to release B"), so that when the holder dies the next holder
can read what was left half-done and repair it before doing its own work.

A lock is stale when its process is gone (same controller, dead pid) or its TTL ran out (`expired`, pure).
A live lock refuses, naming its holder; a stale one is explained and taken over. Reading, judging and
replacing the file happen under an flock on a guard file beside it, so two takers never both win.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from macfleet.errors import LockHeld
from macfleet.paths import state_dir

DEFAULT_TTL_S = 3600.0
MAX_LOCK_BYTES = 64 * 1024  # a lock file is a few hundred bytes; anything larger is not ours


def expired(created: datetime, ttl_s: float, now: datetime) -> bool:
    """True when a lock created at `created` with a TTL of `ttl_s` seconds has run out at `now`.

    A TTL of 0 or less never expires (only a dead pid makes such a lock stale)."""
    if ttl_s <= 0:
        return False
    return now - created > timedelta(seconds=ttl_s)


@dataclass
class LockRecord:
    owner: str  # what holds it: "rollout exo", "reboot"…
    pid: int
    host: str
    created: str  # ISO 8601, UTC
    ttl_s: float
    reason: str
    phase: dict[str, Any] = field(default_factory=dict)

    @property
    def created_at(self) -> datetime:
        return datetime.fromisoformat(self.created)

    def describe(self, now: datetime) -> str:
        age = int((now - self.created_at).total_seconds())
        return f"{self.owner} (pid {self.pid} on {self.host}, since {self.created}, {age} s ago): {self.reason}"

    @classmethod
    def from_json(cls, text: str) -> LockRecord:
        data = json.loads(text)
        return cls(
            owner=str(data["owner"]),
            pid=int(data["pid"]),
            host=str(data["host"]),
            created=str(data["created"]),
            ttl_s=float(data["ttl_s"]),
            reason=str(data.get("reason", "")),
            phase=dict(data.get("phase") or {}),
        )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_reason(record: LockRecord, now: datetime, *, this_host: str, pid_alive=_pid_alive) -> str | None:
    """Why the lock no longer protects anything, or None when it is live."""
    if record.host == this_host and not pid_alive(record.pid):
        return f"its process (pid {record.pid} on {record.host}) is gone"
    if expired(record.created_at, record.ttl_s, now):
        return f"it expired: created {record.created} with a TTL of {record.ttl_s:g} s"
    return None


def lock_path(inventory_root: Path) -> Path:
    """One lock per inventory (a controller may drive several clusters)."""
    root = Path(inventory_root).resolve()
    tag = hashlib.blake2b(str(root).encode(), digest_size=6).hexdigest()
    return state_dir() / "locks" / f"{root.name}-{tag}.lock.json"


@dataclass
class Acquired:
    """The lock we now hold, and the stale record we took it over from (with why it was stale)."""

    record: LockRecord
    path: Path
    taken_over: LockRecord | None = None
    stale_because: str | None = None
    critical: bool = False  # in the middle of a step that must be repaired if we die or fail here

    def explain(self) -> str | None:
        if self.taken_over is None:
            return None
        now = datetime.now(UTC)
        return f"took over a stale cluster lock held by {self.taken_over.describe(now)}; {self.stale_because}"


class ClusterLock:
    """`with ClusterLock(path).hold(owner, reason) as held:` … `held` is an `Acquired`; `set_phase` records
    progress; leaving the block releases the lock, except by an error during a critical phase, or when the
    process dies: then the lock stays, becomes stale with its phase, and the next holder repairs."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.guard = self.path.with_name(self.path.name + ".guard")

    @contextlib.contextmanager
    def _guarded(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.guard, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def read(self) -> LockRecord | None:
        try:
            with self.path.open("rb") as fh:
                raw = fh.read(MAX_LOCK_BYTES + 1)
        except FileNotFoundError:
            return None
        if len(raw) > MAX_LOCK_BYTES:
            raise LockHeld(f"{self.path} is not a cluster lock (over {MAX_LOCK_BYTES} bytes)",
                           hint="look at it, and remove it by hand if it is garbage")
        try:
            return LockRecord.from_json(raw.decode("utf-8", errors="replace"))
        except (ValueError, KeyError, TypeError) as exc:
            raise LockHeld(f"{self.path} is not a readable cluster lock ({exc})",
                           hint="look at it, and remove it by hand if no macfleet command is running") from None

    def _write(self, record: LockRecord) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(asdict(record), indent=2) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    def acquire(self, owner: str, reason: str, *, ttl_s: float = DEFAULT_TTL_S, now: datetime | None = None,
                phase: dict[str, Any] | None = None) -> Acquired:
        """Take the lock, or raise LockHeld naming its holder. A stale lock is taken over (and reported)."""
        now = now or datetime.now(UTC)
        host = socket.gethostname()
        with self._guarded():
            current = self.read()
            why = None
            if current is not None:
                why = stale_reason(current, now, this_host=host)
                if why is None:
                    raise LockHeld(
                        f"the cluster is locked by {current.describe(now)}",
                        hint=f"wait for it to finish; the lock is {self.path}",
                        details={"holder": asdict(current), "path": str(self.path)},
                    )
            record = LockRecord(owner=owner, pid=os.getpid(), host=host, created=now.isoformat(), ttl_s=ttl_s,
                                reason=reason, phase=dict(phase or {}))
            self._write(record)
        return Acquired(record=record, path=self.path, taken_over=current, stale_because=why)

    def set_phase(self, held: Acquired, phase: dict[str, Any], *, critical: bool = False) -> None:
        """Record what we are in the middle of (written atomically before the step starts). While a critical
        phase is recorded, an error leaves the lock in place, so the next holder finds it and repairs."""
        with self._guarded():
            current = self.read()
            if current is None or current.pid != held.record.pid or current.created != held.record.created:
                raise LockHeld(f"lost the cluster lock {self.path}", details={"path": str(self.path)})
            held.record.phase = dict(phase)
            self._write(held.record)
        held.critical = critical

    def release(self, held: Acquired) -> None:
        with self._guarded():
            current = self.read()
            if current is not None and current.pid == held.record.pid and current.created == held.record.created:
                self.path.unlink(missing_ok=True)

    @contextlib.contextmanager
    def hold(self, owner: str, reason: str, *, ttl_s: float = DEFAULT_TTL_S) -> Iterator[Acquired]:
        held = self.acquire(owner, reason, ttl_s=ttl_s)
        try:
            yield held
        except BaseException:
            if not held.critical:
                self.release(held)
            raise
        self.release(held)
