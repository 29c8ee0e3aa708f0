"""`macfleet reboot` rendered: the plan, each phase with its time, each node's wait, the lock's fate."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text


def render_reboot(payload: dict) -> Group:
    parts: list = []
    result = payload["result"]
    style = {"ok": "green", "dry-run": "cyan"}.get(result, "bold red")
    parts.append(Text(f"reboot of mesh {payload['mesh']}: {result}", style=style))
    parts.append(Text(f"reason: {payload['reason']}"))
    if payload.get("refusal"):
        parts.append(Text(f"refused: {payload['refusal']}", style="red"))
    if payload.get("plan"):
        t = Table(title="plan", title_justify="left")
        for col in ("node", "method", "why"):
            t.add_column(col)
        for p in payload["plan"]:
            t.add_row(Text(p["node"]), Text(p["method"]), Text(p["why"]))
        parts.append(t)
    if payload.get("steps"):
        parts.append(Text("would: " + " → ".join(payload["steps"]), style="cyan"))
    if payload.get("phases"):
        t = Table(title="phases", title_justify="left")
        for col in ("phase", "took_s", "result", "detail"):
            t.add_column(col)
        for p in payload["phases"]:
            t.add_row(Text(p["name"]), f"{p['took_s']:g}", Text("ok" if p["ok"] else "FAILED",
                                                                 style="green" if p["ok"] else "red"),
                      Text(p["detail"]))
        parts.append(t)
    if payload.get("nodes"):
        t = Table(title="nodes", title_justify="left")
        for col in ("node", "back", "took_s", "last seen"):
            t.add_column(col)
        for n, w in payload["nodes"].items():
            t.add_row(Text(n), "yes" if w["back"] else Text("NO", style="red"),
                      "" if w["took_s"] is None else f"{w['took_s']:g}", Text(w["last_seen"]))
        parts.append(t)
    if payload.get("lock"):
        parts.append(Text(f"lock: {payload['lock']}", style="dim"))
    return Group(*parts)


def progress_line(node: str, status: str, detail: str) -> Text:
    return Text(f"  {node}: {status}: {detail}")
