"""Read many commands from many nodes in one pass: nodes in parallel, each node's commands at once in one
shell over its one SSH connection (one channel: collect.batch), each under its own timeout, the whole pass
under a deadline. Every command asked for ends either in `outputs` or in `failed` with its reason.

One pass matters: Thunderbolt domain UUIDs change at every boot, so cable ends are matched only
within outputs read together.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from macfleet.collect.commands import CommandSpec
from macfleet.collect.ssh import Jumps, Raw, SshSession, SshTarget, Unreachable
from macfleet.inventory.model import Fleet, Node

# Enough to overlap SSH handshakes on a small controller without starving it (2 cores here).
MAX_PARALLEL_NODES = 32
# How often the waiting thread wakes to notice Ctrl-C and the deadline.
POLL_S = 0.05


@dataclass
class Gathered:
    """Outputs by node and command key; what could not be read says why."""

    outputs: dict[str, dict[str, Raw]] = field(default_factory=dict)
    failed: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> key -> why it was not read
    unreachable: dict[str, str] = field(default_factory=dict)  # node -> reason
    took_s: float = 0.0

    def text(self, node: str, key: str) -> str | None:
        raw = self.outputs.get(node, {}).get(key)
        return raw.stdout if raw is not None else None


def _run_all(
    session: SshSession, specs: tuple[CommandSpec, ...], deadline: float, cancel: threading.Event
) -> tuple[dict[str, Raw], dict[str, str]]:
    """Every command at once in one shell on one channel (collect.batch); each keeps its own timeout, counted
    from the start, cut short by the pass's deadline."""
    if cancel.is_set():
        return {}, {s.key: f"`{s.command_line}` not run: cancelled" for s in specs}
    if deadline <= time.monotonic():
        return {}, {s.key: f"`{s.command_line}` not run: the pass's deadline had passed" for s in specs}
    return session.run_batch(specs, deadline=deadline, cancel=cancel)


def _wait(all_done: threading.Event, errors: list[BaseException], until: float, cancel: threading.Event) -> None:
    """Wait in short slices, so Ctrl-C (KeyboardInterrupt) reaches this thread at once and cancels the pass."""
    try:
        while not all_done.wait(POLL_S):
            if errors or time.monotonic() > until:
                return
    except BaseException:
        cancel.set()
        raise


def gather(
    fleet: Fleet,
    nodes: Iterable[Node],
    specs: Iterable[CommandSpec],
    *,
    deadline_s: float | None = None,
    cancel: threading.Event | None = None,
    on_node_done: Callable[[str], None] | None = None,
    per_node: Mapping[str, tuple[CommandSpec, ...]] | None = None,
) -> Gathered:
    """Run every spec on every node, and `per_node[node]` on that node too (doctor's pings to its peers).
    Never raises for a node's sake: unreachable nodes are recorded. Bad input
    (a missing key, a changed host key…) is raised as UsageError before or instead of a verdict."""
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
    targets = {n.name: SshTarget.for_node(fleet, n) for n in nodes}
    for target in targets.values():
        target.check_local_files()  # bad input is refused before any node is dialled
    jumps = Jumps()
    slots = threading.BoundedSemaphore(MAX_PARALLEL_NODES)
    errors: list[BaseException] = []
    lock = threading.Lock()
    all_done = threading.Event()
    pending = set(targets)
    open_for_results = [True]  # a straggler finishing after we returned must not change the result

    def record(node: str, outputs: dict[str, Raw] | None, failed: dict[str, str], why: str | None) -> None:
        with lock:
            if open_for_results[0]:
                if outputs is not None:
                    result.outputs[node] = outputs
                if failed:
                    result.failed[node] = failed
                if why is not None:
                    result.unreachable[node] = why
            pending.discard(node)
            if not pending:
                all_done.set()

    def work(node: str) -> None:
        outputs, failed, why = None, {}, None
        try:
            with slots:
                if cancel.is_set():
                    raise Unreachable("not contacted: cancelled")
                with SshSession(targets[node], jumps) as session:
                    mine = specs + tuple((per_node or {}).get(node, ()))
                    outputs, failed = _run_all(session, mine, deadline, cancel)
        except Unreachable as exc:
            why = str(exc)
        except BaseException as exc:  # handed to the caller's thread below
            with lock:
                errors.append(exc)
        record(node, outputs, failed, why)
        if on_node_done is not None:
            on_node_done(node)

    # Daemon threads: the process can exit without joining one stuck in a connect timeout.
    for node in targets:
        threading.Thread(target=work, args=(node,), daemon=True, name=f"gather-{node}").start()
    try:
        _wait(all_done, errors, deadline + 5, cancel)
    finally:
        with lock:
            open_for_results[0] = False
            if pending:
                cancel.set()  # stop the stragglers' channels; their nodes are reported, not waited for
        jumps.close()
    if errors:
        raise errors[0]
    for node in pending:
        result.unreachable.setdefault(node, f"no answer within the {deadline_s:g} s deadline")
    result.took_s = time.monotonic() - started
    return result
