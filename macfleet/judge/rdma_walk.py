"""The `rdma enable` walkthrough as a resumable state machine: pure transitions, kept in a state file.

Each node goes   todo → going-down → away → back → done
                   (shut down)  (gone from SSH)  (answers again)  (RDMA verified on)
and may end as skipped (the operator said so), timed-out (it did not go or come back in time) or failed
(it came back with RDMA still off). `advance` is the only way a phase changes; it refuses any other move.
The flow saves the state after every move, so an interrupted run resumes where it stopped.

Pure: no I/O, no clock (`now` is passed in).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Phase = Literal["todo", "going-down", "away", "back", "done", "skipped", "timed-out", "failed"]
Event = Literal["begin", "gone", "reachable", "verified", "not-verified", "timeout", "skip", "retry"]
WAITING: frozenset[str] = frozenset({"going-down", "away"})
IN_PROGRESS: frozenset[str] = frozenset({"going-down", "away", "back"})
FINAL: frozenset[str] = frozenset({"done", "skipped", "timed-out", "failed"})
STATE_VERSION = 1

TRANSITIONS: dict[tuple[str, str], str] = {
    ("todo", "begin"): "going-down",
    ("todo", "gone"): "away",  # already shut down by hand
    ("going-down", "gone"): "away",
    ("going-down", "timeout"): "timed-out",
    ("going-down", "retry"): "going-down",  # the clock starts again
    ("away", "reachable"): "back",
    ("away", "timeout"): "timed-out",
    ("away", "retry"): "away",
    ("back", "verified"): "done",
    ("back", "not-verified"): "failed",
    ("timed-out", "retry"): "todo",
    ("failed", "retry"): "todo",
    ("skipped", "retry"): "todo",
    **{(p, "skip"): "skipped" for p in ("todo", "going-down", "away", "back")},
}


class InvalidTransition(ValueError):
    def __init__(self, node: str, phase: str, event: str):
        super().__init__(f"{node}: cannot {event} while {phase}")


class NodeProgress(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    phase: Phase = "todo"
    since: float | None = None  # when the phase began (time.time() of the controller)
    note: str | None = None  # why it ended as it did, for the summary


class WalkState(BaseModel):
    """What the state file holds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = STATE_VERSION
    all_at_once: bool = False
    nodes: list[NodeProgress] = Field(default_factory=list)

    def get(self, node: str) -> NodeProgress:
        return next(p for p in self.nodes if p.node == node)

    def put(self, progress: NodeProgress) -> WalkState:
        return self.model_copy(update={"nodes": [progress if p.node == progress.node else p for p in self.nodes]})

    @property
    def finished(self) -> bool:
        return all(p.phase in FINAL for p in self.nodes)


def advance(progress: NodeProgress, event: Event, now: float, note: str | None = None) -> NodeProgress:
    """The node's next phase after `event`; InvalidTransition for a move the table does not allow."""
    to = TRANSITIONS.get((progress.phase, event))
    if to is None:
        raise InvalidTransition(progress.node, progress.phase, event)
    return NodeProgress(node=progress.node, phase=to, since=now, note=note)  # type: ignore[arg-type]


def timed_out(progress: NodeProgress, now: float, timeout_s: float) -> bool:
    """A node waited on (to go away or to come back) for `timeout_s` or longer."""
    return progress.phase in WAITING and progress.since is not None and now - progress.since >= timeout_s


def plan_walk(order: Sequence[str], needed: Sequence[str], previous: WalkState | None,
              all_at_once: bool) -> WalkState:
    """The walk for this run: the nodes that need it, in inventory order (the rack order the operator
    wrote down, so the rack is walked once). A node an interrupted run left in progress keeps its phase;
    one it gave up on (skipped, timed out, failed) is tried again; one it finished is not."""
    before = {p.node: p for p in (previous.nodes if previous else [])}
    nodes = []
    for name in order:
        old = before.get(name)
        if old is not None and old.phase in IN_PROGRESS:
            nodes.append(old)
        elif name in needed:
            nodes.append(NodeProgress(node=name))
    return WalkState(all_at_once=previous.all_at_once if previous and any(
        p.phase in IN_PROGRESS for p in nodes) else all_at_once, nodes=nodes)


def next_group(state: WalkState) -> list[str]:
    """The node(s) to work on next: whatever is in progress first (a resumed run picks up there), then the
    next node to do (all of them at once with --all-at-once). Empty when the walk is over."""
    busy = [p.node for p in state.nodes if p.phase in IN_PROGRESS]
    todo = [p.node for p in state.nodes if p.phase == "todo"]
    if state.all_at_once:
        return busy + todo
    return busy[:1] or todo[:1]
