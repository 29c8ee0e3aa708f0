"""Pictures of a mesh as standalone SVG: Macs as boxes with numbered ports, cables as lines.

`svg_from_plan` draws the cabling sheet an operator prints and cables from; `svg_from_report` draws the
live mesh from a check, cables coloured by state and missing ones dashed. Decides nothing: every colour
comes from a state the judge set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from xml.sax.saxutils import escape as _xml_escape

from macfleet.judge.topology import CablingPlan, TopologyReport
from macfleet.render.text import plain


def escape(value: str) -> str:
    """Text for an SVG element: XML-escaped, with the control characters XML 1.0 forbids replaced."""
    return _xml_escape(plain(value))

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
# On a cabling sheet colours only tell cables apart (dark enough for white port numbers on them).
CABLE_PALETTE = ("#1565c0", "#2e7d32", "#c62828", "#6a1b9a", "#ef6c00", "#00838f", "#ad1457", "#4e342e")


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
        centres = [(170 + i * 460, 240) for i in range(n)]
        return centres, 170 * 2 + 460 * max(n - 1, 0), 440
    r = max(230.0, n * 72.0)
    cx, cy = r + 170, r + 150
    centres = [(cx + r * math.sin(2 * math.pi * i / n), cy - r * math.cos(2 * math.pi * i / n)) for i in range(n)]
    return centres, 2 * cx, 2 * cy + 60


@dataclass
class _Box:
    """Where a Mac's box sits and on which edge its ports are: the edge facing the middle of the
    picture, so every cable visibly ends in the numbered port it belongs in."""

    x: float
    y: float
    w: float
    h: float
    edge: str  # top | bottom | left | right
    ports: list[SvgPort]

    def port_centre(self, receptacle: int | None) -> tuple[float, float] | None:
        idx = next((i for i, p in enumerate(self.ports) if p.receptacle == receptacle), None)
        if idx is None:
            return None
        step = PORT + 6
        offset = -(len(self.ports) * step - 6) / 2 + idx * step + PORT / 2
        if self.edge in ("top", "bottom"):
            return self.x + offset, self.y + (self.h / 2 if self.edge == "bottom" else -self.h / 2)
        return self.x + (self.w / 2 if self.edge == "right" else -self.w / 2), self.y + offset

    def anchor(self, receptacle: int | None) -> tuple[float, float]:
        """The outer side of the port, where its cable starts; the box's edge midpoint if unknown."""
        centre = self.port_centre(receptacle)
        nx, ny = {"top": (0, -1), "bottom": (0, 1), "left": (-1, 0), "right": (1, 0)}[self.edge]
        if centre is None:
            centre = (self.x + nx * self.w / 2, self.y + ny * self.h / 2)
        return centre[0] + nx * PORT / 2, centre[1] + ny * PORT / 2


def _box(centre: tuple[float, float], middle: tuple[float, float], ports: list[SvgPort]) -> _Box:
    x, y = centre
    dx, dy = middle[0] - x, middle[1] - y
    span = len(ports) * (PORT + 6) + 24
    if abs(dy) >= 0.6 * abs(dx):
        return _Box(x, y, max(BOX_W, span), BOX_H, "bottom" if dy > 0 else "top", ports)
    return _Box(x, y, BOX_W, max(BOX_H, span), "right" if dx > 0 else "left", ports)


def _label(x: float, y: float, text: str, colour: str) -> list[str]:
    w = 7 * len(text) + 12
    return [
        f'<rect x="{x - w / 2:.1f}" y="{y - 11:.1f}" width="{w}" height="19" rx="9" fill="white" '
        f'stroke="{colour}" stroke-width="1.5"/>',
        f'<text x="{x:.1f}" y="{y + 3.5:.1f}" font-size="12" font-weight="bold" text-anchor="middle" '
        f'fill="{colour}">{escape(text)}</text>',
    ]


def render_svg(title: str, nodes: list[SvgNode], lines: list[SvgLine], legend: list[tuple[str, str, bool]],
               notes: list[str] | None = None) -> str:
    centres, width, height = _layout(len(nodes))
    notes = notes or []
    height += 22 * (len(legend) + len(notes))
    width = max(width, 48 + 7 * max((len(t) for t in notes), default=0))  # notes are never cut off
    n = max(len(centres), 1)
    middle = (sum(c[0] for c in centres) / n, sum(c[1] for c in centres) / n)
    boxes = {n.name: (_box(c, middle, n.ports), n) for n, c in zip(nodes, centres, strict=True)}
    used: dict[tuple[str, int], str] = {}  # (node, receptacle) -> colour of the cable in it
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="Helvetica, Arial, sans-serif">',
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="white"/>',
        f'<text x="20" y="32" font-size="20" font-weight="bold">{escape(title)}</text>',
    ]
    labels: list[str] = []
    # cables first, so boxes and port numbers stay readable on top of them
    for ln in lines:
        if ln.a not in boxes or ln.b not in boxes:
            continue
        (ba, _), (bb, _) = boxes[ln.a], boxes[ln.b]
        x1, y1 = ba.anchor(ln.a_port)
        x2, y2 = bb.anchor(ln.b_port)
        dash = ' stroke-dasharray="10 7"' if ln.dashed else ""
        out.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{ln.colour}" '
                   f'stroke-width="3"{dash} stroke-linecap="round"/>')
        for node, port in ((ln.a, ln.a_port), (ln.b, ln.b_port)):
            if port is not None:
                used[(node, port)] = ln.colour
        if ln.label:
            # 40 % of the way from the first end: labels of crossing diagonals do not land on one spot
            labels += _label(x1 + 0.4 * (x2 - x1), y1 + 0.4 * (y2 - y1), ln.label, ln.colour)
    for box, n in boxes.values():
        fill, stroke = ("#eeeeee", "#9e9e9e") if n.dim else ("#fafafa", "#212121")
        out.append(f'<rect x="{box.x - box.w / 2:.1f}" y="{box.y - box.h / 2:.1f}" width="{box.w:.0f}" '
                   f'height="{box.h:.0f}" rx="10" fill="{fill}" stroke="{stroke}" stroke-width="2"/>')
        # the name sits away from the port edge
        ty = box.y + (14 if box.edge == "top" else -6 if box.edge == "bottom" else 0)
        out.append(f'<text x="{box.x:.1f}" y="{ty:.1f}" font-size="16" font-weight="bold" '
                   f'text-anchor="middle">{escape(n.name)}</text>')
        sub = n.note or n.subtitle
        if sub:
            out.append(f'<text x="{box.x:.1f}" y="{ty + 17:.1f}" font-size="11" text-anchor="middle" '
                       f'fill="#616161">{escape(sub)}</text>')
        for p in n.ports:
            px, py = box.port_centre(p.receptacle) or (box.x, box.y)
            colour = used.get((n.name, p.receptacle))
            pfill = "#bdbdbd" if not p.rdma else (colour or "#ffffff")
            tcolour = "#ffffff" if colour and p.rdma else "#212121"
            tip = f"port {p.receptacle}" + ("" if p.rdma else " (cannot do RDMA)") + (f": {p.label}" if p.label else "")
            out.append(f'<g><title>{escape(tip)}</title><rect x="{px - PORT / 2:.1f}" y="{py - PORT / 2:.1f}" '
                       f'width="{PORT}" height="{PORT}" rx="3" fill="{pfill}" stroke="#424242"/>'
                       f'<text x="{px:.1f}" y="{py + 5:.1f}" font-size="13" font-weight="bold" '
                       f'text-anchor="middle" fill="{tcolour}">{p.receptacle}</text></g>')
    out += labels
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
        SvgLine(c.a.node, c.a.receptacle, c.b.node, c.b.receptacle, CABLE_PALETTE[(i - 1) % len(CABLE_PALETTE)],
                label=f"cable {i}")
        for i, c in enumerate(plan.cables, 1)
    ]
    notes = ["Each cable ends in the numbered port it goes into. Grey ports cannot do RDMA: leave them empty.",
             *(f"cable {i}: {c.a.node} port {c.a.receptacle} → {c.b.node} port {c.b.receptacle}"
               for i, c in enumerate(plan.cables, 1)),
             *plan.problems]
    legend = [(STATE_COLOURS["plan"], "Thunderbolt 5 cable (80 Gb/s), Mac to Mac; colours tell cables apart", False)]
    return render_svg(title, nodes, lines, legend, notes)


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
