"""The user's config file, read before every command (cli/shared.py); shown by `macfleet config show`.

The file is TOML, at $MACFLEET_CONFIG, else $XDG_CONFIG_HOME/macfleet/config.toml, else
~/.config/macfleet/config.toml; none is fine. Each setting is overridden by its MACFLEET_* variable, which a flag
overrides in turn (docs/cli.md "Configuration"):

    inventory = "~/fleets/studio"   # the default -i (relative: to this file's directory)
    json = false                    # as --json on every command
    color = true                    # false: as --no-color
    cluster_state_dir = "/var/lib/macfleet"  # each inventory's shared lock, history, healer state, maintenance
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from macfleet.errors import UsageError

MAX_CONFIG_BYTES = 64 * 1024
KEYS = {"inventory": str, "json": bool, "color": bool, "cluster_state_dir": str}
PATH_KEYS = ("inventory", "cluster_state_dir")
TRUE = ("1", "true", "yes", "on")


@dataclass
class Config:
    path: Path
    exists: bool = False
    values: dict[str, object] = field(default_factory=dict)


def config_path() -> Path:
    explicit = os.environ.get("MACFLEET_CONFIG", "").strip()
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME", "").strip()
    return (Path(base) if base else Path.home() / ".config") / "macfleet" / "config.toml"


def load_config() -> Config:
    """The config file's settings, checked: UsageError (exit 2) naming the file, the key and what is expected."""
    path = config_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Config(path)
    except OSError as e:
        raise UsageError(f"cannot read the config file {path}: {e.strerror or e}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise UsageError(f"{path}: {len(raw)} bytes, expected a config file of at most {MAX_CONFIG_BYTES}")
    import tomllib

    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"{path}: not valid TOML ({e})", hint="see `macfleet config show --help`") from None
    values: dict[str, object] = {}
    for key, value in data.items():
        kind = KEYS.get(key)
        if kind is None:
            raise UsageError(f"{path}: unknown key {key!r}", hint="keys: " + ", ".join(KEYS))
        if not isinstance(value, kind):
            raise UsageError(f"{path}: {key} = {value!r}, expected a {'string' if kind is str else 'true or false'}")
        if key in PATH_KEYS:
            if any(ord(c) < 32 or c == "\x7f" for c in str(value)):
                raise UsageError(f"{path}: {key}: expected a path without control characters")
            p = Path(str(value)).expanduser()
            value = p if p.is_absolute() else path.parent / p
        values[key] = value
    return Config(path, True, values)
