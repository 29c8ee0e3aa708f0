"""`macfleet reboot` rendered: the plan, each phase with its time, each node's wait, the lock's fate."""

from __future__ import annotations

import threading
import time

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from macfleet.render.text import text

STATUS_STYLE = {"rebooting": "yellow", "waiting": "yellow", "back": "green", "failed": "bold red"}


def render_reboot(payload: dict) -> Group:
    parts: list = []
    result = payload["result"]
    style = {"ok": "green", "dry-run": "cyan"}.get(result, "bold red")
    parts.append(text(f"reboot of mesh {payload['mesh']}: {result}", style=style))
    parts.append(text(f"reason: {payload['reason']}"))
    if payload.get("refusal"):
        parts.append(text(f"refused: {payload['refusal']}", style="red"))
    if payload.get("resumed"):
        parts.append(text(payload["resumed"], style="yellow"))
    if payload.get("plan"):
        t = Table(title="plan", title_justify="left")
        for col in ("node", "method", "why"):
            t.add_column(col)
        for p in payload["plan"]:
            t.add_row(text(p["node"]), text(p["method"]), text(p["why"]))
        parts.append(t)
    if payload.get("steps"):
        parts.append(Text("would: " + " → ".join(payload["steps"]), style="cyan"))
    if payload.get("phases"):
        t = Table(title="phases", title_justify="left")
        for col in ("phase", "took_s", "result", "detail"):
            t.add_column(col)
        for p in payload["phases"]:
            t.add_row(text(p["name"]), f"{p['took_s']:g}", Text("ok" if p["ok"] else "FAILED",
                                                                 style="green" if p["ok"] else "red"),
                      text(p["detail"]))
        parts.append(t)
    if payload.get("nodes"):
        t = Table(title="nodes", title_justify="left")
        for col in ("node", "back", "took_s", "last seen"):
            t.add_column(col)
        for n, w in payload["nodes"].items():
            t.add_row(text(n), "yes" if w["back"] else Text("NO", style="red"),
                      "" if w["took_s"] is None else f"{w['took_s']:g}", text(w["last_seen"]))
        parts.append(t)
    if payload.get("lock"):
        parts.append(text(f"lock: {payload['lock']}", style="dim"))
    return Group(*parts)


def progress_line(node: str, status: str, detail: str) -> Text:
    return text(f"  {node}: {status}: {detail}")


class RebootBoard:
    """Each node's latest status and what it looked like, for the live view; `update` is called from the
    wait's threads."""

    def __init__(self, nodes: list[str], *, clock=time.monotonic):
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()
        self.rows: dict[str, tuple[str, str, float]] = {n: ("pending", "", self._started) for n in nodes}

    def update(self, node: str, status: str, detail: str) -> None:
        with self._lock:
            self.rows[node] = (status, detail, self._clock())

    def __rich__(self) -> RenderableType:
        table = Table(title="nodes", title_justify="left", padding=(0, 1))
        for col in ("node", "status", "at_s", "last seen"):
            table.add_column(col, no_wrap=col != "last seen")
        with self._lock:
            rows = list(self.rows.items())
        for node, (status, detail, at) in rows:
            table.add_row(text(node), text(status, style=STATUS_STYLE.get(status, "dim")),
                          f"{at - self._started:.0f}", text(detail))
        return table


def live_board(board: RebootBoard, console: Console) -> Live:
    """Redrawn four times a second on a terminal; phase lines printed through it appear above the table."""
    return Live(board, console=console, refresh_per_second=4, transient=False)
