"""`bench links`: a node × node matrix (row sends, column receives, Gb/s), each link's latency, and the links
below their baseline. `bench exo`: each placed model's prompt and generation tokens/s.
Names read from the inventory or a Mac are printed as plain text, never markup."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from macfleet.judge.inference import Completion, nodes_of
from macfleet.judge.links_bench import BelowBaseline, LinkResult
from macfleet.judge.model import Finding
from macfleet.judge.placement import InstanceView
from macfleet.render.text import text


def _gbps(value: float | None, low: bool) -> Text:
    if value is None:
        return Text("not measured", style="yellow")
    return Text(f"{value:.2f}", style="red" if low else "")


def render_matrix(nodes: Sequence[str], results: Sequence[LinkResult], below: Sequence[BelowBaseline]) -> Table:
    low = {(d.a, d.b) if d.direction == "a_to_b" else (d.b, d.a) for d in below}
    cells: dict[tuple[str, str], float | None] = {}
    for r in results:
        cells[(r.a, r.b)] = r.a_to_b_gbps
        cells[(r.b, r.a)] = r.b_to_a_gbps
    t = Table(title="Thunderbolt links, Gb/s (row sends → column receives)", show_lines=True)
    t.add_column(Text("from \\ to"))
    for n in nodes:
        t.add_column(text(n), justify="right")
    for src in nodes:
        row: list[Text] = [text(src, style="bold")]
        for dst in nodes:
            if src == dst:
                row.append(Text("—", style="dim"))
            elif (src, dst) in cells:
                row.append(_gbps(cells[(src, dst)], (src, dst) in low))
            else:
                row.append(Text("no cable", style="yellow"))
        t.add_row(*row)
    return t


def render_links(results: Sequence[LinkResult]) -> Table:
    t = Table(title="Links", show_lines=False)
    for col in ("link", "ports", "→ Gb/s", "← Gb/s", "ping ms", "problems"):
        t.add_column(Text(col), overflow="fold")
    for r in results:
        ports = f"{r.a_port} ↔ {r.b_port}" if r.a_port else "—"
        rtt = f"{r.rtt_ms:.3f}" if r.rtt_ms is not None else "?"
        t.add_row(text(f"{r.a} ↔ {r.b}"), text(ports), _gbps(r.a_to_b_gbps, False), _gbps(r.b_to_a_gbps, False),
                  Text(rtt), text("; ".join(r.problems), style="red"))
    return t


def render_bench(nodes: Sequence[str], results: Sequence[LinkResult], below: Sequence[BelowBaseline],
                 baseline_note: str | None) -> RenderableType:
    parts: list[RenderableType] = [render_matrix(nodes, results, below), render_links(results)]
    if baseline_note:
        parts.append(text(baseline_note, style="dim"))
    for d in below:
        parts.append(text(f"below baseline: {d.text}", style="bold red"))
    return Group(*parts)


def baseline_note(saved_at: str | None, min_fraction: float, path: str) -> str:
    if saved_at is None:
        return f"no baseline yet ({path}); `--save-baseline` on a healthy mesh keeps one"
    return f"compared with the baseline of {saved_at} ({path}): a direction below {min_fraction:.0%} is named"


def _tps(value: float | None) -> Text:
    return Text(f"{value:.1f}") if value is not None else Text("—", style="dim")


def render_bench_exo(models: Sequence[tuple[InstanceView, Completion]], findings: Sequence[Finding],
                     baseline_note: str | None) -> RenderableType:
    """Each placed model's tokens/s as exo measured them, then what is wrong."""
    t = Table(title="Placed models, tokens/s (exo's bench endpoint)")
    for col in ("model", "cut", "nodes", "prompt", "generation", "tokens", "s"):
        t.add_column(Text(col), overflow="fold")
    for i, c in models:
        cut = f"{i.sharding or '?'} over {i.transport or '?'}"
        secs = f"{c.seconds:.1f}" if c.seconds is not None else "—"
        t.add_row(text(i.model), text(cut), text(", ".join(nodes_of(i))), _tps(c.prompt_tps),
                  _tps(c.generation_tps), Text(str(c.tokens)), Text(secs))
    parts: list[RenderableType] = [t if models else text("no model is placed: nothing to measure "
                                                          "(`macfleet exo place MODEL`)", style="yellow")]
    if baseline_note:
        parts.append(text(baseline_note, style="dim"))
    parts += [text(f"{f.code}: {f.message}", style="bold red") for f in findings]
    return Group(*parts)
