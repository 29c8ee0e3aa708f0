"""`macfleet maintenance start|end|status`, and the maintenance `rollout`, `reboot` and `upgrade` take for
their own duration (`during`). Decisions in judge/maintenance.py; the file in act/maintenance.py."""

from __future__ import annotations

import contextlib
import getpass
import os
import socket
from collections.abc import Iterator
from datetime import UTC, datetime

from macfleet.act.lock import my_start
from macfleet.act.maintenance import MaintenanceStore, append_audit
from macfleet.errors import MacfleetError, UsageError
from macfleet.flow import Say, quiet
from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge import maintenance as judge


def who() -> str:
    """The person starting maintenance: their login name (data, bounded)."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = f"uid {os.getuid()}"
    return "".join(c if c.isprintable() else "?" for c in name)[:64]


def _checked(for_text: str, reason: str) -> tuple[float, str]:
    try:
        seconds = judge.parse_duration(for_text)
    except ValueError as exc:
        raise UsageError(f"--for {exc}") from None
    try:
        return seconds, judge.check_reason(reason)
    except ValueError as exc:
        raise UsageError(f"--reason: {exc}") from None


def _live(store: MaintenanceStore, now: datetime) -> tuple[dict, str | None]:
    """The maintenance in force, and why the file could not be read when it is damaged (then: none in force)."""
    try:
        return store.live(now), None
    except MacfleetError as exc:
        return {}, exc.message


def start(fleet: Fleet, meshes: list[Mesh], for_text: str, reason: str, *, check: bool) -> dict:
    """A person's maintenance on each mesh, ending by itself after `for_text`; replaces one in force."""
    seconds, reason = _checked(for_text, reason)
    now = datetime.now(UTC)
    store = MaintenanceStore(fleet.root)
    live, _damaged = _live(store, now)  # a damaged file is replaced by the start (as the hint says)
    out = []
    for m in meshes:
        record = judge.person(m.name, reason, who(), seconds, now)
        was = live.get(m.name) if check else store.start(record)
        if not check:
            append_audit(fleet.root, {"mesh": m.name, "decision": f"maintenance started by {record.by} until "
                                      f"{record.until}: {reason}", "action": "maintenance-start",
                                      "result": "replaced: " + judge.describe(was, now) if was else "started"})
        out.append({"mesh": m.name, "maintenance": record.to_json(), "replaced": was.to_json() if was else None,
                    "said": judge.describe(record, now)})
    return {"check": check, "meshes": out}


def end(fleet: Fleet, meshes: list[Mesh], *, check: bool) -> dict:
    """End each mesh's maintenance (a person's or a command's); a mesh without one is said so."""
    now = datetime.now(UTC)
    store = MaintenanceStore(fleet.root)
    live, damaged = _live(store, now)
    if damaged and not check and store.repair():
        append_audit(fleet.root, {"mesh": None, "decision": f"the damaged maintenance file was replaced by {who()}: "
                                  f"{damaged}", "action": "maintenance-end", "result": "no maintenance recorded"})
    out = []
    for m in meshes:
        was = live.get(m.name)
        if was is not None and not check:
            store.end(m.name, only=was)
            append_audit(fleet.root, {"mesh": m.name, "decision": f"maintenance ended by {who()}",
                                      "action": "maintenance-end", "result": f"ended: {judge.describe(was, now)}"})
        out.append({"mesh": m.name, "ended": was.to_json() if was else None})
    return {"check": check, "meshes": out}


def status(fleet: Fleet, meshes: list[Mesh]) -> dict:
    now = datetime.now(UTC)
    live = MaintenanceStore(fleet.root).live(now)
    return {"meshes": [{"mesh": m.name, "maintenance": live[m.name].to_json() if m.name in live else None,
                        "said": judge.describe(live[m.name], now) if m.name in live else
                        f"mesh {m.name}: no maintenance; the healer acts on it by its policy"} for m in meshes]}


def _audit_said(fleet: Fleet, entry: dict, say: Say) -> None:
    """An audit line a command writes about its own maintenance: a log that cannot be written is said, and the
    command goes on (its maintenance holds either way)."""
    try:
        append_audit(fleet.root, entry)
    except MacfleetError as exc:
        say(f"{exc.message}: this {entry['action']} is not in the audit log")


@contextlib.contextmanager
def during(fleet: Fleet, mesh: Mesh, command: str, reason: str, say: Say = quiet) -> Iterator[str]:
    """Maintenance on `mesh` for the body's duration, so the healer leaves the mesh to `command` and pages
    nobody about its planned work. A maintenance already in force (a person's) is kept and not ended after.
    Yields what was done, in words. A maintenance file that cannot be written stops the command before it
    starts (MacfleetError naming it); the audit lines, and the end (a command's maintenance lapses with its
    process), are said when they fail, never fatal."""
    now = datetime.now(UTC)
    store = MaintenanceStore(fleet.root)
    said = "".join(c if c.isprintable() else "\ufffd" for c in reason[:judge.MAX_REASON])  # a flag's text: data
    record = judge.for_command(mesh.name, command, said, os.getpid(), socket.gethostname(), my_start(), now)
    kept = store.start(record, unless_in_force=True)
    if kept is not None:
        yield f"kept: {judge.describe(kept, now)}"
        return
    _audit_said(fleet, {"mesh": mesh.name, "decision": f"maintenance for {command}: {record.reason}",
                        "action": "maintenance-start", "result": "started for the command's duration"}, say)
    try:
        yield f"maintenance on mesh {mesh.name} for this {command}, ended with it"
    finally:
        try:
            ended = store.end(mesh.name, only=record) is not None
        except MacfleetError as exc:
            say(f"{exc.message}: this {command}'s maintenance lapses when it exits")
            ended = False
        if ended:
            _audit_said(fleet, {"mesh": mesh.name, "decision": f"{command} finished",
                                "action": "maintenance-end", "result": "ended with the command"}, say)



@contextlib.contextmanager
def planned(fleet: Fleet, mesh: Mesh, command: str, reason: str, *, check: bool = False,
            say: Say = quiet) -> Iterator[None]:
    """`during`, said; nothing at all under --check (which changes nothing anywhere)."""
    if check:
        yield
        return
    with during(fleet, mesh, command, reason, say) as what:
        say(f"{command}: {what}")
        yield
