"""`macfleet --help` and each group's help: fast (nothing heavy imported), clean, and every command taking the
shared options (docs/cli.md "Options every command takes"). Timing is bench/cli_help.py's; here, what is imported."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from macfleet.cli.app import GROUPS
from tests.conftest import EXAMPLE_INVENTORY, ROOT

# What `--help` must not pay for: the models and validation, SSH, Ansible, YAML, the flows and inventory loader.
HEAVY = ("pydantic", "paramiko", "invoke", "ansible_runner", "yaml", "macfleet.flow", "macfleet.inventory.load",
         "macfleet.inventory.model", "macfleet.collect", "macfleet.act")
# Groups whose help is not yet light (they define models or help texts from the flows at import): named, not hidden.
NOT_YET_LIGHT = {"watch"}  # another helper's file this round (cli/watch.py imports the watcher at its top)


def _modules_after(*argv: str) -> set[str]:
    code = (
        "import sys\n"
        "from macfleet.cli.app import main\n"
        "try:\n"
        f"    main({list(argv)!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('\\n'.join(sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "COLUMNS": "100"})
    assert "Usage: macfleet" in done.stdout, done.stdout + done.stderr
    return set(done.stderr.split())


LIGHT = {"macfleet.flow", "macfleet.flow.defaults"}  # a docstring, and the defaults --help shows


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules - LIGHT if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_root_help_imports_no_group_and_nothing_heavy() -> None:
    modules = _modules_after("--help")
    assert _heavy(modules) == []
    assert sorted(m for _, m, _ in GROUPS if m in modules) == []


@pytest.mark.parametrize("group", sorted({name for name, _, _ in GROUPS} - NOT_YET_LIGHT))
def test_group_help_imports_only_its_group_and_nothing_heavy(group: str) -> None:
    modules = _modules_after(group, "--help")
    assert _heavy(modules) == []
    own = dict((name, module) for name, module, _ in GROUPS)[group]
    assert sorted(m for _, m, _ in GROUPS if m in modules and m != own) == []


def _all_commands() -> list[tuple[tuple[str, ...], object]]:
    from macfleet.cli import shared
    from macfleet.cli.app import _load_group

    return [((name, *path), cmd) for name, module, _ in GROUPS for path, cmd in shared.walk(_load_group(name, module))]


COMMANDS = _all_commands()
IDS = [" ".join(words) for words, _ in COMMANDS]


@pytest.mark.parametrize(("words", "command"), COMMANDS, ids=IDS)
def test_every_command_takes_the_shared_options(words: tuple[str, ...], command) -> None:
    opts = {o for p in command.params for o in p.opts}
    assert {"-v", "--verbose", "--json", "--no-color"} <= opts, words
    # every command that reads an inventory takes -i/--inventory (lab, facts, config and saved-capture links
    # read none)
    if words[0] not in ("lab", "facts", "config") and words != ("topology", "links"):
        assert {"-i", "--inventory"} <= opts, words


@pytest.mark.parametrize(("words", "command"), COMMANDS, ids=IDS)
def test_help_is_clean(cli, words: tuple[str, ...], command) -> None:
    result = cli(*words, "--help", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "<bool>" not in out  # a flag takes no value
    assert "--install-completion" not in out  # only the root installs completion
    usage = next(line for line in out.splitlines() if "Usage:" in line)
    assert "COMMAND [ARGS]" not in usage, usage  # these are commands, not groups


def test_root_help_lists_every_group_with_its_summary(cli) -> None:
    out = cli("--help", env={"COLUMNS": "200"}).stdout
    for name, _, summary in GROUPS:
        assert re.search(rf"{name}\s+{re.escape(summary)}", out), name
    assert "<bool>" not in out and "<int>" not in out


@pytest.mark.parametrize("argv", [
    ("--json", "inventory", "check", "-i", str(EXAMPLE_INVENTORY)),
    ("inventory", "check", "--json", "-i", str(EXAMPLE_INVENTORY)),
    ("-i", str(EXAMPLE_INVENTORY), "--json", "inventory", "check"),
    ("-v", "--json", "inventory", "check", "-i", str(EXAMPLE_INVENTORY), "-v"),
    ("--no-color", "inventory", "check", "--json", "-i", str(EXAMPLE_INVENTORY), "--no-color"),
])
def test_shared_options_before_or_after_the_command(cli, argv: tuple[str, ...]) -> None:
    result = cli(*argv, env={"MACFLEET_INVENTORY": None, "MACFLEET_JSON": None})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ok"] is True


def test_verbose_counts_wherever_written_and_reaches_ansible(cli) -> None:
    from macfleet.act import ansible
    from macfleet.render import output

    cli("-vv", "inventory", "check", "-v", "-i", str(EXAMPLE_INVENTORY))
    assert output.mode.verbose == 3
    assert ansible.settings.verbosity == 3
    cli("inventory", "check", "-i", str(EXAMPLE_INVENTORY))
    assert ansible.settings.verbosity == 0


def test_the_inventory_before_the_command_is_used_and_its_own_wins(cli, tmp_path) -> None:
    missing = tmp_path / "nowhere"
    result = cli("-i", str(missing), "--json", "inventory", "check", env={"MACFLEET_INVENTORY": None})
    assert result.exit_code == 2 and str(missing) in result.stdout
    result = cli("-i", str(missing), "--json", "inventory", "check", "-i", str(EXAMPLE_INVENTORY))
    assert result.exit_code == 0, result.output


def test_version_as_json(cli) -> None:
    result = cli("--json", "--version")
    assert "version" in json.loads(result.stdout)


@pytest.mark.parametrize("argv", [("topology", "watch"), ("watch",), ("export", "mlx-hostfile")])
def test_json_is_refused_where_a_command_prints_no_json(cli, argv: tuple[str, ...]) -> None:
    result = cli(*argv, "-i", str(EXAMPLE_INVENTORY), "--json")
    assert result.exit_code == 2, result.output
    assert "has no JSON output yet" in json.loads(result.stdout)["error"]["message"]
