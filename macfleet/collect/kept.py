"""SSH sessions kept open: one per node, connected lazily, reused while alive, reconnected no sooner than its
backoff. `watch` probes over them at every interval, and a mesh reboot issues its commands and verifies the
mesh over the same ones, so neither pays a handshake per command."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from macfleet.collect.commands import CommandSpec
from macfleet.collect.gather import Gathered
from macfleet.collect.ssh import AtUnlockScreen, Raw, SshSession, SshTarget, Unreachable
from macfleet.inventory.model import Fleet

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0

# sshd allows MaxSessions (10 by default, on macOS too) channels at once per connection; one over it is
# refused. A kept session runs its commands a channel each, so it stays under that with headroom.
MAX_CHANNELS_PER_CONNECTION = 8


class KeptSession:
    """A node's session: connected lazily, reused while alive, reconnected no sooner than its backoff."""

    def __init__(self, target: SshTarget):
        self.target = target
        self.session: SshSession | None = None
        self.backoff_s = 0.0
        self.next_try = 0.0
        self.last_error: str | None = None
        self.connects = 0
        self._lock = threading.Lock()  # one connect at a time, whoever asks

    def alive(self) -> bool:
        transport = self.session.client.get_transport() if self.session else None
        return transport is not None and transport.is_active()

    def get(self, *, now: bool = False) -> SshSession:
        """The open session, or a new one; Unreachable while down. `now`: ignore the backoff (a caller
        polling at its own pace, e.g. for a node coming back from a reboot)."""
        with self._lock:
            if self.session is not None and self.alive():
                return self.session
            self.drop()
            if not now and time.monotonic() < self.next_try:
                raise Unreachable(f"{self.last_error or 'down'} "
                                  f"(next attempt in {self.next_try - time.monotonic():.0f} s)")
            session = SshSession(self.target)
            try:
                session.connect()
            except Exception as exc:  # Unreachable, or paramiko failing mid-handshake while a node boots
                session.close()
                self.backoff_s = min(BACKOFF_MAX_S, self.backoff_s * 2 or BACKOFF_FIRST_S)
                self.next_try = time.monotonic() + self.backoff_s
                self.last_error = str(exc) or type(exc).__name__
                if isinstance(exc, AtUnlockScreen):  # told apart: the reboot's wait may unlock it
                    raise AtUnlockScreen(exc.node, exc.key_fingerprint) from None
                raise Unreachable(self.last_error) from None
            self.session, self.backoff_s, self.last_error = session, 0.0, None
            self.connects += 1
            return session

    def drop(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

    def retry_now(self) -> None:
        """After a reboot the nodes are expected back: do not wait out a backoff from before it."""
        self.backoff_s, self.next_try = 0.0, 0.0


def run_specs(session: SshSession, specs: tuple[CommandSpec, ...], deadline: float,
              cap_s: float | None = None, cancel: threading.Event | None = None
              ) -> tuple[dict[str, Raw], dict[str, str]]:
    """Every spec over one open session, a few channels at once (under sshd's MaxSessions); each command gets
    min(its own timeout, `cap_s`, what is left before `deadline`). (outputs, failed key -> why)."""
    outputs: dict[str, Raw] = {}
    failed: dict[str, str] = {}
    todo: queue.SimpleQueue[CommandSpec] = queue.SimpleQueue()
    for spec in specs:
        todo.put(spec)

    def worker() -> None:
        while True:
            try:
                spec = todo.get_nowait()
            except queue.Empty:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                failed[spec.key] = f"`{spec.command_line}` not run: the pass's deadline had passed"
                continue
            budget = min(spec.timeout_s, cap_s or spec.timeout_s, left)
            try:
                outputs[spec.key] = session.run(spec, timeout_s=max(0.1, budget), cancel=cancel)
            except Unreachable as exc:
                failed[spec.key] = f"lost: {exc}"
            except Exception as exc:  # a timeout or a cancel: this command was not read, say why
                failed[spec.key] = str(exc) or type(exc).__name__

    workers = [threading.Thread(target=worker, daemon=True) for _ in range(min(MAX_CHANNELS_PER_CONNECTION,
                                                                               len(specs)))]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return outputs, failed


class NodeSessions:
    """The kept sessions of a set of nodes, and one pass of commands over them."""

    def __init__(self, fleet: Fleet, nodes: list[str]):
        self.sessions = {n: KeptSession(SshTarget.for_node(fleet, fleet.node(n))) for n in nodes}

    def get(self, node: str, *, now: bool = False) -> SshSession:
        return self.sessions[node].get(now=now)

    def close(self) -> None:
        for s in self.sessions.values():
            s.drop()

    def retry_now(self) -> None:
        for s in self.sessions.values():
            s.retry_now()

    def gather_node(self, node: str, specs: tuple[CommandSpec, ...], deadline: float, result: Gathered,
                    cap_s: float | None = None, cancel: threading.Event | None = None) -> None:
        """One node's pass into `result`; a session lost under every command makes the node unreachable."""
        kept = self.sessions[node]
        try:
            session = kept.get()
        except Unreachable as exc:
            result.unreachable[node] = str(exc)
            return
        outputs, failed = run_specs(session, specs, deadline, cap_s, cancel)
        if outputs or not failed or not all(v.startswith("lost:") for v in failed.values()):
            result.outputs[node] = outputs
            if failed:
                result.failed[node] = failed
        else:
            kept.drop()
            result.unreachable[node] = next(iter(failed.values()))[len("lost: "):]

    def gather(self, specs: tuple[CommandSpec, ...], deadline_s: float, cap_s: float | None = None,
               nodes: list[str] | None = None, per_node: Callable[[str], tuple[CommandSpec, ...]] | None = None
               ) -> Gathered:
        """Every spec on every node (or `nodes`) in parallel, and `per_node(node)` on that node too, as
        `collect.gather` would hand it back."""
        started = time.monotonic()
        result = Gathered()
        cancel = threading.Event()
        names = list(nodes or self.sessions)

        def one(node: str) -> None:
            mine = specs + (per_node(node) if per_node is not None else ())
            self.gather_node(node, mine, started + deadline_s, result, cap_s, cancel)

        with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
            list(pool.map(one, names))
        result.took_s = time.monotonic() - started
        return result
