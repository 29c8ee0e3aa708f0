"""The RDMA flows: `rdma status` (one collection pass, judged) and `rdma enable` (the walkthrough).

The walkthrough's decisions are the pure state machine of judge/rdma_walk.py; this module only probes
nodes over SSH, waits, talks to the operator through an `Operator` (the CLI's console) and keeps the state
file beside the inventory after every move, so Ctrl-C and a later run continue where it stopped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from macfleet.act.rack import play_sound, shut_down
from macfleet.collect.commands import CommandSpec, spec_for
from macfleet.collect.gather import Gathered, gather
from macfleet.errors import MacfleetError, UsageError
from macfleet.facts.registry import facts_from_outputs
from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge.rdma import NodeRdma, NodeRdmaFacts, RdmaReport, judge_rdma
from macfleet.judge.rdma_walk import WAITING, Event, NodeProgress, WalkState, advance, next_group, plan_walk, timed_out
from macfleet.judge.startup_steps import startup_steps

# Eight commands: under the ten sessions sshd allows per connection on a Mac.
RDMA_CTL = spec_for("rdma-ctl")
RDMA_SPECS: tuple[CommandSpec, ...] = (
    *(spec_for(k) for k in ("sw-vers", "hardware", "thunderbolt", "hardware-ports", "ifconfig")),
    RDMA_CTL, spec_for("ibv-devices"), spec_for("ibv-devinfo", "verbose"),
)
STATE_FILE = "rdma-enable.state.json"
PROBE_DEADLINE_S = 8.0


def rdma_facts(gathered: Gathered, node: str) -> NodeRdmaFacts:
    outputs, failed = gathered.outputs.get(node, {}), gathered.failed.get(node, {})
    by_kind = {s.kind: outputs[s.key] for s in RDMA_SPECS if s.key in outputs}
    failed_kind = {s.kind: failed[s.key] for s in RDMA_SPECS if s.key in failed}
    facts, problems = facts_from_outputs(by_kind, failed_kind, [s.kind for s in RDMA_SPECS])
    return NodeRdmaFacts(**{k.replace("-", "_"): v for k, v in facts.items()}, timed_out=sorted(failed_kind),
                         problems=problems)


def rdma_status(fleet: Fleet, meshes: list[Mesh], *, cancel: threading.Event | None = None) -> RdmaReport:
    """One pass over every node of `meshes`, judged."""
    gathered = gather(fleet, [n for m in meshes for n in m.nodes], RDMA_SPECS, cancel=cancel)
    facts = {n: rdma_facts(gathered, n) for n in gathered.outputs}
    return judge_rdma(meshes, facts, gathered.unreachable)


# ------------------------------------------------------------------------------------------ the walkthrough


class Operator(Protocol):
    """The person at the rack, as the console shows and hears them."""

    def message(self, text: str, style: str = "") -> None: ...

    def identify(self, node: NodeRdma, index: int, total: int) -> None: ...

    def checklist(self, title: str, steps: list[str]) -> None: ...

    def choose(self, question: str, options: list[tuple[str, str]], default: str) -> str: ...

    def poll(self, label: str, elapsed_s: float, wait_s: float) -> str | None: ...

    def end_poll(self) -> None: ...


@dataclass
class EnableOptions:
    nodes: list[str] = field(default_factory=list)
    all_at_once: bool = False
    non_interactive: bool = False
    timeout_s: float = 900.0  # to go away after the shutdown, and again to come back from Recovery
    poll_s: float = 1.0


@dataclass
class EnableResult:
    report: RdmaReport
    walk: WalkState | None
    never: list[str]  # nodes that can never do RDMA (told once, not walked through)
    stopped: bool = False  # the operator chose to stop; the state file keeps the place
    state_file: Path | None = None

    @property
    def exit_code(self) -> int:
        code = self.report.exit_code()
        return 1 if self.stopped and code == 0 else code


class _Stop(Exception):
    pass


def state_path(fleet: Fleet) -> Path:
    return fleet.root / STATE_FILE


def load_state(path: Path) -> tuple[WalkState | None, str | None]:
    """The saved walk, or None; the second value says why a file that exists was not usable."""
    try:
        return WalkState.model_validate_json(path.read_text()), None
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError, ValidationError) as exc:
        return None, f"ignoring {path}: {str(exc).splitlines()[0][:120]}"


def save_state(path: Path, state: WalkState) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state.model_dump(mode="json"), indent=1) + "\n")
    os.replace(tmp, path)


class _Walk:
    """One run of the walkthrough: the state, saved after every move, and the operator."""

    def __init__(self, fleet: Fleet, meshes: list[Mesh], opts: EnableOptions, operator: Operator,
                 state: WalkState, path: Path, clock: Callable[[], float]):
        self.fleet, self.meshes, self.opts, self.op = fleet, meshes, opts, operator
        self.state, self.path, self.clock = state, path, clock
        # Probing a Mac while it shuts down makes paramiko's transport thread log a traceback (connection
        # reset mid-banner); that is the expected answer here, not something for the operator's screen.
        logging.getLogger("paramiko.transport").addHandler(logging.NullHandler())
        logging.getLogger("paramiko.transport").propagate = False

    def move(self, node: str, event: Event, note: str | None = None) -> NodeProgress:
        p = advance(self.state.get(node), event, self.clock(), note)
        self.state = self.state.put(p)
        save_state(self.path, self.state)
        return p

    def mesh_of(self, node: str) -> Mesh:
        return next(m for m in self.meshes if node in m.node_names)

    def reachable(self, node: str) -> bool:
        try:
            g = gather(self.fleet, [self.fleet.node(node)], (RDMA_CTL,), deadline_s=PROBE_DEADLINE_S)
        except MacfleetError:
            raise
        except Exception:  # a Mac going down can drop the SSH handshake midway (paramiko: EOFError)
            return False
        return RDMA_CTL.key in g.outputs.get(node, {})

    def look(self, node: str) -> NodeRdma:
        report = rdma_status(self.fleet, [self.mesh_of(node)])
        found = report.node(node)
        assert found is not None
        return found

    # -- one group (one node, or all of them with --all-at-once) --------------------------------------

    def start(self, group: list[str], boxes: dict[str, NodeRdma]) -> None:
        """Identify the box(es) and shut them down (or let the operator), unless a resumed run already did."""
        todo = [n for n in group if self.state.get(n).phase == "todo"]
        if not todo:
            for n in group:
                self.op.message(f"resuming at {n}: {_PHASE_WORDS[self.state.get(n).phase]}", "bold")
                if self.state.get(n).phase in WAITING:
                    self.move(n, "retry")  # the clock starts again: the operator is back now
            return
        order = [p.node for p in self.state.nodes]
        for n in todo:
            self.op.identify(boxes[n], order.index(n) + 1, len(order))
        them = todo[0] if len(todo) == 1 else f"these {len(todo)} Macs"
        options = [("y", f"shut {them} down now (sudo shutdown -h now)"), ("p", f"play a sound on {them}"),
                   ("m", "I shut down by hand"), ("s", "skip"), ("q", "stop here (run again to resume)")]
        while True:
            key = self.op.choose(f"{', '.join(todo)}: what now?", options, "y")
            if key == "p":
                for n in todo:
                    err = play_sound(self.fleet, self.fleet.node(n))
                    self.op.message(f"{n}: playing Ping" if err is None else f"{n}: no sound ({err})")
                continue
            if key == "q":
                raise _Stop
            if key == "s":
                for n in todo:
                    self.move(n, "skip", "skipped by the operator")
                return
            break
        for n in todo:
            self.move(n, "begin")
            if key == "y":
                err = shut_down(self.fleet, self.fleet.node(n))
                self.op.message(f"{n}: shutting down" if err is None
                                else f"{n}: could not shut it down ({err}); shut it down by hand", "")
        for family in dict.fromkeys(boxes[n].family for n in todo):
            who = [n for n in todo if boxes[n].family == family]
            self.op.checklist(f"At the Mac ({family or 'Mac'}: {', '.join(who)})", startup_steps(family))

    def wait(self, group: list[str]) -> None:
        """Wait for each node of the group to go away, then to come back, polling SSH; keys skip or retry."""
        while True:
            waiting = [n for n in group if self.state.get(n).phase in WAITING]
            if not waiting:
                self.op.end_poll()
                return
            now = self.clock()
            for n in waiting:
                p = self.state.get(n)
                if timed_out(p, now, self.opts.timeout_s):
                    self.op.end_poll()
                    self.move(n, "timeout", _timeout_note(n, p.phase, self.opts.timeout_s))
                    self.op.message(self.state.get(n).note or "", "bold red")
                    continue
                up = self.reachable(n)
                if p.phase == "going-down" and not up:
                    self.op.end_poll()
                    self.move(n, "gone")
                    self.op.message(f"{n} has shut down: now at the Mac, follow the steps (Recovery → Terminal → "
                                    "`rdma_ctl enable` → Restart)", "bold")
                elif p.phase == "away" and up:
                    self.op.end_poll()
                    self.move(n, "reachable")
                    self.op.message(f"{n} is back; checking RDMA…", "bold")
            waiting = [n for n in group if self.state.get(n).phase in WAITING]
            if not waiting:
                continue
            first = self.state.get(waiting[0])
            doing = "shut down" if first.phase == "going-down" else "come back"
            label = f"waiting for {', '.join(waiting)} to {doing}  (s Enter: skip, r Enter: restart the clock)"
            key = self.op.poll(label, self.clock() - (first.since or self.clock()), self.opts.poll_s)
            if key in ("s", "r"):
                self.op.end_poll()
                for n in waiting:
                    self.move(n, "skip" if key == "s" else "retry", "skipped by the operator" if key == "s" else None)

    def verify(self, group: list[str]) -> None:
        for n in group:
            if self.state.get(n).phase != "back":
                continue
            node = self.look(n)
            if node.enabled_ok:
                self.move(n, "verified", f"RDMA on, {node.devices} RDMA devices")
                ports = ", ".join(f"{p.port} {p.state}" + (f" ({p.why})" if p.state != "active" and p.why else "")
                                  for p in node.ports)
                self.op.message(f"{n}: RDMA is on ({node.devices} devices). Ports: {ports or 'none cabled'}", "green")
            else:
                why = "; ".join(p.message for p in node.problems[:2]) or "RDMA is still off"
                self.move(n, "not-verified", why)
                self.op.message(f"{n} came back but RDMA is not on: {why}. In Recovery's Terminal, did `rdma_ctl "
                                "enable` print an error? \"This tool needs to be executed from Recovery OS\" means the "
                                "Mac had started normally, not into Recovery: hold the power button until \"Loading "
                                "startup options\". Run `macfleet rdma enable` again to retry it.", "bold red")


_PHASE_WORDS = {"going-down": "waiting for it to shut down", "away": "waiting for it to come back from Recovery",
                "back": "it is back; checking RDMA", "todo": "to do"}


def _timeout_note(node: str, phase: str, timeout_s: float) -> str:
    if phase == "going-down":
        return (f"{node} did not shut down within {timeout_s:g} s: shut it down by hand (hold the power button), "
                "then run `macfleet rdma enable` again")
    return (f"{node} did not come back within {timeout_s:g} s: check it at the rack (still in Recovery? stuck at "
            "startup?); run `macfleet rdma enable` again to continue with it")


def _unread_why(node: NodeRdma) -> str:
    """Why a node's RDMA state could not be read, as the report says it."""
    return next((p.message for p in node.problems if p.code in ("unreachable", "rdma-unknown")),
                f"`rdma_ctl status` of {node.name} was not read")


def _candidates(report: RdmaReport, opts: EnableOptions, previous: WalkState | None,
                operator: Operator) -> tuple[list[str], list[str], list[str]]:
    """(nodes to walk through, nodes that can never do RDMA, nodes whose RDMA state could not be read). Each Mac
    that can never do it is named once and left out; each one that could not be read is named with why: whether
    it needs the walkthrough cannot be told, so it is offered, never taken for one that does not need it."""
    in_progress = {p.node for p in (previous.nodes if previous else []) if p.phase in ("going-down", "away", "back")}
    asked = set(opts.nodes)
    never: list[str] = []
    needed: list[str] = []
    unread: list[str] = []
    for n in report.nodes:
        if asked and n.name not in asked:
            continue
        if n.can_do_rdma is False:
            never.append(n.name)
            why = next((p.message for p in n.problems if p.code in ("not-tb5", "os-too-old")), "")
            operator.message(f"{n.name} is not walked through: {why}", "bold yellow")
        elif n.needs_enable or n.name in in_progress or (asked and n.reachable):
            needed.append(n.name)
        elif n.rdma_enabled is None:
            unread.append(n.name)
            operator.message(f"{n.name}: could not read whether RDMA is on ({_unread_why(n)}); whether it needs "
                             "the Recovery step cannot be told", "bold yellow")
    return needed, never, unread


def _final_check(fleet: Fleet, meshes: list[Mesh], settle_s: float) -> RdmaReport:
    """The whole-mesh verification; ports can take a moment to come up after the last restart."""
    deadline = time.monotonic() + settle_s
    while True:
        report = rdma_status(fleet, meshes)
        if report.ready or time.monotonic() >= deadline or report.exit_code() == 3:
            return report
        time.sleep(2.0)


def enable_rdma(fleet: Fleet, meshes: list[Mesh], opts: EnableOptions, operator: Operator,
                clock: Callable[[], float] = time.time) -> EnableResult:
    """Walk the operator through switching RDMA on, node by node (or all at once), then verify the mesh."""
    names = {n for m in meshes for n in m.node_names}
    unknown = [n for n in opts.nodes if n not in names]
    if unknown:
        raise UsageError(f"no node {', '.join(repr(n) for n in unknown)} in the selected mesh(es)",
                         hint="nodes: " + ", ".join(n for m in meshes for n in m.node_names))
    path = state_path(fleet)
    previous, why = (None, None) if opts.non_interactive else load_state(path)
    if why:
        operator.message(why, "yellow")
    report = rdma_status(fleet, meshes)
    needed, never, unread = _candidates(report, opts, previous, operator)
    if opts.non_interactive:
        for i, n in enumerate(needed, 1):
            box = report.node(n)
            assert box is not None
            operator.identify(box, i, len(needed))
            operator.checklist(f"At the Mac ({box.family or 'Mac'}: {n})",
                               startup_steps(box.family, shut_down_by_macfleet=False))
        if unread:
            operator.message(f"could not be read: {', '.join(unread)}; once they answer, run `macfleet rdma enable` "
                             f"again, or walk them through now: `macfleet rdma enable {' '.join(unread)}`", "bold")
        elif not needed:
            operator.message("no node needs RDMA switched on")
        return EnableResult(report=report, walk=None, never=never)
    for n in unread:
        key = operator.choose(f"{n} could not be read: walk it through the Recovery step anyway?",
                              [("y", f"walk {n} through (shut it down or power it on at the Mac)"),
                               ("n", f"leave {n} out")], "n")
        if key == "y":
            needed.append(n)
    order = [n for m in meshes for n in m.node_names]
    state = plan_walk(order, needed, previous, opts.all_at_once)
    if not state.nodes:
        left = [n for n in unread if n not in needed]
        operator.message(f"no node walked through; could not be read: {', '.join(left)}" if left
                         else "no node needs RDMA switched on")
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return EnableResult(report=report, walk=state, never=never)
    save_state(path, state)
    walk = _Walk(fleet, meshes, opts, operator, state, path, clock)
    boxes = {n.name: n for n in report.nodes}
    try:
        while group := next_group(walk.state):
            walk.start(group, boxes)
            walk.wait(group)
            walk.verify(group)
    except KeyboardInterrupt:
        operator.end_poll()  # leave the terminal clean; the state file already holds the place
        raise
    except _Stop:
        first = next_group(walk.state)
        operator.message(f"stopped; `macfleet rdma enable` continues at {first[0] if first else 'the end'}", "bold")
        return EnableResult(report=report, walk=walk.state, never=never, stopped=True, state_file=path)
    done = any(p.phase == "done" for p in walk.state.nodes)
    final = _final_check(fleet, meshes, settle_s=10.0 if done else 0.0)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return EnableResult(report=final, walk=walk.state, never=never)
