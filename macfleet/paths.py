"""Where macfleet keeps its own state on the controller (crash reports, ansible-runner artifacts, each
inventory's lock, history and watch state, the model cache): named here once."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def state_dir() -> Path:
    """$MACFLEET_STATE_DIR/macfleet, else $XDG_STATE_HOME/macfleet, else ~/.local/state/macfleet."""
    base = os.environ.get("MACFLEET_STATE_DIR") or os.environ.get("XDG_STATE_HOME")
    return Path(base) / "macfleet" if base else Path.home() / ".local" / "state" / "macfleet"


def inventory_tag(inventory_root: Path) -> str:
    """The one name of an inventory's state files (its lock, history, watch state): the directory's name and a
    hash of its absolute path, so one controller may drive several inventories."""
    root = Path(inventory_root).resolve()
    return f"{root.name}-{hashlib.blake2b(str(root).encode(), digest_size=6).hexdigest()}"


def lock_file(inventory_root: Path) -> Path:
    return state_dir() / "locks" / f"{inventory_tag(inventory_root)}.lock.json"


def history_file(inventory_root: Path) -> Path:
    """Beside the lock: what rollouts and reboots did, one JSON object a line (act/lock.py `append_history`)."""
    return state_dir() / "locks" / f"{inventory_tag(inventory_root)}.history.jsonl"


def model_cache_dir() -> Path:
    """Where the controller keeps models it pushes from (one for every inventory)."""
    return state_dir() / "models"
