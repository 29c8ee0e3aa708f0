"""Doctor's cache of its slow probes' answers, per node, on the controller (in macfleet's state dir).

`softwareupdate --list` asks Apple's catalogue over the network: tens of seconds on a real Mac, and its answer
changes only when Apple publishes an update. Doctor reads it at most once per `probes.updates_max_age_s` per
node and keeps the answer here with when it was read; a pass in between uses it and says how old it is, and
`doctor --fresh` reads it again. Only a command's whole answer is kept (stdout, stderr, exit status), never a
verdict: it is parsed and judged again at every pass, like a fresh one. A node is known by the inventory it
comes from, its name and its address, so two inventories (two labs) with the same node names never share
answers. The file is bounded, written atomically and private to the user (0600); anything unreadable in it is
ignored (the probe is then read afresh), never an error.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from macfleet.paths import state_dir

MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_TEXT_CHARS = 64 * 1024  # per stream of one answer: softwareupdate's list is a few KiB
KEEP_S = 7 * 24 * 3600.0  # answers older than this are dropped when the file is written


@dataclass(frozen=True)
class CachedAnswer:
    stdout: str
    stderr: str
    rc: int
    read_at: float  # the controller's clock (epoch s) when the answer came

    def age_s(self, now: float) -> float:
        return max(0.0, now - self.read_at)


def cache_path() -> Path:
    return state_dir() / "probe-cache.json"


def node_key(inventory_root: str, name: str, address: str, port: int | None) -> str:
    """Which node an answer is from: its inventory, name and address (a digest: the file holds no paths)."""
    return hashlib.sha256(f"{inventory_root}\0{name}\0{address}\0{port or ''}".encode()).hexdigest()[:32]


def _read_file(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError:
        return {}
    if len(raw) > MAX_FILE_BYTES:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    return data if isinstance(data, dict) and isinstance(data.get("probes"), dict) else {}


def _answer(value: object) -> CachedAnswer | None:
    if not isinstance(value, dict):
        return None
    out, err, rc, at = value.get("stdout"), value.get("stderr"), value.get("rc"), value.get("read_at")
    if not (isinstance(out, str) and isinstance(err, str) and isinstance(rc, int) and isinstance(at, int | float)):
        return None
    return CachedAnswer(stdout=out, stderr=err, rc=rc, read_at=float(at))


def load(probe: str, keys: list[str], path: Path | None = None) -> dict[str, CachedAnswer]:
    """The cached answers of `probe` for these node keys (those it has)."""
    entries = _read_file(path or cache_path()).get("probes", {}).get(probe, {})
    if not isinstance(entries, dict):
        return {}
    return {k: a for k in keys if (a := _answer(entries.get(k))) is not None}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path.with_name(path.name + ".lock"), "a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(guard, fcntl.LOCK_UN)


def store(probe: str, answers: Mapping[str, CachedAnswer], path: Path | None = None,
          now: float | None = None) -> None:
    """Add these answers (node key -> answer) to the cache; drop answers older than KEEP_S."""
    if not answers:
        return
    path = path or cache_path()
    now = time.time() if now is None else now
    with _locked(path):
        data = _read_file(path) or {"probes": {}}
        probes = data["probes"]
        for name in list(probes):
            entries = probes[name] if isinstance(probes[name], dict) else {}
            probes[name] = {k: v for k, v in entries.items()
                            if (a := _answer(v)) is not None and now - a.read_at < KEEP_S}
        mine = probes.setdefault(probe, {})
        for key, a in answers.items():
            mine[key] = {"stdout": a.stdout[-MAX_TEXT_CHARS:], "stderr": a.stderr[-MAX_TEXT_CHARS:], "rc": a.rc,
                         "read_at": a.read_at}
        raw = json.dumps(data, indent=0).encode()
        if len(raw) > MAX_FILE_BYTES:  # too many nodes' answers: keep only this pass's
            raw = json.dumps({"probes": {probe: {k: mine[k] for k in answers}}}, indent=0).encode()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
