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
    session: SshSession, specs: tuple[CommandSpec, ...], deadline: float, cancel: threading.Event, lanes: int
) -> tuple[dict[str, Raw], dict[str, str]]:
    """Every command at once in one shell on one channel (collect.batch); each keeps its own timeout, counted
    from the start, cut short by the pass's deadline."""
    if cancel.is_set():
        return {}, {s.key: f"`{s.command_line}` not run: cancelled" for s in specs}
    if deadline <= time.monotonic():
        return {}, {s.key: f"`{s.command_line}` not run: the pass's deadline had passed" for s in specs}
    return session.run_batch(specs, deadline=deadline, cancel=cancel, lanes=lanes)


def _wait(all_done: threading.Event, errors: list[BaseException], until: float, cancel: threading.Event) -> None:
    """Wait in short slices, so Ctrl-C (KeyboardInterrupt) reaches this thread at once and cancels the pass."""
    try:
        while not all_done.wait(POLL_S):
            if errors or time.monotonic() > until:
                return
    except BaseException:
        cancel.set()
        raise


PerNode = Mapping[str, tuple[CommandSpec, ...]] | Callable[[str], tuple[CommandSpec, ...]]


@dataclass
class _Pass:
    """What a pass's node threads share."""

    result: Gathered
    pending: set[str]
    deadline_s: float
    started: float
    cancel: threading.Event
    jumps: Jumps
    errors: list[BaseException] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    all_done: threading.Event = field(default_factory=threading.Event)
    open_for_results: bool = True  # a straggler finishing after we returned must not change the result

    def record(self, node: str, outputs: dict[str, Raw] | None, failed: dict[str, str], why: str | None) -> None:
        with self.lock:
            if self.open_for_results:
                if outputs is not None:
                    self.result.outputs[node] = outputs
                if failed:
                    self.result.failed[node] = failed
                if why is not None:
                    self.result.unreachable[node] = why
            self.pending.discard(node)
            if not self.pending:
                self.all_done.set()


class Gathering:
    """A pass under way: the nodes answer while the caller does other work (doctor imports its parsers and
    judges meanwhile). `result()` waits for it; `abandon()` stops it when the caller gives up."""

    def __init__(self, state: _Pass | None, result: Gathered | None = None):
        self._state = state
        self._empty = result

    def result(self) -> Gathered:
        """Wait for every node (or the deadline); Ctrl-C here cancels the pass."""
        st = self._state
        if st is None:
            return self._empty or Gathered()
        try:
            _wait(st.all_done, st.errors, st.started + st.deadline_s + 5, st.cancel)
        finally:
            self._close()
        if st.errors:
            raise st.errors[0]
        for node in st.pending:
            st.result.unreachable.setdefault(node, f"no answer within the {st.deadline_s:g} s deadline")
        st.result.took_s = time.monotonic() - st.started
        return st.result

    def abandon(self) -> None:
        """Stop the pass: nothing it read afterwards is kept."""
        if self._state is not None:
            self._state.cancel.set()
            self._close()

    def _close(self) -> None:
        st = self._state
        assert st is not None
        with st.lock:
            st.open_for_results = False
            if st.pending:
                st.cancel.set()  # stop the stragglers' channels; their nodes are reported, not waited for
        st.jumps.close()


def _extra_specs(per_node: PerNode | None) -> Callable[[str], tuple[CommandSpec, ...]]:
    if per_node is None:
        return lambda node: ()
    if callable(per_node):
        return per_node
    return lambda node: tuple(per_node.get(node, ()))


def start_gather(
    fleet: Fleet,
    nodes: Iterable[Node],
    specs: Iterable[CommandSpec],
    *,
    deadline_s: float | None = None,
    cancel: threading.Event | None = None,
    on_node_done: Callable[[str], None] | None = None,
    per_node: PerNode | None = None,
) -> Gathering:
    """Start the pass `gather` runs and return at once, every node being dialled. `per_node` may be a function
    of the node, called on that node's thread once its login is done (doctor's pings need the IP plan, which
    is worked out while the nodes shake hands). Bad input (a missing key…) is raised here, before any node
    is dialled."""
    nodes = list(nodes)
    specs = tuple(specs)
    cancel = cancel or threading.Event()
    if deadline_s is None:
        deadline_s = max(m.settings.probes.gather_deadline_s for m in fleet.meshes)
    started = time.monotonic()
    if not nodes:
        return Gathering(None, Gathered())
    targets = {n.name: SshTarget.for_node(fleet, n) for n in nodes}
    lanes = {n.name: fleet.mesh(n.mesh).settings.probes.lanes for n in nodes}
    for target in targets.values():
        target.check_local_files()  # bad input is refused before any node is dialled
    st = _Pass(result=Gathered(), pending=set(targets), deadline_s=deadline_s, started=started, cancel=cancel,
               jumps=Jumps())
    deadline = started + deadline_s
    extra = _extra_specs(per_node)
    slots = threading.BoundedSemaphore(MAX_PARALLEL_NODES)

    def work(node: str) -> None:
        outputs, failed, why = None, {}, None
        try:
            with slots:
                if cancel.is_set():
                    raise Unreachable("not contacted: cancelled")
                with SshSession(targets[node], st.jumps) as session:
                    outputs, failed = _run_all(session, specs + tuple(extra(node)), deadline, cancel, lanes[node])
        except Unreachable as exc:
            why = str(exc)
        except BaseException as exc:  # handed to the caller's thread by Gathering.result
            with st.lock:
                st.errors.append(exc)
        st.record(node, outputs, failed, why)
        if on_node_done is not None:
            on_node_done(node)

    # Daemon threads: the process can exit without joining one stuck in a connect timeout.
    for node in targets:
        threading.Thread(target=work, args=(node,), daemon=True, name=f"gather-{node}").start()
    return Gathering(st)


def gather(
    fleet: Fleet,
    nodes: Iterable[Node],
    specs: Iterable[CommandSpec],
    *,
    deadline_s: float | None = None,
    cancel: threading.Event | None = None,
    on_node_done: Callable[[str], None] | None = None,
    per_node: PerNode | None = None,
) -> Gathered:
    """Run every spec on every node, and `per_node[node]` on that node too (doctor's pings to its peers).
    Never raises for a node's sake: unreachable nodes are recorded. Bad input
    (a missing key, a changed host key…) is raised as UsageError before or instead of a verdict."""
    return start_gather(fleet, nodes, specs, deadline_s=deadline_s, cancel=cancel, on_node_done=on_node_done,
                        per_node=per_node).result()
