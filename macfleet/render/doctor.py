"""Human renderings of doctor: findings grouped by node, a one-line verdict, the check list, --fix steps."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from macfleet.judge.health import CheckSpec, HealthReport, age_words
from macfleet.render.text import text

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow"}


def verdict_line(report: HealthReport) -> Text:
    s = report.summary
    if s.healthy:
        return Text(f"healthy: {s.nodes} node(s), {s.checks} checks ok", style="bold green")
    parts = []
    if s.unreachable:
        parts.append(f"unreachable: {', '.join(s.unreachable)}")
    if s.findings:
        parts.append(f"{s.errors} error(s), {s.warnings} warning(s)")
    if s.unknown:
        parts.append(f"{s.unknown} check(s) could not tell")
    style = "bold red" if s.errors or s.unreachable else "yellow"
    return Text(f"not healthy: {'; '.join(parts)} ({s.ok} of {s.checks} checks ok)", style=style)


def render_doctor(report: HealthReport, *, verbose: int = 0,
                  cached: dict[str, dict[str, float]] | None = None) -> RenderableType:
    """Findings grouped by node (severity, check, evidence, fix), then which answers were cached and how old,
    then the verdict. Text from a Mac is data: it goes in as plain Text, never as markup."""
    parts: list[RenderableType] = []
    nodes = list(dict.fromkeys([c.node for c in report.checks]))
    for node in nodes:
        mine = [f for f in report.findings if f.node == node]
        # "could not tell" is shown with its reason, never left for the reader to guess; an unreachable node's
        # checks all are, for the one reason its finding already gives
        unreachable = any(f.check == "reachable" for f in mine)
        unknown = [c for c in report.checks if c.node == node and c.result == "unknown" and not unreachable]
        if not mine and not unknown:
            continue
        parts.append(Text(node, style="bold"))
        for f in mine:
            line = Text("  ")
            line.append(f"{f.severity:<7}", style=SEVERITY_STYLE[f.severity])
            line.append(f" {f.check:<12} ", style="cyan")
            line.append(text(f.message))
            parts.append(line)
            parts.append(text(f"                       fix: {f.fix}", style="green"))
            if verbose and f.evidence:
                parts.append(text(f"                       evidence: {f.evidence}", style="dim"))
        for c in unknown:
            parts.append(text(f"  unknown {c.check:<12} {c.reason}", style="dim"))
    parts += cached_lines(cached or {})
    parts.append(verdict_line(report))
    return Group(*parts)


def cached_lines(cached: dict[str, dict[str, float]]) -> list[Text]:
    """One line per cached probe: the nodes whose answer was not asked again in this pass, and how old it is."""
    by_probe: dict[str, list[str]] = {}
    for node, ages in cached.items():
        for probe, age in ages.items():
            by_probe.setdefault(probe, []).append(f"{node} {age_words(age)} ago")
    command = {"softwareupdate": "softwareupdate --list"}
    return [text(f"{command.get(p, p)}: cached answers used ({', '.join(sorted(nodes))}); "
                 "`macfleet doctor --fresh` asks again", style="dim") for p, nodes in sorted(by_probe.items())]


def render_catalogue(checks: list[CheckSpec]) -> Table:
    t = Table(title="doctor checks", show_lines=False)
    t.add_column("check", style="cyan")
    t.add_column("what it checks")
    t.add_column("--fix")
    for c in checks:
        t.add_row(c.code, c.title, "yes" if c.fixable else "")
    return t


def render_fix(before: HealthReport, after: HealthReport | None, steps: list, not_fixed: list) -> RenderableType:
    parts: list[RenderableType] = [Text("before:", style="bold"), render_doctor(before)]
    for s in steps:
        parts.append(Text(f"fix: playbooks/{s.playbook}.yml on {', '.join(s.nodes)} ({', '.join(s.checks)}): "
                          f"{s.status}"))
        for node, tasks in sorted(s.changes.items()):
            parts.append(Text(f"  {node}: {', '.join(tasks)}", style="dim"))
    for node, check, why in not_fixed:
        parts.append(Text(f"not fixed automatically: {node} {check}: {why}", style="yellow"))
    if after is not None:
        parts += [Text("after:", style="bold"), render_doctor(after)]
    return Group(*parts)
