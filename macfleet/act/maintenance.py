"""Maintenance on the controller: one JSON file in the inventory's shared state (paths.maintenance_file), read
and replaced under an flock on a guard beside it (as the cluster lock is), so the healer, every operator and
every command see the same; every start and end is a line of the audit log (paths.audit_file)."""

from __future__ import annotations

import contextlib
import json
import socket
from datetime import UTC, datetime
from pathlib import Path

from macfleet.act.lock import process_alive
from macfleet.act.statedir import append_shared, ensure, exclusive, replace_shared
from macfleet.errors import MacfleetError
from macfleet.judge.maintenance import Maintenance, in_force
from macfleet.paths import audit_file, maintenance_file

MAX_BYTES = 256 * 1024


class MaintenanceStore:
    def __init__(self, inventory_root: Path):
        self.root = Path(inventory_root)
        self.path = maintenance_file(self.root)
        self.guard = self.path.with_name(self.path.name + ".guard")

    def _guarded(self) -> contextlib.AbstractContextManager[None]:
        return exclusive(self.guard)

    def read(self) -> dict[str, Maintenance]:
        """mesh -> its maintenance record (in force or not: `live` judges); MacfleetError for a damaged file."""
        ensure(self.path.parent)
        try:
            with self.path.open("rb") as fh:
                raw = fh.read(MAX_BYTES + 1)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise MacfleetError(f"the maintenance file {self.path} cannot be read ({exc.strerror or exc})",
                                hint="it must be a file the inventory's users can read and write") from None
        try:
            if len(raw) > MAX_BYTES:
                raise ValueError(f"over {MAX_BYTES} bytes")
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict):
                raise ValueError("expected {mesh: record}")
            return {str(k): Maintenance.from_json(v) for k, v in data.items()}
        except (ValueError, UnicodeDecodeError) as exc:
            raise MacfleetError(f"the maintenance file {self.path} cannot be read ({exc})",
                                hint="look at it; `macfleet maintenance end` rewrites it") from None

    def _write(self, records: dict[str, Maintenance]) -> None:
        """Replace the file whole; MacfleetError naming it when it cannot be written (the old one stays)."""
        try:
            replace_shared(self.path, (json.dumps({m: r.to_json() for m, r in records.items()}, indent=2)
                                       + "\n").encode())
        except OSError as exc:
            raise MacfleetError(f"cannot write the maintenance file {self.path}: {exc.strerror or exc}",
                                hint="the inventory's shared state directory must be writable by this user "
                                     "(cluster_state_dir in docs/cli.md, docs/runbooks/watch.md)") from None

    def live(self, now: datetime) -> dict[str, Maintenance]:
        """The maintenance in force now, by mesh (an expired one, or a command's whose process is gone, is not)."""
        return {m: r for m, r in self.read().items() if in_force(r, now, command_alive=command_alive(r))}

    def start(self, record: Maintenance, *, unless_in_force: bool = False) -> Maintenance | None:
        """Record `record` on its mesh; returns the record it replaced (in force). With `unless_in_force`
        (a command's), a maintenance already in force is kept and returned, and nothing is written."""
        now = datetime.fromisoformat(record.started)
        with self._guarded():
            records = self._readable()
            was = records.get(record.mesh)
            was = was if was is not None and in_force(was, now, command_alive=command_alive(was)) else None
            if was is not None and unless_in_force:
                return was
            records[record.mesh] = record
            self._write(records)
        return was

    def end(self, mesh: str, *, only: Maintenance | None = None) -> Maintenance | None:
        """Remove `mesh`'s maintenance (with `only`: only if it is still that record); returns what was removed."""
        with self._guarded():
            records = self._readable()
            was = records.get(mesh)
            if was is None or (only is not None and was != only):
                return None
            del records[mesh]
            self._write(records)
        return was

    def repair(self) -> bool:
        """Replace a damaged file with an empty one (no maintenance); whether it was damaged."""
        with self._guarded():
            try:
                self.read()
                return False
            except MacfleetError:
                self._write({})
                return True

    def _readable(self) -> dict[str, Maintenance]:
        """Under the guard: a damaged file is replaced (start and end are how it is repaired)."""
        try:
            return self.read()
        except MacfleetError:
            return {}


def command_alive(m: Maintenance) -> bool:
    """A command's maintenance holds while its process does (as the cluster lock judges a holder)."""
    return not m.command or m.host != socket.gethostname() or process_alive(m.pid, m.process_started)


def append_audit(inventory_root: Path, entry: dict) -> None:
    """One line of the inventory's audit log (the healer's schema: time, mesh, node, finding, decision, action,
    result), written whole; MacfleetError naming the log when it cannot be written."""
    path = audit_file(inventory_root)
    ensure(path.parent)
    line = json.dumps({"time": datetime.now(UTC).isoformat(), "node": None, "finding": None, **entry},
                      ensure_ascii=False) + "\n"
    try:
        append_shared(path, line.encode("utf-8"))
    except OSError as exc:
        raise MacfleetError(f"cannot write the audit log {path}: {exc.strerror or exc}") from None
