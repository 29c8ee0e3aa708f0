"""Human renderings of the topology results: the node × node matrix, findings, cabling sheet, IP plan."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from macfleet.judge.ipplan import IpEnd, IpLink, IpPlan
from macfleet.judge.model import Finding
from macfleet.judge.topology import CablingPlan, TopologyLink, TopologyReport, WatchEvent
from macfleet.render.text import plain, text

STATE_STYLES = {
    "ok": "green",
    "slow": "yellow",
    "disagree": "yellow",
    "wrong-port": "red",
    "doubled": "red",
    "hub": "magenta",
    "one-sided": "magenta",
    "missing": "bold red",
}


def _speed(v: float | None) -> str:
    return "?" if v is None else f"{v:g}"


def render_matrix(report: TopologyReport) -> Table:
    t = Table(title=text(f"mesh {report.mesh}: cables (my port↔their port, Gb/s)"), show_lines=True)
    t.add_column("")
    for n in report.nodes:
        t.add_column(text(n), justify="center")
    missing = {frozenset((m.a, m.b)) for m in report.missing}
    half = {}
    for h in report.half_links:
        if h.far is not None:
            half[frozenset((h.seen_from.node, h.far.node))] = h
    for row in report.nodes:
        cells: list[Text] = []
        for col in report.nodes:
            if row == col:
                cells.append(Text("—", style="dim"))
                continue
            if row in report.unreachable or col in report.unreachable:
                cells.append(Text("unreachable", style="dim"))
                continue
            parts = Text()
            for lk in report.pair_links(row, col):
                mine, theirs = (lk.a, lk.b) if lk.a.node == row else (lk.b, lk.a)
                if parts:
                    parts.append("\n")
                parts.append(f"{mine.receptacle}↔{theirs.receptacle} {_speed(lk.speed_gbps)}",
                             style=STATE_STYLES.get(lk.state, ""))
                if lk.state != "ok":
                    parts.append(f"\n{lk.state}", style=STATE_STYLES.get(lk.state, ""))
            key = frozenset((row, col))
            if not parts and key in half:
                h = half[key]
                parts.append("hub" if h.via else "one-sided", style=STATE_STYLES["hub" if h.via else "one-sided"])
            if not parts and key in missing:
                parts.append("missing", style=STATE_STYLES["missing"])
            cells.append(parts if parts else Text("?", style="dim"))
        t.add_row(text(row, style="bold"), *cells)
    return t


def render_findings(findings: list[Any]) -> RenderableType:
    if not findings:
        return Text("No findings: every pair is cabled once, directly, at 80 Gb/s, on RDMA-capable ports.",
                    style="green")
    lines = Text()
    for f in findings:
        style = "red" if f.severity == "error" else "yellow"
        lines.append(f"{f.severity:<7} ", style=f"bold {style}")
        lines.append(f"[{f.code}] ", style=style)
        lines.append(f"{plain(f.message)}\n")
        lines.append("        fix: ", style="bold")
        lines.append(f"{plain(f.fix)}\n")
    return lines


def render_check(report: TopologyReport) -> RenderableType:
    return Group(render_matrix(report), render_findings(report.findings))


def render_plan(plan: CablingPlan) -> RenderableType:
    if not plan.feasible:
        return Group(*(text(f"cannot cable this mesh: {p}", style="bold red") for p in plan.problems))
    t = Table(title=f"Cabling plan: {len(plan.nodes)} Macs, {len(plan.cables)} Thunderbolt 5 cables")
    for col in ("#", "from", "port", "where", "into", "port", "where"):
        t.add_column(col)
    for i, c in enumerate(plan.cables, 1):
        t.add_row(*map(text, (str(i), c.a.node, str(c.a.receptacle) + (f" ({c.a.label})" if c.a.label else ""),
                              c.a.where or "", c.b.node, str(c.b.receptacle) + (f" ({c.b.label})" if c.b.label else ""),
                              c.b.where or "")))
    unused: dict[tuple[str, int, str], list[str]] = {}
    for n in plan.nodes:
        for r, where in n.not_rdma.items():
            unused.setdefault((n.marketing_name, r, where), []).append(n.name)
    note = Text("Use only Thunderbolt 5 cables (80 Gb/s), Mac to Mac, no hub or dock in between.", style="dim")
    parts: list[RenderableType] = [t, note]
    for (marketing, r, where), names in unused.items():
        parts.append(text(f"Leave port {r} ({where}) empty on {', '.join(names)} ({marketing}): it cannot do RDMA.",
                          style="dim"))
    return Group(*parts)


def render_ipplan(plan: IpPlan, unknown: Mapping[str, str] | None = None) -> RenderableType:
    """The plan, its ports and its drift. `unknown`: nodes that could not be read (node -> why): a link
    touching one has an unknown port (its cable cannot be matched), and drift cannot be ruled out there."""
    unknown = unknown or {}
    t = Table(title="IP plan: one subnet per cable, keyed by the pair of Macs")
    for col in ("subnet", "node", "port", "address", "node", "port", "address"):
        t.add_column(col, no_wrap=True)  # addresses are copied by hand: never cut one

    def port(lk: IpLink, e: IpEnd) -> str | Text:
        if e.port:
            return text(e.port)
        if lk.a.node in unknown or lk.b.node in unknown:
            return Text("unknown", style="yellow")
        return Text("no cable", style="dim")

    for lk in plan.links:
        t.add_row(text(lk.subnet), text(lk.a.node), port(lk, lk.a), text(lk.a.address), text(lk.b.node),
                  port(lk, lk.b), text(lk.b.address))
    parts: list[RenderableType] = [t]
    if plan.drift:
        d = Text("Drift (live addresses differ from the plan):\n", style="bold yellow")
        for x in plan.drift:
            found = ", ".join(x.found) or "no IPv4 address"
            d.append(plain(f"  {x.node} {x.port}: has {found}, plan says {x.expected}\n"))
        parts.append(d)
    if unknown:
        u = Text("Not read, so its ports and drift are unknown:\n", style="bold yellow")
        for node, why in sorted(unknown.items()):
            u.append(plain(f"  {node}: {why}\n"))
        parts.append(u)
    elif not plan.drift:
        parts.append(Text("No drift: every cabled port carries its planned address.", style="green"))
    return Group(*parts)


def collision_lines(findings: list[Finding]) -> list[Text]:
    """The IP plan's collisions (and what could not be checked), one line each, for stderr."""
    out = []
    for f in findings:
        label = "cannot check:" if f.code == "unread" else "collision:"
        line = Text(label, style="red")
        line.append(plain(f" {f.message}"))
        out.append(line)
    return out


def unreachable_lines(unreachable: Mapping[str, str]) -> list[Text]:
    return [text(f"{node} could not be reached: {why}", style="red") for node, why in sorted(unreachable.items())]


def uncabled_notes(uncabled: Mapping[str, int]) -> list[Text]:
    out = []
    for mesh, n in uncabled.items():
        line = Text("note:", style="yellow")
        line.append(plain(f" {n} pair(s) of mesh {mesh} have no cable yet; their addresses are applied once cabled "
                          "(see `macfleet topology check`)"))
        out.append(line)
    return out


def progress_line(host: str, status: str, task: str, verbose: bool) -> Text | None:
    """A playbook event as one line: changes and failures always, the rest with -v."""
    if status not in ("changed", "failed", "unreachable") and not verbose:
        return None
    style = {"changed": "yellow", "failed": "red", "unreachable": "red"}.get(status, "dim")
    return text(f"{host}: {status}: {task}", style=style)


def render_apply(result: dict[str, Any], check: bool) -> RenderableType:
    t = Table(title="Would change (check mode)" if check else "Applied")
    t.add_column("node")
    t.add_column("changed", justify="right")
    t.add_column("failed")
    for node, r in result["nodes"].items():
        t.add_row(text(node), str(r["changed"]), Text("yes", style="red") if r["failed"] else "no")
    detail = result.get("changes") or {}
    lines = Text()
    for node, tasks in detail.items():
        for task in tasks:
            lines.append(plain(f"  {node}: {task}\n"), style="yellow" if check else "")
    return Group(t, lines) if lines else t


def _cable_text(lk: TopologyLink) -> str:
    return f"{lk.a.node} port {lk.a.receptacle} ↔ {lk.b.node} port {lk.b.receptacle}"


def event_words(e: WatchEvent) -> tuple[str, str]:
    """(sign, text) of a watch event: + a cable plugged, - a cable gone, ! something to act on."""
    if e.kind == "pulled" and e.link is not None:
        return "-", _cable_text(e.link)
    if e.kind == "plugged" and e.link is not None:
        speed = f"{e.link.speed_gbps:g} Gb/s" if e.link.speed_gbps is not None else "speed unknown"
        return "+", f"{_cable_text(e.link)}, {speed}"
    if e.kind == "unreachable":
        return "!", f"{e.node} unreachable: {e.reason}"
    assert e.finding is not None
    if e.link is not None and e.link.speed_gbps is not None:
        return "!", f"{e.link.speed_gbps:g} Gb/s {_cable_text(e.link)}: {e.finding.fix}"
    return "!", f"{e.finding.message}: {e.finding.fix}"


def format_event(e: WatchEvent) -> Text:
    sign, words = event_words(e)
    style = {"+": "green", "-": "red", "!": "yellow"}.get(sign, "")
    shown = "−" if sign == "-" else sign  # a true minus sign lines up with +
    return text(f"{shown} {words}", style=style)
def missing_words(report: TopologyReport) -> list[str]:
    """The pairs still to cable, each with the ports the check suggests."""
    out = []
    for m in report.missing:
        a = f"{m.a} port {m.a_receptacle}" if m.a_receptacle is not None else m.a
        b = f"{m.b} port {m.b_receptacle}" if m.b_receptacle is not None else m.b
        out.append(f"{a} ↔ {b}")
    return out


def render_look(report: TopologyReport, events: list[WatchEvent], missing_changed: bool) -> RenderableType:
    """One look of `topology watch`: what changed, then the pairs still to cable when that list changed."""
    lines: list[RenderableType] = [format_event(e) for e in events]
    missing = missing_words(report)
    if missing_changed and missing:
        lines.append(text(f"  still missing ({len(missing)}): " + "; ".join(missing)))
    return Group(*lines)
