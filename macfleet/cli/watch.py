"""`macfleet watch`: the long-running healer (probe, debounce, ladder, breaker, audit log, metrics, page)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from macfleet.cli.options import (
    EventsOpt,
    InventoryOpt,
    LimitOpt,
    MeshOpt,
    inventory_path,
    seconds_option,
    whole_mesh,
)
from macfleet.errors import UsageError
from macfleet.render import events as stream
from macfleet.render.output import emit, info
from macfleet.render.text import text

if TYPE_CHECKING:  # the watcher, the flows and the inventory load when it runs, not for --help
    from macfleet.watch.loop import Watcher


def say(message: str) -> None:
    """What watch says, on stderr: always data (a runner's error text may hold `[/bold]` or an ESC), never
    markup; terminal controls and bidi overrides are shown as U+FFFD (docs/cli.md)."""
    info(text(message))


app = typer.Typer(help="The watcher that heals a wedged mesh.", invoke_without_command=True,
                  context_settings={"help_option_names": ["-h", "--help"]})


@app.callback()
def watch(
    inventory: InventoryOpt = None,
    mesh: MeshOpt = None,
    limit: LimitOpt = None,
    interval: Annotated[float | None, seconds_option("--interval", low=0.2, high=86400, help="Seconds between "
                                                     "probes (default: macfleet_probes.interval_s).",
                                                     show_default=False)] = None,
    once: Annotated[bool, typer.Option("--once", help="One probe, one decision, then exit: 0 healthy, 1 findings "
                                       "(or a check that could not tell), 3 a node unreachable.")] = False,
    reset_breaker: Annotated[bool, typer.Option("--reset", help="Close the circuit breaker, forget the streaks, "
                                                "and exit.")] = False,
    listen: Annotated[str | None, typer.Option("--listen", metavar="ADDR:PORT", help="Serve /metrics "
                                               "(Prometheus) and a read-only status page on this address.",
                                               show_default=False)] = None,
    listen_token_file: Annotated[Path | None, typer.Option("--listen-token-file", metavar="FILE", help="Ask "
                                                           "every client of --listen for `Authorization: Bearer "
                                                           "TOKEN`, TOKEN read from FILE (mode 0600).",
                                                           show_default=False)] = None,
    json_output: Annotated[bool, typer.Option("--json", help="JSON Lines on stdout, as --events: every message and "
                                              "decision as it happens, the last status in the finished line.")]
    = False,
    events: EventsOpt = False,
    check: Annotated[bool, typer.Option("--check", help="One probe and the decision the healer would take now; "
                                        "nothing done, written or sent. Exit codes as --once.")] = False,
) -> None:
    """Probe every interval over kept-open SSH sessions; act on a problem that persists (restart exo, then
    reboot the mesh, then stop and page), within the inventory's policy; log every decision."""
    from macfleet.flow.reboot import select
    from macfleet.inventory.load import load_inventory
    from macfleet.watch.loop import Watcher, preview, reset
    from macfleet.watch.metrics import exposed, read_token

    if json_output:
        stream.start("macfleet watch")  # a command that runs until stopped: its JSON is its stream
    fleet = load_inventory(inventory_path(inventory))
    mesh = whole_mesh(fleet, mesh, limit, "the watcher heals whole meshes (its last rung reboots one)")
    meshes = [select(fleet, mesh, [])[0]] if mesh or len(fleet.meshes) == 1 else list(fleet.meshes)
    if reset_breaker:
        if check:
            raise UsageError("--check with --reset: --reset changes the healer's state; run it without --check")
        reset(fleet, meshes, say)
        return
    port = listen.rpartition(":")[2] if listen is not None else "1"
    if listen is not None and (":" not in listen or not port.isascii() or not port.isdigit()
                               or not 0 < int(port) < 65536 or len(listen) > 300):
        raise UsageError(f"--listen {listen!r}: expected ADDR:PORT with a port from 1 to 65535, e.g. 127.0.0.1:9464")
    if listen_token_file is not None and listen is None:
        raise UsageError("--listen-token-file needs --listen")
    token = read_token(listen_token_file) if listen_token_file is not None else None
    if check:  # every option checked first, as without --check
        if listen is not None:
            raise UsageError("--check with --listen: a preview serves nothing; run it without --listen")
        decisions, code = preview(fleet, meshes, say)
        emit({"check": True, "decisions": decisions}, human=lambda _: None, exit_code=code)  # said on stderr
        return
    if listen is not None and token is None and exposed(listen):
        say(f"warning: --listen {listen} is reachable beyond this host and has no --listen-token-file: anyone who "
            "can reach it reads the status page and the metrics")
    every = interval or min(m.settings.probes.interval_s for m in meshes)
    watcher = Watcher(fleet, meshes, interval_s=every, say=say, listen=listen, listen_token=token)
    _decisions_on_stream(watcher)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        watcher.run(once=once, stop=stop)
    finally:
        watcher.close()
    say("watch: stopped")
    code = watcher.exit_code() if once else 0
    if stream.stream.on:
        emit({**watcher.snapshot, "audit": list(watcher.audit.recent)}, exit_code=code)
    if code:
        raise typer.Exit(code)


def _decisions_on_stream(watcher: Watcher) -> None:
    """Each decision the watcher writes to its audit log, also as a `progress` event with `decision`."""
    if not stream.stream.on:
        return
    append = watcher.audit.append

    def append_and_stream(entry: dict) -> bool:
        stream.progress(decision=entry)
        return append(entry)

    watcher.audit.append = append_and_stream  # type: ignore[method-assign]
