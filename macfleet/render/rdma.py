"""RDMA renderings: the node × port matrix with findings, and the walkthrough's console (the `Operator`).

Everything read from a Mac is printed as plain text, never as rich markup.
"""

from __future__ import annotations

import os
import select
import sys
import time

from rich.console import Group, RenderableType
from rich.status import Status
from rich.table import Table
from rich.text import Text

from macfleet.judge.rdma import NodeRdma, RdmaReport
from macfleet.render.output import err_console

STATE_STYLE = {"active": "green", "down": "red", "unknown": "yellow"}


def _cell(node: NodeRdma, port: str) -> Text:
    p = next((x for x in node.ports if x.port == port), None)
    if p is None:
        return Text("")
    t = Text()
    t.append(f"→ {p.peer or '?'}\n", style="dim")
    t.append(p.state, style=STATE_STYLE[p.state])
    if p.state == "active":
        t.append(f"\n{p.gid_v4}" if p.gid_v4 else f"\n{p.why or 'no GID'}", style="" if p.gid_v4 else "red")
    elif p.why:
        t.append(f"\n{p.why}", style="dim")
    return t


def render_matrix(report: RdmaReport) -> Table:
    ports: list[str] = []
    for n in report.nodes:
        for p in sorted(n.ports, key=lambda x: x.receptacle):
            if p.port not in ports:
                ports.append(p.port)
    t = Table(title="RDMA over Thunderbolt: node × cabled port (peer, state, IPv4-mapped GID)", show_lines=True)
    for col in ("node", "macOS", "RDMA", *ports, "ready"):
        t.add_column(Text(col), justify="center" if col in ports else "left", overflow="fold")
    for n in report.nodes:
        rdma = {True: Text("on", style="green"), False: Text("off", style="red"), None: Text("?", style="yellow")}
        os_text = Text(f"{n.os} ({n.build})" if n.os else "?")
        ready = Text("yes", style="green") if n.ready else Text("no", style="red")
        if not n.reachable:
            t.add_row(Text(n.name, style="bold"), "?", rdma[None], *[Text("unreachable", style="dim")] * len(ports),
                      ready)
            continue
        t.add_row(Text(n.name, style="bold"), os_text, rdma[n.rdma_enabled], *(_cell(n, p) for p in ports), ready)
    return t


def render_problems(report: RdmaReport) -> RenderableType:
    if report.ready:
        return Text("RDMA-ready: every node is on and every cabled port is active with its IPv4-mapped GID.",
                    style="green")
    out = Text()
    for n in report.nodes:
        for p in n.problems:
            out.append(f"{n.name:<12} ", style="bold")
            out.append(f"[{p.code}] ", style="red")
            out.append(f"{p.message}\n")
            out.append(" " * 13 + "fix: ", style="bold")
            out.append(f"{p.fix}\n")
    if not out:
        out.append("Not ready: some ports are not active yet (see the matrix).", style="yellow")
    return out


def render_status(report: RdmaReport) -> RenderableType:
    return Group(render_matrix(report), render_problems(report))


def render_walk_summary(phases: dict[str, tuple[str, str | None]], never: list[str]) -> RenderableType:
    t = Table(title="rdma enable: what happened")
    t.add_column("node")
    t.add_column("outcome")
    t.add_column("note")
    styles = {"done": "green", "skipped": "yellow", "timed-out": "red", "failed": "red"}
    for node, (phase, note) in phases.items():
        t.add_row(Text(node), Text(phase, style=styles.get(phase, "")), Text(note or ""))
    for node in never:
        t.add_row(node, Text("never", style="red"), "cannot do RDMA over Thunderbolt")
    return t


# ------------------------------------------------------------------------------------------ the console


class _Lines:
    """Lines from stdin without Python's buffering, so a wait can poll for a key with a timeout."""

    def __init__(self) -> None:
        self.buf = b""
        self.eof = False

    def read(self, timeout_s: float | None) -> str | None:
        """One line (stripped, lower-case), or None when none came in time or stdin is closed."""
        while b"\n" not in self.buf:
            if self.eof:
                return None
            ready, _, _ = select.select([sys.stdin.fileno()], [], [], timeout_s)
            if not ready:
                return None
            chunk = os.read(sys.stdin.fileno(), 1024)
            if not chunk:
                self.eof = True
                if self.buf:
                    break
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode(errors="replace").strip().lower()


class ConsoleOperator:
    """The walkthrough on the terminal: everything on stderr (stdout is for the result), a live spinner
    with the elapsed time while waiting when stderr is a terminal, plain lines otherwise."""

    def __init__(self) -> None:
        self.lines = _Lines()
        self.status: Status | None = None
        self.last_label: str | None = None

    def message(self, text: str, style: str = "") -> None:
        self.end_poll()
        err_console.print(Text(text, style=style), soft_wrap=True)

    def identify(self, node: NodeRdma, index: int, total: int) -> None:
        t = Text()
        t.append(f"\n[{index}/{total}] {node.name}\n", style="bold cyan")
        for label, value in (("model", node.model), ("serial number", node.serial),
                             ("management address", node.address)):
            t.append(f"  {label:<19} {value or '?'}\n")
        err_console.print(t, soft_wrap=True)

    def checklist(self, title: str, steps: list[str]) -> None:
        t = Text(f"{title}:\n", style="bold")
        for i, s in enumerate(steps, 1):
            t.append(f"  {i}. ", style="bold")
            t.append(f"{s}\n")
        err_console.print(t, soft_wrap=True)

    def choose(self, question: str, options: list[tuple[str, str]], default: str) -> str:
        keys = {k for k, _ in options}
        while True:
            t = Text(f"{question}\n", style="bold")
            for k, label in options:
                t.append(f"  {k}  {label}" + ("  (Enter)" if k == default else "") + "\n")
            err_console.print(t, end="", soft_wrap=True)
            line = self.lines.read(None)
            if line is None:
                return "q"  # stdin closed: stop, keeping the place
            key = line[:1] if line else default
            if key in keys:
                return key

    def poll(self, label: str, elapsed_s: float, wait_s: float) -> str | None:
        minutes, seconds = divmod(int(elapsed_s), 60)
        text = f"{label}  {minutes}:{seconds:02d}"
        if err_console.is_terminal:
            if self.status is None:
                self.status = err_console.status(Text(text))
                self.status.start()
            else:
                self.status.update(Text(text))
        elif label != self.last_label:
            err_console.print(Text(label), soft_wrap=True)
        self.last_label = label
        if self.lines.eof:
            time.sleep(wait_s)
            return None
        line = self.lines.read(wait_s)
        return line[:1] if line else None

    def end_poll(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None
        self.last_label = None
