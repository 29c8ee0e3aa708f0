"""The trust report: each node's host key, its fingerprint, and what became of it."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

STATUS_STYLE = {"recorded": "green", "would record": "green", "to confirm": "yellow", "known": "green",
                "refused": "red", "changed": "bold red", "unreachable": "red", "new": "yellow",
                "unlock-screen": "yellow"}


def _outcome(node: dict[str, Any], check: bool = False) -> str:
    if node["recorded"]:
        return "would record" if check else "recorded"
    if node.get("to_confirm"):
        return "to confirm"
    if node["status"] in ("known", "changed", "unreachable", "unlock-screen"):
        return node["status"]
    return "refused" if node["refused"] else "new"


def render_trust(payload: dict[str, Any]) -> RenderableType:
    table = Table(title=Text(f"SSH host keys ({payload['known_hosts']})"), title_justify="left")
    for col in ("node", "host", "key", "fingerprint", "result"):
        # a fingerprint is compared character by character: never cut it, fold it
        table.add_column(col, overflow="fold", min_width=51 if col == "fingerprint" else None)
    notes: list[Text] = []
    for n in payload["nodes"]:
        outcome = _outcome(n, payload.get("check", False))
        table.add_row(Text(n["name"]), Text(n["host"]), Text(n["key_type"] or "—"), Text(n["fingerprint"] or "—"),
                      Text(outcome, style=STATUS_STYLE.get(outcome, "")))
        if n["status"] == "changed":
            notes.append(Text(f"{n['name']}: known_hosts has {n['known_fingerprint']}, the node now shows "
                              f"{n['fingerprint']}", style="bold red"))
        if n["refused"] and n["status"] != "changed":
            notes.append(Text(f"{n['name']}: not recorded: {n['refused']}", style="red"))
        elif n["refused"]:
            notes.append(Text(f"{n['name']}: {n['refused']}"))
        if n["reason"]:
            notes.append(Text(f"{n['name']}: {n['reason']}", style="red"))
    recorded = sum(1 for n in payload["nodes"] if n["recorded"])
    if payload.get("check"):
        asks = sum(1 for n in payload["nodes"] if n.get("to_confirm"))
        notes.append(Text(f"--check: nothing written; {recorded} key(s) would be recorded, {asks} shown for you to "
                          "confirm"))
    else:
        notes.append(Text(f"{recorded} key(s) recorded", style="green" if recorded else "dim"))
    return Group(table, *notes)


def confirm_text(node: str, entry: str, key_type: str, fp: str, *, unlock: bool = False) -> Text:
    if unlock:
        return Text.assemble(
            (f"{node}", "bold"), f" ({entry}) shows a {key_type} host key at its FileVault unlock screen\n  ",
            (fp, "bold yellow"),
            "\n  Record it only if that Mac's console shows the unlock screen now and you reach it over a network "
            "you trust (the Mac prints no fingerprint there)",
        )
    return Text.assemble(
        (f"{node}", "bold"), f" ({entry}) shows a {key_type} host key\n  ", (fp, "bold yellow"),
        "\n  Compare it with what the Mac itself prints: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub"
        " (run at the Mac, or over a channel you already trust)",
    )
