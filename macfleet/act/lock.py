"""The cluster lock: one JSON file on the controller that says who is changing a cluster right now.

Every command that changes a whole mesh at once (`rollout`, `reboot`, the healer's actions) takes it first. The
record describes itself (owner, pid and the process's start, host, created, refreshed, ttl_s, reason) and
carries the holder's `phase`: what it was in the middle of (e.g. "switching every node from release A to
release B"), so that when the holder dies the next holder can read what was left half-done and repair it.

Alive is never stale. On the same controller a lock is live while its process is: the pid is alive and is still
the process that took the lock (its start time matches, so a reused pid is not mistaken for the holder), however
long the work takes (an exo build of two hours, a 600 GB push). A lock taken on another controller is judged by
its heartbeat: the holder rewrites `refreshed` every min(60 s, TTL/4) from a thread of its own (a build or a
transfer is one long call, so a refresh at each step would not do), and the lock is stale once no refresh came
for `ttl_s`.

A stale lock whose holder died in a critical step (`repair_by`: the commands that repair it, e.g. a switch of
every node's exo release) is taken over only by one of those commands, or with an explicit force that names what
is lost; every other command refuses, naming the repair. A stale lock with no repair pending is explained and
taken over. A live lock refuses, naming its holder. Reading, judging and replacing the file happen under an
flock on a guard file beside it, so two takers never both win.

The file lives in the inventory's shared directory (paths.cluster_dir, act/statedir.py), so every user who
drives the cluster and the healer's own user take the same lock; a holder of another user is judged alive as
one of ours is (its pid answers kill(pid, 0) with EPERM, and its start time is public).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from macfleet.act.statedir import append_shared, ensure, exclusive, replace_shared
from macfleet.errors import LockHeld, MacfleetError
from macfleet.paths import history_file, legacy_lock_file, lock_file

DEFAULT_TTL_S = 3600.0
MAX_LOCK_BYTES = 64 * 1024  # a lock file is a few hundred bytes; anything larger is not ours
MAX_REFRESH_S = 60.0


def expired(created: datetime, ttl_s: float, now: datetime) -> bool:
    """True when a lock created (or last refreshed) at `created` with a TTL of `ttl_s` seconds has run out at
    `now`. A TTL of 0 or less never expires (only a dead process makes such a lock stale)."""
    if ttl_s <= 0:
        return False
    return now - created > timedelta(seconds=ttl_s)


def refresh_interval(ttl_s: float) -> float:
    """How often a holder rewrites `refreshed`: four times per TTL, at least once a minute."""
    return MAX_REFRESH_S if ttl_s <= 0 else max(0.05, min(MAX_REFRESH_S, ttl_s / 4))


@dataclass
class LockRecord:
    owner: str  # what holds it: "rollout exo", "reboot"…
    pid: int
    host: str
    created: str  # ISO 8601, UTC
    ttl_s: float
    reason: str
    phase: dict[str, Any] = field(default_factory=dict)
    started: str = ""  # the holding process's start (process_started): a reused pid is another process
    refreshed: str = ""  # ISO 8601, UTC: the holder's last heartbeat ("" before the first: `created`)
    repair_by: list[str] = field(default_factory=list)  # owners that repair the critical phase it is in
    repair: str = ""  # the command a sysadmin runs to repair it (said when another command is refused)
    left: str = ""  # the holder left the lock for repair after an error (and lives on: a healer)

    @property
    def created_at(self) -> datetime:
        return datetime.fromisoformat(self.created)

    @property
    def refreshed_at(self) -> datetime:
        return datetime.fromisoformat(self.refreshed) if self.refreshed else self.created_at

    def describe(self, now: datetime) -> str:
        age = int((now - self.created_at).total_seconds())
        return f"{self.owner} (pid {self.pid} on {self.host}, since {self.created}, {age} s ago): {self.reason}"

    def in_the_middle_of(self) -> str:
        """The critical phase, in words (for a refusal or a forced takeover)."""
        ph = self.phase
        if ph.get("action") == "switch":
            return (f"switching {ph.get('mesh', 'the mesh')} from exo release {ph.get('from') or 'none'} to "
                    f"{ph.get('to')} (step: {ph.get('step')})")
        if "phase" in ph:
            return f"{ph['phase']} ({ph.get('mesh', 'the mesh')})"
        return ", ".join(f"{k}: {v}" for k, v in ph.items() if isinstance(v, str | int | float)) or "a critical step"

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
            started=str(data.get("started") or ""),
            refreshed=str(data.get("refreshed") or ""),
            repair_by=[str(x) for x in (data.get("repair_by") or [])],
            repair=str(data.get("repair") or ""),
            left=str(data.get("left") or ""),
        )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_started(pid: int) -> str:
    """What tells this process from a later one given the same pid: on Linux the boot's id and the start time
    in clock ticks since boot (proc(5): /proc/PID/stat field 22); elsewhere (macOS) `ps -o lstart=`, the
    start to the second. "" when it cannot be read (then the pid alone is trusted)."""
    stat = Path(f"/proc/{pid}/stat")
    if stat.parent.parent.joinpath("self").exists():
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
            return f"linux:{boot}:{fields[19]}"
        except (OSError, IndexError):
            return ""
    try:
        p = subprocess.run(["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True, text=True, timeout=10,
                           env={**os.environ, "LC_ALL": "C"})
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return f"ps:{' '.join(p.stdout.split())}" if p.returncode == 0 and p.stdout.strip() else ""


def process_alive(pid: int, started: str) -> bool:
    """Whether process `pid` of this controller, which started at `started` (process_started; "" unknown),
    still runs: a pid now given to a later process is not it."""
    if not _pid_alive(pid):
        return False
    now_started = process_started(pid) if started else ""
    return not now_started or now_started == started


_MY_START = ""


def my_start() -> str:
    global _MY_START
    if not _MY_START:
        _MY_START = process_started(os.getpid())
    return _MY_START


def stale_reason(record: LockRecord, now: datetime, *, this_host: str, pid_alive=_pid_alive,
                 started_of: Callable[[int], str] = process_started) -> str | None:
    """Why the lock no longer protects anything, or None when its holder is alive.

    Same controller: stale when the process is gone or the pid is now another process (its start differs);
    a live holder is never stale, whatever its age. Another controller: stale once it stopped refreshing for
    its TTL. A holder that left the lock for repair (`left`) has stopped working on it."""
    if record.left:
        return f"its holder left it after an error, for the next command to repair: {record.left}"
    if record.host == this_host:
        if not pid_alive(record.pid):
            return f"its process (pid {record.pid} on {record.host}) is gone"
        if record.started:
            now_started = started_of(record.pid)
            if now_started and now_started != record.started:
                return (f"its process (pid {record.pid} on {record.host}) is gone: that pid is now another "
                        "process, started later")
        return None
    if expired(record.refreshed_at, record.ttl_s, now):
        last = record.refreshed or record.created
        return f"it expired: its holder on {record.host} stopped refreshing it (last at {last}, TTL {record.ttl_s:g} s)"
    return None


def lock_path(inventory_root: Path) -> Path:
    """One lock per inventory (a controller may drive several clusters)."""
    return lock_file(inventory_root)


def append_history(inventory_root: Path, entry: dict) -> None:
    """One line of the inventory's history (rollouts, rollbacks, repairs, builds, reboots), in one schema: the
    time, the `action`, whether it left the mesh `healthy`, then the entry's own keys."""
    if "action" not in entry or "healthy" not in entry:
        raise ValueError("a history entry names its action and whether it left the mesh healthy")
    path = history_file(inventory_root)
    ensure(path.parent)
    append_shared(path, (json.dumps({"time": datetime.now(UTC).isoformat(), **entry}) + "\n").encode())


def read_history(inventory_root: Path, last: int = 1000) -> list[dict]:
    """The history's last `last` entries, oldest first (a line that is not JSON is skipped)."""
    path = history_file(inventory_root)
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines()[-last:]:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


@dataclass
class Acquired:
    """The lock we now hold, and the stale record we took it over from (with why it was stale)."""

    record: LockRecord
    path: Path
    taken_over: LockRecord | None = None
    stale_because: str | None = None
    critical: bool = False  # in the middle of a step that must be repaired if we die or fail here
    forced: bool = False  # taken over although its holder died in a critical step that this command cannot repair
    heartbeat: _Heartbeat | None = field(default=None, repr=False)

    def explain(self) -> str | None:
        if self.taken_over is None:
            return None
        now = datetime.now(UTC)
        said = f"took over a stale cluster lock held by {self.taken_over.describe(now)}; {self.stale_because}"
        if self.forced:
            said += (f"; FORCED: its record of being in the middle of {self.taken_over.in_the_middle_of()} is "
                     f"discarded (repair it by hand: {self.taken_over.repair or 'see the runbook'})")
        return said


class _Heartbeat:
    """The holder's own thread: rewrites `refreshed` every refresh_interval(ttl) while the lock is ours."""

    def __init__(self, lock: ClusterLock, held: Acquired):
        self.lock, self.held = lock, held
        self.stop = threading.Event()
        self.lost = False
        self.thread = threading.Thread(target=self._run, daemon=True, name="cluster-lock-heartbeat")

    def _run(self) -> None:
        every = refresh_interval(self.held.record.ttl_s)
        while not self.stop.wait(every):
            try:
                if not self.lock.refresh(self.held):
                    self.lost = True
                    return
            except (OSError, MacfleetError):  # a full disk, a garbled file: try again at the next beat
                continue

    def end(self) -> None:
        self.stop.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout=10)


class ClusterLock:
    """`with ClusterLock(path).hold(owner, reason) as held:` … `held` is an `Acquired`; `set_phase` records
    progress; leaving the block releases the lock, except by an error during a critical phase, or when the
    process dies: then the lock stays, becomes stale with its phase, and the next holder repairs. While held,
    a heartbeat thread refreshes it."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.guard = self.path.with_name(self.path.name + ".guard")
        self._mutex = threading.Lock()  # the heartbeat and set_phase of one process write one at a time

    @contextlib.contextmanager
    def _guarded(self) -> Iterator[None]:
        with self._mutex, exclusive(self.guard):
            yield

    def read(self) -> LockRecord | None:
        """The record, from a directory found safe first (a world-writable one could hold anyone's lock)."""
        ensure(self.path.parent)
        try:
            with self.path.open("rb") as fh:
                raw = fh.read(MAX_LOCK_BYTES + 1)
        except FileNotFoundError:
            self._no_legacy()
            return None
        if len(raw) > MAX_LOCK_BYTES:
            raise LockHeld(f"{self.path} is not a cluster lock (over {MAX_LOCK_BYTES} bytes)",
                           hint="look at it, and remove it by hand if it is garbage")
        try:
            return LockRecord.from_json(raw.decode("utf-8", errors="replace"))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise LockHeld(f"{self.path} is not a readable cluster lock ({exc})",
                           hint="look at it, and remove it by hand if no macfleet command is running") from None

    def _no_legacy(self) -> None:
        """A lock left where a macfleet before the shared cluster state kept it may record a step to repair:
        never read as "no lock" (LockHeld, naming the move)."""
        legacy = legacy_lock_file(self.path.parent.name)
        if legacy.is_file():
            raise LockHeld(f"a cluster lock is still at its old place {legacy}, which this macfleet no longer reads",
                           hint=f"if no macfleet command of the old version runs: mv {legacy} {self.path}; then run "
                                "this command again (it judges that lock as before)",
                           details={"path": str(legacy)})

    def _write(self, record: LockRecord) -> None:
        replace_shared(self.path, (json.dumps(asdict(record), indent=2) + "\n").encode())

    def _refusal(self, owner: str, current: LockRecord, now: datetime, why: str | None,
                 may_repair: Callable[[LockRecord], bool] | None, force: bool | None) -> LockHeld | None:
        """Why `owner` may not take `current` (None: it may)."""
        if why is None:
            return LockHeld(
                f"the cluster is locked by {current.describe(now)}",
                hint=f"wait for it to finish; the lock is {self.path}",
                details={"holder": asdict(current), "path": str(self.path)},
            )
        if not current.repair_by:
            return None
        if owner in current.repair_by and (may_repair is None or may_repair(current)):
            return None
        if force:
            return None
        repair = current.repair or " or ".join(f"`macfleet {o}`" for o in current.repair_by)
        forcing = (" With --force this command takes the lock anyway and that record is lost: the nodes are left "
                   "as the dead command left them, for you to repair by hand." if force is not None else "")
        return LockHeld(
            f"the cluster lock was left by a command that died in the middle of {current.in_the_middle_of()} "
            f"({why}): {current.describe(now)}. Only its repair may take the lock: {repair}",
            hint=f"repair first: {repair}; then run this command again.{forcing}",
            details={"holder": asdict(current), "path": str(self.path), "repair": repair,
                     "repair_by": current.repair_by},
        )

    def check(self, owner: str, *, now: datetime | None = None,
              may_repair: Callable[[LockRecord], bool] | None = None, force: bool | None = None) -> None:
        """Raise what `acquire` would (LockHeld) without taking anything: a command refuses before it dials a
        node. `acquire` judges again, under the guard."""
        now = now or datetime.now(UTC)
        current = self.read()
        if current is None:
            return
        refusal = self._refusal(owner, current, now, stale_reason(current, now, this_host=socket.gethostname()),
                                may_repair, force)
        if refusal is not None:
            raise refusal

    def acquire(self, owner: str, reason: str, *, ttl_s: float = DEFAULT_TTL_S, now: datetime | None = None,
                phase: dict[str, Any] | None = None, may_repair: Callable[[LockRecord], bool] | None = None,
                force: bool | None = None) -> Acquired:
        """Take the lock, or raise LockHeld naming its holder. A stale lock is taken over (and reported), except
        one whose holder died in a critical step: only an owner in its `repair_by` (for which `may_repair`, if
        given, agrees) or `force=True` takes that one. `force=None`: the command has no --force to offer."""
        now = now or datetime.now(UTC)
        host = socket.gethostname()
        with self._guarded():
            current = self.read()
            why = None
            forced = False
            if current is not None:
                why = stale_reason(current, now, this_host=host)
                refusal = self._refusal(owner, current, now, why, may_repair, force)
                if refusal is not None:
                    raise refusal
                forced = bool(current.repair_by) and not (
                    owner in current.repair_by and (may_repair is None or may_repair(current)))
            # a repairer takes over the pending repair with the lock: until its own first step, dying (or an
            # error) leaves the same record for the next repairer, never a lock with the repair forgotten
            inherit = current is not None and bool(current.repair_by) and not forced
            record = LockRecord(owner=owner, pid=os.getpid(), host=host, created=now.isoformat(), ttl_s=ttl_s,
                                reason=reason, started=my_start(), refreshed=now.isoformat(),
                                phase=dict(phase if phase is not None else (current.phase if inherit else {})),
                                repair_by=list(current.repair_by) if inherit else [],
                                repair=current.repair if inherit else "")
            self._write(record)
        held = Acquired(record=record, path=self.path, taken_over=current, stale_because=why, forced=forced,
                        critical=inherit)
        held.heartbeat = _Heartbeat(self, held)
        held.heartbeat.thread.start()
        return held

    def _ours(self, current: LockRecord | None, held: Acquired) -> bool:
        return current is not None and current.pid == held.record.pid and current.created == held.record.created

    def refresh(self, held: Acquired) -> bool:
        """The heartbeat: rewrite `refreshed` if the lock is still ours (False: it is not)."""
        with self._guarded():
            if not self._ours(self.read(), held):
                return False
            held.record.refreshed = datetime.now(UTC).isoformat()
            self._write(held.record)
        return True

    def set_phase(self, held: Acquired, phase: dict[str, Any], *, critical: bool = False,
                  repair_by: list[str] | None = None, repair: str | None = None) -> None:
        """Record what we are in the middle of (written atomically before the step starts). While a critical
        phase is recorded, an error leaves the lock in place, so the next holder finds it and repairs; only the
        owners of `repair_by` (default: this one) may take it then, and others are told to run `repair`."""
        with self._guarded():
            if not self._ours(self.read(), held):
                raise LockHeld(f"lost the cluster lock {self.path}", details={"path": str(self.path)})
            held.record.phase = dict(phase)
            held.record.repair_by = list(repair_by or [held.record.owner]) if critical else []
            held.record.repair = (repair or f"`macfleet {held.record.owner}`") if critical else ""
            held.record.refreshed = datetime.now(UTC).isoformat()
            self._write(held.record)
        held.critical = critical

    def release(self, held: Acquired) -> None:
        if held.heartbeat is not None:
            held.heartbeat.end()
        with self._guarded():
            if self._ours(self.read(), held):
                self.path.unlink(missing_ok=True)

    def leave(self, held: Acquired, why: str) -> None:
        """Stop holding the lock but leave it, with its critical phase, for the repair: the process lives on (a
        healer), so its pid would otherwise keep the lock live for ever."""
        if held.heartbeat is not None:
            held.heartbeat.end()
        with self._guarded():
            if self._ours(self.read(), held):
                held.record.left = why[:300] or "an error"
                self._write(held.record)

    @contextlib.contextmanager
    def hold(self, owner: str, reason: str, *, ttl_s: float = DEFAULT_TTL_S,
             may_repair: Callable[[LockRecord], bool] | None = None, force: bool | None = None
             ) -> Iterator[Acquired]:
        held = self.acquire(owner, reason, ttl_s=ttl_s, may_repair=may_repair, force=force)
        try:
            yield held
        except BaseException as exc:
            if not held.critical:
                self.release(held)
            else:
                self.leave(held, f"{type(exc).__name__}: {str(exc)[:200]}")
            raise
        self.release(held)
