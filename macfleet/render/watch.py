"""The watch status page: plain HTML (no JavaScript), every value escaped (HTML, and terminal controls and
bidi overrides shown as U+FFFD as everywhere else, `render.text.plain`); it refreshes itself."""

from __future__ import annotations

from html import escape as _html

from macfleet.render.text import plain


def escape(value: object) -> str:
    return _html(plain(value))


def render_status_page(snapshot: dict) -> str:
    """snapshot: {"updated", "meshes": {mesh: {"nodes": {node: [finding…]}, "unknown": {node: [what could not be
    told…]}, "breaker", "breaker_reason", "paused", "maintenance", "decision"}}, "audit": [entry…],
    "errors": {kind: message}}"""
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
           '<meta http-equiv="refresh" content="10"><title>macfleet watch</title>',
           "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
           "td,th{border:1px solid #999;padding:.2em .5em;text-align:left}.bad{color:#b00}.ok{color:#070}"
           "</style></head><body>",
           f"<h1>macfleet watch</h1><p>last probe: {escape(str(snapshot.get('updated') or 'not yet'))}</p>"]
    errors = snapshot.get("errors") or {}
    if errors:
        out.append("<h2 class=\"bad\">the healer's own troubles</h2><ul>"
                   + "".join(f"<li class=\"bad\">{escape(k)}: {escape(v)}</li>" for k, v in errors.items()) + "</ul>")
    for mesh, m in snapshot.get("meshes", {}).items():
        breaker = "OPEN: no automatic action until macfleet watch --reset" if m.get("breaker") else "closed"
        if m.get("breaker") and m.get("breaker_reason"):
            breaker += f" ({m['breaker_reason']})"
        out.append(f"<h2>mesh {escape(mesh)}</h2><p>circuit breaker: <b class=\"{'bad' if m.get('breaker') else 'ok'}"
                   f"\">{escape(breaker)}</b>; paused: {'yes' if m.get('paused') else 'no'}</p>")
        if m.get("maintenance"):
            out.append(f"<p>maintenance: <b>{escape(m['maintenance'])}</b> (observed only; nobody is paged)</p>")
        out.append(f"<p>last decision: {escape(str(m.get('decision') or ''))}</p>")
        out.append("<table><tr><th>node</th><th>state</th><th>findings</th></tr>")
        unknown = m.get("unknown") or {}
        for node, findings in m.get("nodes", {}).items():
            state = ('<span class="bad">problem</span>' if findings else '<span class="bad">could not tell</span>'
                     if unknown.get(node) else '<span class="ok">healthy</span>')
            items = "".join(f"<li>{escape(f)}</li>" for f in [*findings, *unknown.get(node, [])])
            out.append(f"<tr><td>{escape(node)}</td><td>{state}</td><td><ul>{items}</ul></td></tr>")
        out.append("</table>")
    out.append("<h2>recent audit entries</h2><table><tr><th>time</th><th>mesh</th><th>finding</th>"
               "<th>decision</th><th>action</th><th>result</th></tr>")
    for e in reversed(snapshot.get("audit", [])[-20:]):
        out.append("<tr>" + "".join(f"<td>{escape(str(e.get(k) if e.get(k) is not None else ''))}</td>"
                                    for k in ("time", "mesh", "finding", "decision", "action", "result")) + "</tr>")
    out.append("</table></body></html>")
    return "\n".join(out)
