"""Webhook notifications: queued, sent by a background thread with retries, never blocking the loop."""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.request
from collections.abc import Callable

RETRIES = 4
TIMEOUT_S = 5.0


class Notifier:
    def __init__(self, url: str | None, on_error: Callable[[str], None] = lambda m: None, backoff_s: float = 1.0):
        self.url = url
        self.on_error = on_error
        self.backoff_s = backoff_s
        self.sent = 0
        self.failed = 0
        self._queue: queue.Queue[dict | None] = queue.Queue(maxsize=1000)
        self._thread = threading.Thread(target=self._run, name="webhook", daemon=True)
        if url:
            self._thread.start()

    def notify(self, payload: dict) -> None:
        if not self.url:
            return
        try:
            self._queue.put_nowait(payload)
        except queue.Full:
            self.on_error("webhook queue full: a notification was dropped")

    def _post(self, payload: dict) -> None:
        req = urllib.request.Request(self.url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "macfleet-watch"})
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            resp.read(1024)

    def _run(self) -> None:
        while True:
            payload = self._queue.get()
            if payload is None:
                return
            for attempt in range(RETRIES):
                try:
                    self._post(payload)
                    self.sent += 1
                    break
                except Exception as exc:  # any failure is retried, then reported; the loop never waits
                    if attempt == RETRIES - 1:
                        self.failed += 1
                        self.on_error(f"webhook failed after {RETRIES} attempts: {exc}")
                    else:
                        time.sleep(self.backoff_s * 2**attempt)

    def close(self, wait_s: float = 5.0) -> None:
        if self.url:
            self._queue.put(None)
            self._thread.join(wait_s)
