"""Pictures of a mesh as standalone SVG: Macs as boxes with numbered ports, cables as lines.

`svg_from_plan` draws the cabling sheet an operator prints and cables from; `svg_from_report` draws the
live mesh from a check, cables coloured by state and missing ones dashed. Decides nothing: every colour
comes from a state the judge set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

from macfleet.judge.topology import CablingPlan, TopologyReport

STATE_COLOURS = {
    "ok": "#2e7d32",
    "slow": "#ef6c00",
    "disagree": "#ef6c00",
    "wrong-port": "#c62828",
    "doubled": "#c62828",
    "hub": "#6a1b9a",
    "one-sided": "#ad1457",
    "missing": "#757575",
    "unknown": "#ad1457",
    "plan": "#1565c0",
}
STATE_WORDS = {
    "ok": "80 Gb/s, RDMA ports",
    "slow": "slow (below 80 Gb/s)",
    "disagree": "ends disagree",
    "wrong-port": "port cannot do RDMA",
    "doubled": "extra cable (unplug)",
    "hub": "through a hub or dock",
    "one-sided": "seen from one end only",
    "missing": "missing: plug this cable",
}

BOX_W, BOX_H, PORT = 190, 86, 22


@dataclass
class SvgPort:
    receptacle: int
    rdma: bool = True
    label: str | None = None


@dataclass
class SvgNode:
    name: str
    subtitle: str = ""
    ports: list[SvgPort] = field(default_factory=list)
    dim: bool = False  # unreachable / unknown: drawn grey
    note: str | None = None


@dataclass
class SvgLine:
    a: str
    a_port: int | None
    b: str
    b_port: int | None
    colour: str
    label: str = ""
    dashed: bool = False


def _layout(n: int) -> tuple[list[tuple[float, float]], float, float]:
    """Box centres on a circle (a row for two), and the canvas size."""
    if n <= 2:
        centres = [(160 + i * 420, 230) for i in range(n)]
        return centres, 160 * 2 + 420 * max(n - 1, 0), 420
    r = max(210.0, n * 70.0)
    cx, cy = r + 150, r + 130
    centres = [(cx + r * math.sin(2 * math.pi * i / n), cy - r * math.cos(2 * math.pi * i / n)) for i in range(n)]
    return centres, 2 * cx, 2 * cy + 90


def _port_xy(box: tuple[float, float], ports: list[SvgPort], receptacle: int | None) -> tuple[float, float]:
    x, y = box
    if receptacle is None or not ports:
        return x, y
    idx = next((i for i, p in enumerate(ports) if p.receptacle == receptacle), None)
    if idx is None:
        return x, y
    span = len(ports) * (PORT + 6) - 6
    px = x - span / 2 + idx * (PORT + 6) + PORT / 2
    return px, y + BOX_H / 2 - PORT / 2 - 8


def render_svg(title: str, nodes: list[SvgNode], lines: list[SvgLine], legend: list[tuple[str, str, bool]],
               notes: list[str] | None = None) -> str:
    centres, width, height = _layout(len(nodes))
    notes = notes or []
    height += 22 * (len(legend) + len(notes))
    where = {n.name: (c, n) for n, c in zip(nodes, centres, strict=True)}
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="Helvetica, Arial, sans-serif">',
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="white"/>',
        f'<text x="20" y="32" font-size="20" font-weight="bold">{escape(title)}</text>',
    ]
    # cables first, so boxes and port numbers stay readable on top of them
    for ln in lines:
        if ln.a not in where or ln.b not in where:
            continue
        (ca, na), (cb, nb) = where[ln.a], where[ln.b]
        x1, y1 = _port_xy(ca, na.ports, ln.a_port)
        x2, y2 = _port_xy(cb, nb.ports, ln.b_port)
        dash = ' stroke-dasharray="10 7"' if ln.dashed else ""
        out.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{ln.colour}" '
                   f'stroke-width="3"{dash} stroke-linecap="round"/>')
        if ln.label:
            mx, my = (x1 + x2) / 2, (y1 + y2) / 2
            w = 7 * len(ln.label) + 10
            out.append(f'<rect x="{mx - w / 2:.1f}" y="{my - 11:.1f}" width="{w}" height="18" rx="4" fill="white" '
                       f'stroke="{ln.colour}" stroke-width="1"/>')
            out.append(f'<text x="{mx:.1f}" y="{my + 3:.1f}" font-size="12" text-anchor="middle" '
                       f'fill="{ln.colour}">{escape(ln.label)}</text>')
    for (x, y), n in zip(centres, nodes, strict=True):
        fill, stroke = ("#eeeeee", "#9e9e9e") if n.dim else ("#fafafa", "#212121")
        out.append(f'<rect x="{x - BOX_W / 2:.1f}" y="{y - BOX_H / 2:.1f}" width="{BOX_W}" height="{BOX_H}" rx="10" '
                   f'fill="{fill}" stroke="{stroke}" stroke-width="2"/>')
        out.append(f'<text x="{x:.1f}" y="{y - BOX_H / 2 + 22:.1f}" font-size="16" font-weight="bold" '
                   f'text-anchor="middle">{escape(n.name)}</text>')
        sub = n.note or n.subtitle
        if sub:
            out.append(f'<text x="{x:.1f}" y="{y - BOX_H / 2 + 40:.1f}" font-size="11" text-anchor="middle" '
                       f'fill="#616161">{escape(sub)}</text>')
        for p in n.ports:
            px, py = _port_xy((x, y), n.ports, p.receptacle)
            pfill = "#ffffff" if p.rdma else "#bdbdbd"
            tip = f"port {p.receptacle}" + ("" if p.rdma else " (cannot do RDMA)") + (f": {p.label}" if p.label else "")
            out.append(f'<g><title>{escape(tip)}</title><rect x="{px - PORT / 2:.1f}" y="{py - PORT / 2:.1f}" '
                       f'width="{PORT}" height="{PORT}" rx="3" fill="{pfill}" stroke="#424242"/>'
                       f'<text x="{px:.1f}" y="{py + 5:.1f}" font-size="13" text-anchor="middle">{p.receptacle}'
                       f'</text></g>')
    y = height - 22 * (len(legend) + len(notes)) - 6
    for colour, words, dashed in legend:
        dash = ' stroke-dasharray="10 7"' if dashed else ""
        out.append(f'<line x1="24" y1="{y:.0f}" x2="64" y2="{y:.0f}" stroke="{colour}" stroke-width="3"{dash}/>')
        out.append(f'<text x="74" y="{y + 4:.0f}" font-size="13">{escape(words)}</text>')
        y += 22
    for note in notes:
        out.append(f'<text x="24" y="{y + 4:.0f}" font-size="13" fill="#424242">{escape(note)}</text>')
        y += 22
    out.append("</svg>")
    return "\n".join(out) + "\n"


def svg_from_plan(plan: CablingPlan, title: str = "Thunderbolt 5 cabling plan") -> str:
    nodes = [
        SvgNode(
            name=n.name,
            subtitle=n.marketing_name,
            ports=[SvgPort(r, rdma=r in n.rdma_receptacles) for r in n.all_receptacles],
        )
        for n in plan.nodes
    ]
    lines = [
        SvgLine(c.a.node, c.a.receptacle, c.b.node, c.b.receptacle, STATE_COLOURS["plan"],
                label=f"{c.a.receptacle} ↔ {c.b.receptacle}")
        for c in plan.cables
    ]
    notes = ["Grey ports cannot do RDMA: leave them empty. Labels read: port on the first Mac ↔ port on the other.",
             *plan.problems]
    return render_svg(title, nodes, lines, [(STATE_COLOURS["plan"], "Thunderbolt 5 cable (80 Gb/s)", False)], notes)


def svg_from_report(report: TopologyReport, port_counts: dict[str, list[int]] | None = None) -> str:
    counts = port_counts or {}
    nodes = []
    for name in report.nodes:
        rdma = set(report.ports.get(name, []))
        all_ports = sorted(set(counts.get(name, [])) | rdma | {
            e.receptacle for lk in report.links for e in (lk.a, lk.b) if e.node == name})
        nodes.append(SvgNode(
            name=name,
            ports=[SvgPort(r, rdma=(r in rdma) or not rdma) for r in all_ports],
            dim=name in report.unreachable,
            note="unreachable" if name in report.unreachable else None,
        ))
    lines = [
        SvgLine(lk.a.node, lk.a.receptacle, lk.b.node, lk.b.receptacle, STATE_COLOURS.get(lk.state, "#000000"),
                label=(f"{lk.speed_gbps:g} Gb/s" if lk.speed_gbps is not None else "?"))
        for lk in report.links
    ]
    for h in report.half_links:
        if h.far is not None:
            lines.append(SvgLine(h.seen_from.node, h.seen_from.receptacle, h.far.node, h.far.receptacle,
                                 STATE_COLOURS["hub" if h.via else "one-sided"], label="one end only", dashed=True))
    for m in report.missing:
        lines.append(SvgLine(m.a, m.a_receptacle, m.b, m.b_receptacle, STATE_COLOURS["missing"], label="plug",
                             dashed=True))
    used = {lk.state for lk in report.links} | ({"missing"} if report.missing else set())
    used |= {"hub" if h.via else "one-sided" for h in report.half_links if h.far is not None}
    legend = [(STATE_COLOURS[s], STATE_WORDS[s], s in ("missing", "one-sided")) for s in STATE_WORDS if s in used]
    notes = [f"{f.severity}: {f.message} → {f.fix}" for f in report.findings][:12]
    return render_svg(f"Mesh {report.mesh}: live cabling", nodes, lines, legend, notes)
