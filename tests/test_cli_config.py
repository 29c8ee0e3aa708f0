"""The config file (`~/.config/macfleet/config.toml`, or $MACFLEET_CONFIG) and `macfleet config show`: each
setting under its MACFLEET_* variable, under the flags; a bad file refused naming the key (exit 2)."""

from __future__ import annotations

import json
import shutil

from tests.conftest import EXAMPLE_INVENTORY

CLEAN = {"MACFLEET_INVENTORY": None, "MACFLEET_JSON": None, "NO_COLOR": None}


def _config(tmp_path, text: str) -> dict[str, str | None]:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return {**CLEAN, "MACFLEET_CONFIG": str(path)}


def test_the_config_files_inventory_and_json_are_the_defaults(cli, tmp_path) -> None:
    shutil.copytree(EXAMPLE_INVENTORY, tmp_path / "fleet")
    env = _config(tmp_path, 'inventory = "fleet"\njson = true\n')  # relative to the config file's directory
    result = cli("inventory", "check", env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["inventory"] == str((tmp_path / "fleet").resolve())


def test_variables_and_flags_win_over_the_config_file(cli, tmp_path) -> None:
    env = _config(tmp_path, 'inventory = "nowhere"\n')
    result = cli("inventory", "check", "--json", env={**env, "MACFLEET_INVENTORY": str(EXAMPLE_INVENTORY)})
    assert result.exit_code == 0, result.output
    result = cli("-i", str(EXAMPLE_INVENTORY), "inventory", "check", "--json", env=env)
    assert result.exit_code == 0, result.output
    shown = json.loads(cli("config", "show", "--json", env={**env, "MACFLEET_JSON": "1"}).stdout)
    assert shown["exists"] is True
    assert shown["settings"]["inventory"] == {"value": str(tmp_path / "nowhere"), "from": env["MACFLEET_CONFIG"]}
    assert shown["settings"]["json"] == {"value": True, "from": "MACFLEET_JSON"}
    assert shown["settings"]["color"] == {"value": True, "from": "default"}


def test_a_bad_config_file_is_refused_naming_the_key(cli, tmp_path) -> None:
    for text, says in (("colour = false\n", "unknown key 'colour'"), ("json = 1\n", "expected a true or false"),
                       ("json = \n", "not valid TOML"),
                       ('cluster_state_dir = "/var/lib/mac\\u0000fleet"\n', "without control characters")):
        result = cli("inventory", "check", "-i", str(EXAMPLE_INVENTORY), "--json", env=_config(tmp_path, text))
        assert result.exit_code == 2, result.output
        assert says in json.loads(result.stdout)["error"]["message"]


def test_no_config_file_is_fine(cli, tmp_path) -> None:
    env = {**CLEAN, "MACFLEET_CONFIG": str(tmp_path / "none.toml")}
    shown = json.loads(cli("config", "show", "--json", env=env).stdout)
    assert shown["exists"] is False and shown["settings"]["inventory"]["value"] == "inventories/default"
