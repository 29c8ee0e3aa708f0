"""Webhook notifications: queued, sent by a background thread with retries, never blocking the loop.

Each delivery attempt has an overall deadline (DEADLINE_S, connect to last byte of the answer): a server that
answers one byte at a time cannot hold the sender, because the socket is shut when the deadline passes.
Every attempt is counted (`count("sent" | "retried" | "failed")`). A URL with `user:password@` is sent with
HTTP basic authentication (the userinfo never goes on the request line, and messages show the URL without it).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import queue
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable

RETRIES = 4
TIMEOUT_S = 5.0  # each read or write
DEADLINE_S = 15.0  # one attempt, from connect to the last byte of the answer


def redact(url: str) -> str:
    """`url` without its userinfo (user:password@), to be shown."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def target(url: str) -> tuple[str, str, int | None, str, str | None]:
    """(scheme, host, port, path with query, basic auth header or None); ValueError for a URL that cannot be
    sent (not http/https, no host, a bad port)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"webhook {redact(url)}: expected an http:// or https:// URL with a host")
    port = parts.port  # ValueError for a bad one
    auth = None
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, parts.hostname, port, path, auth


class DeliveryFailed(Exception):
    pass


class Notifier:
    def __init__(self, url: str | None, on_error: Callable[[str], None] = lambda m: None, backoff_s: float = 1.0,
                 count: Callable[[str], None] = lambda result: None, on_ok: Callable[[], None] = lambda: None,
                 deadline_s: float = DEADLINE_S):
        self.url = url
        self.on_error = on_error
        self.on_ok = on_ok
        self.count = count
        self.backoff_s = backoff_s
        self.deadline_s = deadline_s
        self.sent = 0
        self.failed = 0
        self.retried = 0
        self._target = target(url) if url else None
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
            self.failed += 1
            self.count("failed")
            self.on_error("webhook queue full: a notification was dropped")

    def _post(self, payload: dict) -> None:
        assert self._target is not None
        scheme, host, port, path, auth = self._target
        cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        conn = cls(host, port, timeout=TIMEOUT_S)
        late = threading.Event()

        def cut() -> None:  # the deadline: shut the socket under whatever read or write is waiting
            late.set()
            sock = conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(self.deadline_s, cut)
        timer.daemon = True
        timer.start()
        try:
            headers = {"Content-Type": "application/json", "User-Agent": "macfleet-watch"}
            if auth:
                headers["Authorization"] = auth
            conn.request("POST", path, body=json.dumps(payload).encode(), headers=headers)
            resp = conn.getresponse()
            resp.read(1024)
            if late.is_set():  # the answer was cut short by the deadline: whatever was read is not an answer
                raise DeliveryFailed(f"no complete answer within {self.deadline_s:g} s")
            if not 200 <= resp.status < 300:
                raise DeliveryFailed(f"HTTP {resp.status} {resp.reason}")
        except Exception:
            if late.is_set():
                raise DeliveryFailed(f"no complete answer within {self.deadline_s:g} s") from None
            raise
        finally:
            timer.cancel()
            conn.close()

    def _run(self) -> None:
        while True:
            payload = self._queue.get()
            if payload is None:
                return
            for attempt in range(RETRIES):
                try:
                    self._post(payload)
                    self.sent += 1
                    self.count("sent")
                    self.on_ok()
                    break
                except Exception as exc:  # any failure is retried, then reported; the loop never waits
                    if attempt == RETRIES - 1:
                        self.failed += 1
                        self.count("failed")
                        self.on_error(f"webhook {redact(self.url or '')} failed after {RETRIES} attempts: "
                                      f"{redact(str(exc))}")
                    else:
                        self.retried += 1
                        self.count("retried")
                        time.sleep(self.backoff_s * 2**attempt)

    def close(self, wait_s: float = 5.0) -> None:
        if self.url:
            try:
                self._queue.put(None, timeout=wait_s)
            except queue.Full:
                return
            self._thread.join(wait_s)
