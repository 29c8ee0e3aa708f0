"""Human renderings of the topology results: the node × node matrix, findings, cabling sheet, IP plan."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from macfleet.judge.ipplan import IpPlan
from macfleet.judge.topology import CablingPlan, TopologyReport, WatchEvent
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


def render_ipplan(plan: IpPlan) -> RenderableType:
    t = Table(title="IP plan: one subnet per cable, keyed by the pair of Macs")
    for col in ("subnet", "node", "port", "address", "node", "port", "address"):
        t.add_column(col, no_wrap=True)  # addresses are copied by hand: never cut one
    for lk in plan.links:
        t.add_row(text(lk.subnet), text(lk.a.node), text(lk.a.port) if lk.a.port else Text("no cable", style="dim"),
                  text(lk.a.address), text(lk.b.node),
                  text(lk.b.port) if lk.b.port else Text("no cable", style="dim"), text(lk.b.address))
    parts: list[RenderableType] = [t]
    if plan.drift:
        d = Text("Drift (live addresses differ from the plan):\n", style="bold yellow")
        for x in plan.drift:
            found = ", ".join(x.found) or "no IPv4 address"
            d.append(plain(f"  {x.node} {x.port}: has {found}, plan says {x.expected}\n"))
        parts.append(d)
    else:
        parts.append(Text("No drift: every cabled port carries its planned address.", style="green"))
    return Group(*parts)


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


def format_event(e: WatchEvent) -> Text:
    style = {"+": "green", "-": "red", "!": "yellow"}.get(e.sign, "")
    sign = {"-": "−"}.get(e.sign, e.sign)
    return text(f"{sign} {e.text}", style=style)
