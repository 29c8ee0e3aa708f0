"""`macfleet exo` renderings: each node's exo, the instances and where their shards are, a placement, a chat's
speeds. Everything read from exo is shown as plain text, never as rich markup."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from macfleet.judge.placement import ChatReport, ExoStatus, InstanceView, PlaceReport, StopReport
from macfleet.render.text import text

READY = {"RunnerReady": "green", "RunnerRunning": "green", "RunnerFailed": "red"}


def _instances(instances: list[InstanceView]) -> RenderableType:
    if not instances:
        return text("no model placed (place one: macfleet exo place MODEL --wait)", style="dim")
    t = Table(title="instances: where the shards are", show_lines=True)
    for col in ("model", "instance", "over", "node", "rank", "layers", "runner"):
        t.add_column(col)
    for i in instances:
        for k, s in enumerate(i.shards):
            head = (text(i.model, "bold"), text(i.instance_id[:8]), text(f"{i.sharding} / {i.transport}")) if k == 0 \
                else (Text(""), Text(""), Text(""))
            runner = text(s.status + (f": {s.error}" if s.error else ""), READY.get(s.status, "yellow"))
            t.add_row(*head, text(s.node), text(s.rank), text(s.layers or ""), runner)
    return t


def render_status(report: ExoStatus) -> RenderableType:
    t = Table(title=f"exo on mesh {report.mesh}")
    for col in ("node", "release", "running", "peers"):
        t.add_column(col)
    for n in report.nodes:
        running = (text(f"yes; {n.problem}" if n.problem else "yes", "yellow" if n.problem else "green") if n.running
                   else text(f"no: {n.problem or '?'}", "red"))
        t.add_row(text(n.node, "bold"), text(n.release or "?"), running, text(", ".join(n.peers) or "none"))
    return Group(t, _instances(report.instances))


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def render_place(report: PlaceReport) -> RenderableType:
    where = ", ".join(report.nodes)
    if report.already:
        return Group(text(f"{report.model} is placed already"), _instances([report.instance] if report.instance
                                                                           else []))
    memory = ", ".join(f"{n} {_gb(b)}" for n, b in report.memory_bytes.items())
    plan = text(f"{report.model}: {report.sharding} over {report.transport} on {where} (memory: {memory})")
    if report.check:
        return Group(text("would place (--check: nothing changed)", "bold"), plan)
    if report.instance is None:
        return Group(plan, text("placement sent to exo (add --wait to wait until it is ready)", "dim"))
    return Group(plan, text(f"ready after {report.waited_s:g} s", "green"), _instances([report.instance]))


def render_chat(report: ChatReport) -> RenderableType:
    """After the streamed answer: the speeds (the answer itself was printed as it came)."""
    def tps(v: float | None) -> str:
        return f"{v:.1f} tokens/s" if v is not None else "?"

    how = "exo's figures" if report.speeds_from == "exo" else "timed on the controller"
    return text(f"\nprompt: {report.prompt_tokens or '?'} tokens at {tps(report.prompt_tps)}; generation: "
                f"{report.generation_tokens or '?'} tokens at {tps(report.generation_tps)} ({how}, via "
                f"{report.node})", "dim")


def render_stop(report: StopReport) -> RenderableType:
    if not report.instances:
        return text(f"nothing placed as {report.target!r}: nothing to stop")
    head = "would stop (--check: nothing changed)" if report.check else "stopped"
    return Group(text(head, "bold"), _instances(report.instances))
