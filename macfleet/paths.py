"""Where macfleet keeps its own state on the controller (crash reports, ansible-runner artifacts)."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    """$MACFLEET_STATE_DIR/macfleet, else $XDG_STATE_HOME/macfleet, else ~/.local/state/macfleet."""
    base = os.environ.get("MACFLEET_STATE_DIR") or os.environ.get("XDG_STATE_HOME")
    return Path(base) / "macfleet" if base else Path.home() / ".local" / "state" / "macfleet"
