"""Bootstrap's live node × step table (fed by the playbook's events) and its summary."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

# A cell shows the most telling status its step's tasks reached.
RANK = {"": 0, "skipped": 1, "ok": 2, "changed": 3, "unreachable": 4, "failed": 5}
STYLE = {"ok": "green", "changed": "yellow", "failed": "bold red", "unreachable": "bold red", "skipped": "dim"}
# Narrow cells, so 11 steps fit 80 columns: ✓ ok, +N changed (~N would change), ✗ failed, ! unreachable.
SHOWN = {"ok": "✓", "changed": "+", "failed": "✗", "unreachable": "!", "skipped": "–", "": "·"}
HEADERS = {"preflight": "pre", "sudoers": "sudo", "homebrew": "brew", "spotlight": "mds", "ipplan": "ip",
           "filevault": "fv"}


class StepTable:
    """node × step; `update` may be called from ansible-runner's event thread."""

    def __init__(self, nodes: Iterable[str], steps: Iterable[str], *, check: bool):
        self.nodes = list(nodes)
        self.steps = list(steps)
        self.check = check
        self.cells: dict[tuple[str, str], str] = {}
        self.changes: dict[tuple[str, str], int] = {}

    def update(self, node: str, step: str, status: str) -> None:
        if step not in self.steps:
            self.steps.append(step)
        key = (node, step)
        if status == "changed":
            self.changes[key] = self.changes.get(key, 0) + 1
        if RANK.get(status, 0) >= RANK.get(self.cells.get(key, ""), 0):
            self.cells[key] = status

    def __rich__(self) -> RenderableType:
        title = "bootstrap --check (what would change)" if self.check else "bootstrap"
        table = Table(title=Text(title), title_justify="left", show_lines=False, padding=(0, 1))
        table.add_column("node", no_wrap=True)
        for s in self.steps:
            table.add_column(HEADERS.get(s, s), justify="center", no_wrap=True)
        for n in self.nodes:
            row = [Text(n)]
            for s in self.steps:
                status = self.cells.get((n, s), "")
                label = SHOWN.get(status, status)
                if status == "changed":
                    label = f"{'~' if self.check else '+'}{self.changes.get((n, s), 1)}"
                row.append(Text(label, style=STYLE.get(status, "dim")))
            table.add_row(*row)
        return Group(table, Text("✓ ok  " + ("~N would change" if self.check else "+N changed") +
                                 "  ✗ failed  ! unreachable  – skipped  · not reached", style="dim"))


def live_steps(table: StepTable, console: Console) -> Live:
    """The table redrawn as events arrive (a terminal), or printed once at the end (anything else)."""
    return Live(table, console=console, refresh_per_second=4, transient=False, auto_refresh=console.is_terminal)


def render_bootstrap(payload: dict[str, Any], *, changes: dict[str, list[str]], notes: dict[str, list[str]],
                     unreachable: dict[str, str], check: bool) -> RenderableType:
    nodes = payload["nodes"]
    table = Table(title=Text("would change" if check else "summary"), title_justify="left")
    for col in ("node", "would change" if check else "changed", "result"):
        table.add_column(col)
    lines: list[RenderableType] = [table]
    for n, o in nodes.items():
        if n in unreachable:
            result = Text("unreachable", style="bold red")
        elif o["failed"]:
            result = Text("failed", style="bold red")
        elif o["needs_human"]:
            result = Text("needs a human", style="yellow")
        else:
            result = Text("ready" if not check else "checked", style="green")
        table.add_row(Text(n), Text(str(o["changed"])), result)
    for n, o in nodes.items():
        for what in changes.get(n, []) if check else []:
            lines.append(Text(f"  {n}: would: {what}", style="yellow"))
        for line in o["needs_human"]:
            lines.append(Text(f"  {n}: needs a human: {line}", style="yellow" if not o["failed"] else "red"))
        for line in notes.get(n, []):
            lines.append(Text(f"  {n}: note: {line}", style="dim"))
    lines.append(_verdict(payload, unreachable, check))
    return Group(*lines)


def _verdict(payload: dict[str, Any], unreachable: dict[str, str], check: bool) -> Text:
    nodes = payload["nodes"]
    waiting = [n for n, o in nodes.items() if o["failed"] or o["needs_human"]]
    if check:
        return Text(f"{payload['changed']} change(s) would be made; nothing was changed", style="bold")
    if unreachable:
        return Text(f"{len(unreachable)} node(s) unreachable: " + ", ".join(sorted(unreachable)), style="bold red")
    if waiting:
        return Text(f"{len(waiting)} node(s) need a human: " + ", ".join(waiting), style="bold yellow")
    if payload["changed"] == 0:
        return Text("every node ready; nothing to change (changed=0 on every node)", style="bold green")
    return Text(f"every node ready ({payload['changed']} change(s) made)", style="bold green")
