"""Human renderings of rollout results: which release each node runs, and what a rollout did."""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Callable, Iterator

from rich.console import Group, RenderableType
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table
from rich.text import Text

from macfleet.judge.build import RolloutPlan
from macfleet.judge.rollout import ModelPushReport, ModelVerifyReport, RolloutReport, RolloutStatus
from macfleet.render.output import err_console, mode


def render_status(status: RolloutStatus) -> RenderableType:
    title = f"exo release: {status.current}" if status.current else "exo release: nodes differ"
    t = Table(title=title)
    t.add_column("node")
    t.add_column("release")
    t.add_column("running")
    for node, s in status.nodes.items():
        t.add_row(Text(node), Text(s.version or "(none)"),
                  Text("yes", style="green") if s.running else Text("no", style="red"))
    return t


def render_report(report: RolloutReport) -> RenderableType:
    what = {
        "switched": f"switched to {report.release}" + (f" (from {report.previous})" if report.previous else ""),
        "already": f"already on {report.release}, healthy: nothing to do",
        "repaired": f"repaired an interrupted switch: back on {report.release}",
        "check": f"would switch back from {report.previous} to {report.release} (--check: nothing changed)",
    }.get(report.result, report.result)
    line = Text(what + (f" in {report.took_s:g} s" if report.took_s else ""), style="bold green")
    if report.staged:
        line.append(Text(f"; staged on {', '.join(report.staged)}", style=""))
    return Group(line, render_status(report.status))


def render_plan(plan: RolloutPlan) -> RenderableType:
    """`rollout exo --check`: what would be built where, staged where, switched from what; nothing changed."""
    lines = [Text(f"would roll out {plan.release} ({plan.source_files} source files); nothing was changed",
                  style="bold")]
    if plan.already:
        lines.append(Text("every node already runs it: nothing to do"))
    elif plan.build is not None:
        b = plan.build
        lines.append(Text(f"build on {b.node} in {b.directory} (timeout {b.timeout_s:g} s):"))
        lines.append(Text(f"  sh -c {shlex.quote(b.command)}", style="dim"))
    elif plan.reuse_from:
        lines.append(Text(f"already built on {plan.reuse_from}: reuse it as the seed"))
    if not plan.already:
        lines.append(Text(f"stage on {', '.join(plan.stage_on)}" if plan.stage_on else "stage on no node"))
        lines.append(Text(f"switch every node from {plan.switch_from or '(nodes differ)'} to {plan.release}"))
    return Group(*lines)


def render_history(entries: list[dict]) -> RenderableType:
    t = Table(title="rollout history (oldest first)")
    for col in ("time", "action", "from", "to", "healthy"):
        t.add_column(col)
    for e in entries:
        t.add_row(*(Text(str(e.get(k, "")) if e.get(k) is not None else "") for k in ("time", "action", "from", "to")),
                  Text("yes", style="green") if e.get("healthy") else Text("no", style="red"))
    return t


def render_model_push(report: ModelPushReport) -> RenderableType:
    head = Text(f"{report.model}: {report.files} files, {report.bytes / 1e6:.1f} MB "
                f"{'already on every node' if report.result == 'already' else 'pushed'} "
                f"in {report.took_s:g} s" + (f" (seed {report.seed})" if report.seed else ""), style="bold green")
    t = Table()
    t.add_column("node")
    t.add_column("had files", justify="right")
    t.add_column("received MB", justify="right")
    for node, n in report.nodes.items():
        t.add_row(Text(node), str(n.had_files), f"{n.received_bytes / 1e6:.1f}")
    notes = [Text(f"rerouted: {r}", style="yellow") for r in report.rerouted]
    return Group(head, t, *notes)


def render_model_plan(plan: dict) -> RenderableType:
    """`rollout model --check`: what would be sent to each node; nothing was."""
    if plan["download"] is not None:
        return Text(f"{plan['model']}: would be downloaded from Hugging Face into {plan['download']['into']} first; "
                    "its sizes are known only then (--check downloads nothing)")
    head = Text(f"{plan['model']}: {plan['files']} files, {plan['bytes'] / 1e6:.1f} MB; "
                + (f"the seed would be {plan['seed']} (nothing sent: --check)" if plan["seed"]
                   else "already on every node"), style="bold")
    t = Table()
    for col in ("node", "has files", "would send files", "would send MB", "refused"):
        t.add_column(col, justify="left" if col in ("node", "refused") else "right")
    for node, n in plan["nodes"].items():
        t.add_row(Text(node), str(n["has_files"]), str(n["would_send_files"]), f"{n['would_send_bytes'] / 1e6:.1f}",
                  Text(n["refused"] or ""))
    return Group(head, t)


def render_model_verify(report: ModelVerifyReport) -> RenderableType:
    if not report.differ:
        return Text(f"{report.model}: all {report.files} files match on every node", style="bold green")
    t = Table(title=f"{report.model}: files that differ")
    t.add_column("node")
    t.add_column("file")
    t.add_column("why")
    for node, files in report.differ.items():
        for path, why in files.items():
            t.add_row(Text(node), Text(path), Text(why))
    return t


@contextlib.contextmanager
def push_progress() -> Iterator[Callable[[str, int, int], None] | None]:
    """Per-node bytes, rate and ETA on stderr while a push runs (only on a terminal, never with --json)."""
    if mode.json or not err_console.is_terminal:
        yield None
        return
    bars = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                    TimeRemainingColumn(), console=err_console, transient=False)
    tasks: dict[str, TaskID] = {}

    def update(node: str, done: int, total: int) -> None:
        if node not in tasks:
            tasks[node] = bars.add_task(Text(node).plain, total=total)
        bars.update(tasks[node], completed=done, total=total)

    with bars:
        yield update
