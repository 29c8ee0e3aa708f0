"""`macfleet maintenance` in words."""

from __future__ import annotations

from macfleet.render.text import plain


def said(payload: dict, verb: str) -> str:
    head = "would be (--check): " if payload.get("check") else ""
    lines = []
    for m in payload["meshes"]:
        if verb == "start":
            lines.append(head + m["said"] + (f"\n  replaces: {m['replaced']['reason']}" if m["replaced"] else ""))
        elif verb == "end":
            lines.append(f"{head}mesh {m['mesh']}: " + ("maintenance ended; the healer acts on it again"
                                                        if m["ended"] else "no maintenance to end"))
        else:
            lines.append(m["said"])
    return plain("\n".join(lines))
