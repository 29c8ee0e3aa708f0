"""Read many commands from many nodes in one pass: nodes in parallel, each node's commands in parallel
over its one SSH connection, each under its own timeout, the whole pass under a deadline.

One pass matters: Thunderbolt domain UUIDs change at every boot, so cable ends are matched only
within outputs read together.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from macfleet.collect.commands import CommandSpec
from macfleet.collect.ssh import CommandTimeout, Raw, SshSession, SshTarget, Unreachable
from macfleet.inventory.model import Fleet, Node

# Enough to overlap SSH handshakes on a small controller without starving it (2 cores here).
MAX_PARALLEL_NODES = 32


@dataclass
class Gathered:
    """Outputs by node and command key; what could not be read says why."""

    outputs: dict[str, dict[str, Raw]] = field(default_factory=dict)
    failed: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> key -> reason (timeout...)
    unreachable: dict[str, str] = field(default_factory=dict)  # node -> reason
    took_s: float = 0.0

    def text(self, node: str, key: str) -> str | None:
        raw = self.outputs.get(node, {}).get(key)
        return raw.stdout if raw is not None else None


def _gather_node(
    target: SshTarget,
    specs: tuple[CommandSpec, ...],
    deadline: float,
    cancel: threading.Event,
) -> tuple[dict[str, Raw], dict[str, str]]:
    outputs: dict[str, Raw] = {}
    failed: dict[str, str] = {}
    with SshSession(target) as session:

        def one(spec: CommandSpec) -> None:
            budget = min(spec.timeout_s, max(0.1, deadline - time.monotonic()))
            try:
                outputs[spec.key] = session.run(spec, timeout_s=budget, cancel=cancel)
            except CommandTimeout as exc:
                failed[spec.key] = str(exc)

        threads = [threading.Thread(target=one, args=(s,), daemon=True) for s in specs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return outputs, failed


def gather(
    fleet: Fleet,
    nodes: Iterable[Node],
    specs: Iterable[CommandSpec],
    *,
    deadline_s: float | None = None,
    cancel: threading.Event | None = None,
    on_node_done: Callable[[str], None] | None = None,
) -> Gathered:
    """Run every spec on every node. Never raises for a node's sake: unreachable nodes are recorded."""
    nodes = list(nodes)
    specs = tuple(specs)
    cancel = cancel or threading.Event()
    if deadline_s is None:
        deadline_s = max(m.settings.probes.gather_deadline_s for m in fleet.meshes)
    started = time.monotonic()
    deadline = started + deadline_s
    result = Gathered()
    if not nodes:
        return result

    def work(node: Node) -> None:
        try:
            outputs, failed = _gather_node(SshTarget.for_node(fleet, node), specs, deadline, cancel)
        except Unreachable as exc:
            result.unreachable[node.name] = str(exc)
        else:
            result.outputs[node.name] = outputs
            if failed:
                result.failed[node.name] = failed
        if on_node_done is not None:
            on_node_done(node.name)

    pool = ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_NODES, len(nodes)), thread_name_prefix="gather")
    futures = {pool.submit(work, n): n for n in nodes}
    try:
        done, pending = wait(futures, timeout=deadline_s + 5)
        if pending:
            cancel.set()  # stop the stragglers' channels; their nodes are reported, not waited for
        for future in pending:
            result.unreachable.setdefault(futures[future].name, f"no answer within the {deadline_s:g} s deadline")
        for future in done:
            exc = future.exception()
            if exc is not None:
                # A UsageError (a missing known_hosts file...) is the operator's to fix: surface it.
                raise exc
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    result.took_s = time.monotonic() - started
    return result
