"""One SSH session per node, kept open across probes and reconnected with backoff; a probe runs doctor's
commands over them in parallel and hands back what `collect.gather` would (a `Gathered`)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from macfleet.collect.commands import CommandSpec
from macfleet.collect.gather import Gathered
from macfleet.collect.ssh import CommandTimeout, SshSession, SshTarget, Unreachable
from macfleet.inventory.model import Fleet

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0


class KeptSession:
    """A node's session: connected lazily, reused while alive, reconnected no sooner than its backoff."""

    def __init__(self, target: SshTarget):
        self.target = target
        self.session: SshSession | None = None
        self.backoff_s = 0.0
        self.next_try = 0.0
        self.last_error: str | None = None
        self.connects = 0

    def _alive(self) -> bool:
        transport = self.session.client.get_transport() if self.session else None
        return transport is not None and transport.is_active()

    def get(self) -> SshSession:
        if self.session is not None and self._alive():
            return self.session
        self.drop()
        if time.monotonic() < self.next_try:
            raise Unreachable(f"{self.last_error or 'down'} (next attempt in {self.next_try - time.monotonic():.0f} s)")
        session = SshSession(self.target)
        try:
            session.connect()
        except Exception as exc:  # Unreachable, or paramiko failing mid-handshake while a node boots
            session.close()
            self.backoff_s = min(BACKOFF_MAX_S, self.backoff_s * 2 or BACKOFF_FIRST_S)
            self.next_try = time.monotonic() + self.backoff_s
            self.last_error = str(exc)
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


class Prober:
    def __init__(self, fleet: Fleet, nodes: list[str]):
        self.sessions = {n: KeptSession(SshTarget.for_node(fleet, fleet.node(n))) for n in nodes}

    def close(self) -> None:
        for s in self.sessions.values():
            s.drop()

    def retry_now(self) -> None:
        for s in self.sessions.values():
            s.retry_now()

    def probe(self, specs: tuple[CommandSpec, ...], deadline_s: float, command_timeout_s: float) -> Gathered:
        """Every spec on every node; a command gets min(its own timeout, `command_timeout_s`), so a hung
        `ibv_devinfo` (a wedge) costs one command timeout per probe, not more."""
        started = time.monotonic()
        deadline = started + deadline_s
        result = Gathered()
        cancel = threading.Event()

        def node(name: str) -> None:
            kept = self.sessions[name]
            try:
                session = kept.get()
            except Unreachable as exc:
                result.unreachable[name] = str(exc)
                return
            outputs, failed = {}, {}

            def one(spec: CommandSpec) -> None:
                try:
                    budget = min(spec.timeout_s, command_timeout_s, max(0.1, deadline - time.monotonic()))
                    outputs[spec.key] = session.run(spec, timeout_s=budget,
                                                    cancel=cancel)
                except CommandTimeout as exc:
                    failed[spec.key] = str(exc)
                except Unreachable as exc:
                    failed[spec.key] = f"lost: {exc}"

            with ThreadPoolExecutor(max_workers=len(specs)) as pool:
                list(pool.map(one, specs))
            if outputs or not failed or not all(v.startswith("lost:") for v in failed.values()):
                result.outputs[name] = outputs
                if failed:
                    result.failed[name] = failed
            else:
                kept.drop()
                result.unreachable[name] = next(iter(failed.values()))[6:]

        with ThreadPoolExecutor(max_workers=max(1, len(self.sessions))) as pool:
            list(pool.map(node, self.sessions))
        result.took_s = time.monotonic() - started
        return result
