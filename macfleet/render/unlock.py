"""`macfleet unlock` rendered: each node, what it showed, and what became of it."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from macfleet.render.text import text

RESULT_STYLE = {"unlocked": "green", "nothing to do": "green", "would unlock": "cyan", "refused": "bold red",
                "password refused": "bold red", "unreachable": "red", "not back": "red"}


def render_unlock(payload: dict) -> Group:
    t = Table(title="FileVault unlock" + (" (check: nothing sent)" if payload["check"] else ""),
              title_justify="left")
    for col in ("node", "result", "took_s", "detail"):
        t.add_column(col, overflow="fold")
    for n in payload["nodes"]:
        t.add_row(text(n["name"]), Text(n["result"], style=RESULT_STYLE.get(n["result"], "")),
                  "" if n["took_s"] is None else f"{n['took_s']:g}", text(n["detail"]))
    would = sum(1 for n in payload["nodes"] if n["result"] == "would unlock")
    done = sum(1 for n in payload["nodes"] if n["result"] == "unlocked")
    note = f"{would} node(s) would be unlocked" if payload["check"] else f"{done} node(s) unlocked"
    return Group(t, Text(note, style="dim"))
