"""The audit log: one JSON object per line (time, mesh, node, finding, decision, action, result, reason),
appended for every decision, including each time watch decided not to act and why.

Writing it never stops the healer: an entry that cannot be written (a full disk, a directory where the file
should be, a read-only mount) is kept in memory, in order, and written with the next entry that can be; the
failure is reported through `on_error` (log, page, metric) and its end through `on_ok`. A line is never left
half written: what a failed write appended is cut off again."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from macfleet.act.statedir import append_shared, ensure
from macfleet.errors import MacfleetError

MAX_RECENT = 50
MAX_PENDING = 10_000  # entries kept in memory while the log cannot be written; older ones are counted, then lost


class AuditLog:
    def __init__(self, path: Path, on_error: Callable[[str], None] = lambda m: None,
                 on_ok: Callable[[], None] = lambda: None):
        self.path = path
        self.recent: deque[dict] = deque(maxlen=MAX_RECENT)
        self.pending: deque[str] = deque()
        self.lost = 0  # entries dropped from `pending` while it was full
        self.on_error = on_error
        self.on_ok = on_ok
        self._lock = threading.Lock()

    def append(self, entry: dict) -> bool:
        """Record `entry`; True when it (and everything held before it) is on disk."""
        line = json.dumps(entry, ensure_ascii=False)
        with self._lock:
            self.recent.append(entry)
            if len(self.pending) >= MAX_PENDING:
                self.pending.popleft()
                self.lost += 1
            self.pending.append(line)
            return self._flush()

    def flush(self) -> bool:
        """Write what is held in memory, if anything (at exit, so a freed disk gets the last entries)."""
        with self._lock:
            return self._flush() if self.pending else True

    def _flush(self) -> bool:
        lines = list(self.pending)
        if self.lost:
            gap = {"time": datetime.now(UTC).isoformat(), "mesh": None, "node": None, "finding": None,
                   "decision": f"the audit log could not be written for a while: {self.lost} older entries were "
                               f"lost (at most {MAX_PENDING} are kept in memory)", "action": "audit-gap",
                   "result": "lost"}
            lines.insert(0, json.dumps(gap))
        data = "".join(f"{line}\n" for line in lines).encode("utf-8")
        try:
            ensure(self.path.parent)
            append_shared(self.path, data)  # all of it or none: the whole batch is written again later
        except (OSError, MacfleetError) as exc:
            return self._failed(exc)
        self.pending.clear()
        self.lost = 0
        self.on_ok()
        return True

    def _failed(self, exc: OSError | MacfleetError) -> bool:
        why = exc.message if isinstance(exc, MacfleetError) else exc.strerror or exc
        self.on_error(f"cannot write the audit log {self.path}: {why}; its entries are kept in "
                      "memory and written as soon as it can be")
        return False
