"""`macfleet config show`: the settings in effect and where each comes from (the file: cli/config_file.py)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from macfleet.cli.config_file import TRUE, Config, load_config
from macfleet.cli.options import JsonOpt
from macfleet.paths import CLUSTER_STATE_ENV, DEFAULT_CLUSTER_STATE
from macfleet.render.output import emit


def _env_bool(name: str) -> bool | None:
    raw = os.environ.get(name)
    return None if raw is None or not raw.strip() else raw.strip().lower() in TRUE


def effective(config: Config) -> dict[str, dict[str, object]]:
    """Each setting's value and where it comes from (a flag given on this command line is not seen here)."""
    out: dict[str, dict[str, object]] = {}
    env_inv = os.environ.get("MACFLEET_INVENTORY", "").strip()
    if env_inv:
        out["inventory"] = {"value": env_inv, "from": "MACFLEET_INVENTORY"}
    elif "inventory" in config.values:
        out["inventory"] = {"value": str(config.values["inventory"]), "from": str(config.path)}
    else:
        out["inventory"] = {"value": "inventories/default", "from": "default (relative to the working directory)"}
    env_state = os.environ.get(CLUSTER_STATE_ENV, "").strip()
    if env_state and config.values.get("cluster_state_dir") != Path(env_state):
        out["cluster_state_dir"] = {"value": env_state, "from": CLUSTER_STATE_ENV}
    elif "cluster_state_dir" in config.values:
        out["cluster_state_dir"] = {"value": str(config.values["cluster_state_dir"]), "from": str(config.path)}
    else:
        out["cluster_state_dir"] = {"value": str(DEFAULT_CLUSTER_STATE), "from": "default"}
    for key, env in (("json", "MACFLEET_JSON"), ("color", "NO_COLOR")):
        from_env = _env_bool(env) if key == "json" else (False if os.environ.get(env) else None)
        if from_env is not None:
            out[key] = {"value": from_env, "from": env}
        elif key in config.values:
            out[key] = {"value": config.values[key], "from": str(config.path)}
        else:
            out[key] = {"value": key == "color", "from": "default"}
    return out


app = typer.Typer(no_args_is_help=True, help="The settings in effect and where each comes from.")


@app.command("show")
def show_cmd(json_output: JsonOpt = False) -> None:
    """Show the config file read (if any), and each setting's value with where it comes from: a MACFLEET_*
    variable, the config file, or the default. A flag on the command line overrides them all."""
    config = load_config()
    settings = effective(config)
    payload = {"config_file": str(config.path), "exists": config.exists, "settings": settings}

    def human(p: dict) -> str:
        head = f"config file: {p['config_file']}" + ("" if p["exists"] else " (none)")
        return "\n".join([head, *(f"{k:17} {v['value']}  ({v['from']})" for k, v in p["settings"].items())])

    emit(payload, human=human)
