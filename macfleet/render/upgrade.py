"""`macfleet upgrade` rendered: where each node stood against the target, the plan, and what became of it."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from macfleet.render.text import text

RESULT_STYLE = {"ok": "green", "nothing to do": "green", "check": "cyan", "refused": "bold red", "failed": "bold red"}


def render_upgrade(payload: dict) -> Group:
    title = f"macOS upgrade of {payload['mesh']} to {payload['target'] or '(no target)'}"
    t = Table(title=title + (" (check: nothing changed)" if payload["result"] == "check" else ""),
              title_justify="left")
    for col in ("node", "build", "standing", "update"):
        t.add_column(col, overflow="fold")
    for n in payload["nodes"]:
        t.add_row(text(n["node"]), text(n["build"] or "?"), text(n["standing"]),
                  text(n["label"] or ", ".join(n["offered"]) or n["why"]))
    parts: list = [t]
    if payload.get("resumed"):
        parts.append(text(payload["resumed"]))
    for i, step in enumerate(payload["steps"], 1):
        parts.append(text(f"{i}. {step}"))
    for r in payload["refusals"]:
        parts.append(Text("refused: ", style="bold red") + text(r))
    if payload.get("failure"):
        parts.append(Text("failed: ", style="bold red") + text(payload["failure"]))
    if payload.get("done"):
        parts.append(text(f"on {payload['target']}: {', '.join(payload['done'])}"))
    parts.append(Text(payload["result"], style=RESULT_STYLE.get(payload["result"], "")))
    return Group(*parts)
