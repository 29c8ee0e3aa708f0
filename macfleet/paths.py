"""Where macfleet keeps its own state on the controller, named here once.

Two places. The user's own (`state_dir`: crash reports, ansible-runner artifacts, the probe cache, the model
cache). And each inventory's cluster state, shared by every user who drives that cluster and by the healer
(`cluster_dir`: the cluster lock, the history, the healer's state and audit log, maintenance): one directory
per inventory under a system path, so an operator's `macfleet reboot` and the healer running as its own user
see the same lock, and `macfleet watch --reset` clears what the healer reads (act/statedir.py creates and
checks it)."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

CLUSTER_STATE_ENV = "MACFLEET_CLUSTER_STATE_DIR"
# the FHS's place for a program's state (/var/lib); on a macOS controller, the system's Application Support
DEFAULT_CLUSTER_STATE = (Path("/Library/Application Support/macfleet") if sys.platform == "darwin"
                         else Path("/var/lib/macfleet"))


def state_dir() -> Path:
    """$MACFLEET_STATE_DIR/macfleet, else $XDG_STATE_HOME/macfleet, else ~/.local/state/macfleet."""
    base = os.environ.get("MACFLEET_STATE_DIR") or os.environ.get("XDG_STATE_HOME")
    return Path(base) / "macfleet" if base else Path.home() / ".local" / "state" / "macfleet"


def inventory_tag(inventory_root: Path) -> str:
    """The one name of an inventory's state files (its lock, history, watch state): the directory's name and a
    hash of its absolute path, so one controller may drive several inventories."""
    root = Path(inventory_root).resolve()
    return f"{root.name}-{hashlib.blake2b(str(root).encode(), digest_size=6).hexdigest()}"


def cluster_state_root() -> Path:
    """$MACFLEET_CLUSTER_STATE_DIR (the config file's `cluster_state_dir` sets it), else DEFAULT_CLUSTER_STATE."""
    explicit = os.environ.get(CLUSTER_STATE_ENV, "").strip()
    if not explicit:
        return DEFAULT_CLUSTER_STATE
    path = Path(explicit).expanduser()
    if not path.is_absolute() or any(ord(c) < 32 or c == "\x7f" for c in explicit):
        from macfleet.errors import UsageError

        # a relative one would name another directory from each working directory: two locks, not one
        raise UsageError(f"{CLUSTER_STATE_ENV}={explicit[:200]!r}: expected an absolute path without control "
                         "characters (every user and the healer must name the same directory)")
    return path


def cluster_dir(inventory_root: Path) -> Path:
    """The inventory's shared state: one directory, whoever runs the command."""
    return cluster_state_root() / inventory_tag(inventory_root)


def lock_file(inventory_root: Path) -> Path:
    return cluster_dir(inventory_root) / "lock.json"


def history_file(inventory_root: Path) -> Path:
    """Beside the lock: what rollouts and reboots did, one JSON object a line (act/lock.py `append_history`)."""
    return cluster_dir(inventory_root) / "history.jsonl"


def legacy_lock_file(tag: str) -> Path:
    """Where a cluster lock was kept before the shared cluster state (the invoking user's own state)."""
    return state_dir() / "locks" / f"{tag}.lock.json"


def watch_state_file(inventory_root: Path) -> Path:
    """The healer's streaks, rungs and breaker (what `macfleet watch --reset` clears)."""
    return cluster_dir(inventory_root) / "watch-state.json"


def audit_file(inventory_root: Path) -> Path:
    """Every decision of the healer, and every maintenance started or ended, one JSON object a line."""
    return cluster_dir(inventory_root) / "audit.jsonl"


def maintenance_file(inventory_root: Path) -> Path:
    """The maintenance under way on each mesh (act/maintenance.py)."""
    return cluster_dir(inventory_root) / "maintenance.json"


def model_cache_dir() -> Path:
    """Where the controller keeps models it pushes from (one for every inventory)."""
    return state_dir() / "models"
