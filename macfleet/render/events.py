"""`--events`: what a long-running command is doing, as JSON Lines on stdout (docs/cli.md "Events").

One schema for every command, written only here. Each line is one JSON object with `event`, `time` (UTC,
ISO 8601) and `command`:

- `started`: the command began.
- `progress`: something happened: a `message` (what the command also says on stderr), and where it concerns
  one node its `node`, `status` and `detail`; a transfer adds `bytes_done` and `bytes_total`.
- `node`: a node reached a final status in this run (`status`: done, back, failed, unreachable, ...).
- `finished`: the last line, always: `exit_code`, `took_s`, and the command's `result` (what `--json` prints)
  or its `error` (`{code, message, hint, details}`, as `--json` prints it).

Light on purpose (the json module and the clock): `--help` imports it.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

# Statuses a command's progress callback gives when a node is finished with; any other is still going.
FINAL = frozenset({"done", "back", "failed", "unreachable", "ok", "changed", "skipped", "refused", "not back",
                   "findings"})


class _Stream:
    on = False
    command = "macfleet"
    started = 0.0
    outcome: dict[str, Any] | None = None  # the result or the error, written by `finished`
    closed = False


stream = _Stream()
_write_lock = threading.Lock()  # progress comes from the threads that wait on each node


def reset() -> None:
    stream.on = False
    stream.command = "macfleet"
    stream.outcome = None
    stream.closed = False


def _write(event: str, **fields: Any) -> None:
    if not stream.on or stream.closed:
        return
    line = {"event": event, "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "command": stream.command, **{k: v for k, v in fields.items() if v is not None}}
    with _write_lock:
        sys.stdout.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
        sys.stdout.flush()


def start(command: str) -> None:
    """Turn the stream on (once) and say the command began."""
    if stream.on:
        return
    stream.on, stream.command, stream.started = True, command, time.monotonic()
    _write("started")


def progress(message: str | None = None, *, node: str | None = None, status: str | None = None,
             detail: str | None = None, **extra: Any) -> None:
    _write("progress", message=message, node=node, status=status, detail=detail, **extra)


def node_status(node: str, status: str, detail: str = "") -> None:
    """A progress callback's (node, status, detail): a `node` event when the status is final, else `progress`."""
    if status in FINAL:
        _write("node", node=node, status=status, detail=detail or None)
    else:
        progress(node=node, status=status, detail=detail or None)


def nodes_from(result: Any) -> None:
    """`node` events from a result's `nodes` ({node: {...}}) for a command that learns each node's outcome only
    at its end (a playbook's recap): `failed` when the node's entry says so, else `done`."""
    nodes = result.get("nodes") if isinstance(result, dict) else None
    if not isinstance(nodes, dict):
        return
    for name, entry in nodes.items():
        failed = isinstance(entry, dict) and (entry.get("failed") or entry.get("back") is False)
        _write("node", node=name, status="failed" if failed else "done")


def result(payload: Any) -> None:
    stream.outcome = {"result": payload}


def error(payload: dict[str, Any]) -> None:
    stream.outcome = {"error": payload}


def finished(exit_code: int) -> None:
    """The last line: written once, at exit, by the command line's one exit path (cli/app.main)."""
    if not stream.on or stream.closed:
        return
    _write("finished", exit_code=exit_code, took_s=round(time.monotonic() - stream.started, 3),
           **(stream.outcome or {}))
    stream.closed = True
