"""Prometheus metrics (prometheus-client) and the read-only status page, served together on --listen.

The page never costs the healer its life: at most MAX_CONNECTIONS connections are served at once (one more is
answered 503 and closed at once, so threads and descriptors stay bounded whatever clients do), every read and
write on a connection has IO_TIMEOUT_S, and a connection still open REQUEST_DEADLINE_S after it was accepted
(a client dripping its headers a byte at a time, or reading the answer as slowly) is cut. The server only
reads what the loop publishes; nothing the loop does waits for it. With a token, both / and /metrics want
`Authorization: Bearer TOKEN` (401 otherwise)."""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from macfleet.act.reboot import credential_problem
from macfleet.errors import UsageError

RESULT_VALUE = {"ok": 1.0, "finding": 0.0, "unknown": -1.0}


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.check = Gauge("macfleet_probe_check", "Last probe result per check and node: 1 ok, 0 finding, "
                           "-1 could not tell", ["mesh", "node", "check"], registry=r)
        self.link = Gauge("macfleet_rdma_port_active", "1 when an RDMA port is PORT_ACTIVE, 0 when not",
                          ["mesh", "node", "port"], registry=r)
        self.reachable = Gauge("macfleet_node_reachable", "1 when the node answered the last probe",
                               ["mesh", "node"], registry=r)
        self.reboots = Counter("macfleet_reboots", "Mesh reboots started by watch", ["mesh"], registry=r)
        self.actions = Counter("macfleet_actions", "Actions taken by watch", ["mesh", "action"], registry=r)
        self.breaker = Gauge("macfleet_breaker_open", "1 while the circuit breaker is open", ["mesh"], registry=r)
        self.paused = Gauge("macfleet_paused", "1 while the pause file exists", ["mesh"], registry=r)
        self.maintenance = Gauge("macfleet_maintenance", "1 while the mesh is in maintenance (`macfleet maintenance`, "
                                 "or a rollout, reboot or upgrade under way): observed, not acted on", ["mesh"],
                                 registry=r)
        self.streak = Gauge("macfleet_problem_streak", "Bad probes in a row per check", ["mesh", "check"],
                            registry=r)
        self.last_probe = Gauge("macfleet_last_probe_timestamp_seconds", "When the last probe finished (Unix time)",
                                ["mesh"], registry=r)
        self.probe_seconds = Gauge("macfleet_probe_duration_seconds", "How long the last probe took", ["mesh"],
                                   registry=r)
        self.errors = Counter("macfleet_watch_errors", "The healer's own troubles (state-read, state-write, "
                              "audit-write, webhook, tick, lock), each time one happened", ["kind"], registry=r)
        self.webhook = Counter("macfleet_webhook_deliveries", "Webhook attempts by result (sent, retried, failed)",
                               ["result"], registry=r)
        self.http_refused = Counter("macfleet_http_refused", "Connections to --listen refused (busy, "
                                    "unauthorized), cut (deadline) or lost mid-answer (error)", ["reason"], registry=r)


MAX_CONNECTIONS = 32
MAX_TOKEN_BYTES = 4096


def read_token(path: Path) -> str:
    """The bearer token for --listen, from a file only its owner may read (never from argv)."""
    problem = credential_problem(path)
    if problem is not None:
        raise UsageError(f"--listen-token-file: {problem}", hint="a file of mode 0600 holding one token line")
    token = path.read_bytes()[:MAX_TOKEN_BYTES + 1].decode("utf-8", "replace").strip()
    if not 16 <= len(token) <= MAX_TOKEN_BYTES or not token.isascii() or not token.isprintable() or " " in token:
        raise UsageError(f"--listen-token-file {path}: expected one line of 16 to {MAX_TOKEN_BYTES} printable ASCII "
                         "characters without spaces", hint="e.g. `openssl rand -hex 32 > FILE; chmod 600 FILE`")
    return token
IO_TIMEOUT_S = 5.0
REQUEST_DEADLINE_S = 10.0


def split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def exposed(listen: str) -> bool:
    """Whether ADDR:PORT listens beyond this host (anything but a loopback address or `localhost`)."""
    host = split_listen(listen)[0]
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True  # a name: whatever it resolves to may be reachable


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], handler: type, on_refused: Callable[[str], None],
                 limit: int = MAX_CONNECTIONS, deadline_s: float = REQUEST_DEADLINE_S):
        self.on_refused = on_refused
        self.limit = limit
        self.deadline_s = deadline_s
        self.active: dict[socket.socket, float] = {}
        self._guard = threading.Lock()
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)

    def process_request(self, request, client_address) -> None:
        with self._guard:
            busy = len(self.active) >= self.limit
            if not busy:
                self.active[request] = time.monotonic()
        if busy:
            self.on_refused("busy")
            with contextlib.suppress(OSError):
                request.setblocking(False)
                request.send(b"HTTP/1.0 503 Service Unavailable\r\nRetry-After: 10\r\nContent-Length: 0\r\n"
                             b"Connection: close\r\n\r\n")
            super().shutdown_request(request)
            return
        request.settimeout(IO_TIMEOUT_S)
        super().process_request(request, client_address)

    def shutdown_request(self, request) -> None:
        with self._guard:
            self.active.pop(request, None)
        super().shutdown_request(request)

    def handle_error(self, request, client_address) -> None:
        """A client that went away mid-answer (or was cut at its deadline): counted, no traceback on stderr."""
        self.on_refused("error")

    def service_actions(self) -> None:
        """Between accepts (every 0.5 s): cut the connections past their deadline; their threads then end. A cut
        one no longer counts from the moment it is cut (its client sees it closed at once, and may come back before
        its thread has ended)."""
        now = time.monotonic()
        with self._guard:
            late = [sock for sock, t0 in self.active.items() if now - t0 > self.deadline_s]
            for sock in late:
                del self.active[sock]
        for sock in late:
            self.on_refused("deadline")
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def serve(listen: str, metrics: Metrics, page: Callable[[], str], *, token: str | None = None,
          on_refused: Callable[[str], None] = lambda why: None, limit: int = MAX_CONNECTIONS,
          deadline_s: float = REQUEST_DEADLINE_S) -> ThreadingHTTPServer:
    """Start the HTTP server (GET /metrics, GET /) on a daemon thread; `listen` is HOST:PORT."""
    expected = f"Bearer {token}".encode() if token else None

    class Handler(BaseHTTPRequestHandler):
        timeout = IO_TIMEOUT_S

        def do_GET(self) -> None:
            if expected is not None and not hmac.compare_digest(
                    self.headers.get("Authorization", "").encode("utf-8", "replace"), expected):
                on_refused("unauthorized")
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Bearer realm="macfleet watch"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.path.split("?")[0] == "/metrics":
                body, ctype = generate_latest(metrics.registry), CONTENT_TYPE_LATEST
            elif self.path.split("?")[0] in ("/", "/index.html"):
                body, ctype = page().encode("utf-8"), "text/html; charset=utf-8"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:  # quiet: the audit log is the record
            return

    try:
        server = _Server(split_listen(listen), Handler, on_refused, limit, deadline_s)
    except (OSError, OverflowError, ValueError) as exc:
        raise UsageError(f"--listen {listen}: cannot listen there ({exc})") from None
    threading.Thread(target=server.serve_forever, name="watch-http", daemon=True).start()
    return server
