"""Prometheus metrics (prometheus-client) and the read-only status page, served together on --listen."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

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
        self.streak = Gauge("macfleet_problem_streak", "Bad probes in a row per check", ["mesh", "check"],
                            registry=r)
        self.last_probe = Gauge("macfleet_last_probe_timestamp_seconds", "When the last probe finished (Unix time)",
                                ["mesh"], registry=r)
        self.probe_seconds = Gauge("macfleet_probe_duration_seconds", "How long the last probe took", ["mesh"],
                                   registry=r)


def serve(listen: str, metrics: Metrics, page: Callable[[], str]) -> ThreadingHTTPServer:
    """Start the HTTP server (GET /metrics, GET /) on a daemon thread; `listen` is HOST:PORT."""
    host, _, port = listen.rpartition(":")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
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
        server = ThreadingHTTPServer((host.strip("[]") or "127.0.0.1", int(port)), Handler)
    except (OSError, OverflowError, ValueError) as exc:
        raise UsageError(f"--listen {listen}: cannot listen there ({exc})") from None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="watch-http", daemon=True).start()
    return server
