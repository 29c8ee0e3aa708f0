"""The audit log: one JSON object per line (time, mesh, node, finding, decision, action, result, reason),
appended for every decision, including each time watch decided not to act and why."""

from __future__ import annotations

import json
import threading
from collections import deque
from pathlib import Path

MAX_RECENT = 50


class AuditLog:
    def __init__(self, path: Path):
        self.path = path
        self.recent: deque[dict] = deque(maxlen=MAX_RECENT)
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)

    def append(self, entry: dict) -> None:
        line = json.dumps(entry, ensure_ascii=False)
        with self._lock:
            with self.path.open("a") as fh:
                fh.write(line + "\n")
            self.recent.append(entry)
