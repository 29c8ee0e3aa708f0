"""Human rendering of `rollout llama-rpc`: the release, and each node's rpc-server jobs and addresses."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from macfleet.judge.llama_rpc import LlamaRolloutReport


def render_llama_rollout(report: LlamaRolloutReport) -> RenderableType:
    if report.result == "check":
        head = Text(f"--check: would switch rpc-server to {report.release}; nothing was changed", style="bold")
        steps = [Text(f"  {i}. {w}") for i, w in enumerate(report.would, 1)]
    else:
        head = Text(f"rpc-server switched to {report.release}" + (f" (from {report.previous})" if report.previous
                                                                   else "") + f" in {report.took_s:g} s",
                    style="bold green")
        steps = [Text(f"staged on {', '.join(report.staged)}")] if report.staged else []
    t = Table(title=f"rpc-server jobs (port {report.rpc_port}, Thunderbolt addresses only)")
    for col in ("node", "job", "listens on", "port", "cable to"):
        t.add_column(col)
    for node, jobs in report.jobs.items():
        for b in jobs:
            t.add_row(Text(node), Text(b.label), Text(b.address), Text(b.port), Text(b.peer))
    return Group(head, *steps, t)
