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


@pytest.mark.parametrize("group", sorted(name for name, _, _ in GROUPS))
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


# What each command does, which decides the options it must take (docs/cli.md "What a new command must have"):
# "nodes": it acts on the inventory's nodes (-l/--limit, and -i); "changes": it changes something (--check);
# "long": it runs long enough to follow (--events); "playbook": its changes are a playbook's (--diff);
# "no-inventory": it reads no inventory (no -i).
# A command missing here fails below: a new command is classified when it is added.
KINDS: dict[str, set[str]] = {
    "inventory check": set(), "inventory show": set(), "config show": {"no-inventory"},
    "trust": {"nodes", "changes"},
    "facts parse": {"no-inventory"}, "facts kinds": {"no-inventory"},
    "topology links": {"no-inventory"}, "topology plan": set(),
    "topology check": {"nodes"}, "topology show": {"nodes"}, "topology watch": {"nodes", "long"},
    "topology ipplan": {"nodes"}, "topology apply": {"nodes", "changes", "long", "playbook"},
    "bootstrap": {"nodes", "changes", "long", "playbook"},
    "doctor": {"nodes", "changes", "long", "playbook"},  # changes with --fix
    "rollout exo": {"nodes", "changes", "long"}, "rollout llama-rpc": {"nodes", "changes", "long"},
    "rollout rollback": {"nodes", "changes", "long"}, "rollout status": {"nodes"}, "rollout history": set(),
    "rollout model": {"nodes", "changes", "long"},
    "rdma status": {"nodes"}, "rdma enable": {"nodes", "changes", "long"},
    "reboot": {"nodes", "changes", "long"}, "upgrade": {"nodes", "changes", "long"},
    "unlock": {"nodes", "changes", "long"}, "watch": {"nodes", "changes", "long"},
    "export mlx-hostfile": {"nodes"}, "export llama-rpc": {"nodes"}, "bench links": {"nodes", "long"},
    "bench exo": {"nodes", "long"},
    # exo's API, reached through any node of the mesh: status per node; place and stop change the mesh
    "exo status": {"nodes"}, "exo place": {"nodes", "changes", "long"}, "exo stop": {"nodes", "changes"},
    "exo chat": set(), "exo tunnel": set(),
    # a mark on the controller's shared state, per mesh: the healer reads it
    "maintenance start": {"changes"}, "maintenance end": {"changes"}, "maintenance status": set(),
}
# The lab is a test wing run as root on Linux, not the product's nodes: its commands take the shared options
# and no inventory.
LAB = {"no-inventory"}
# Options a command lacks today (by the first name of what it needs), each with why; an entry that is no longer
# true fails (remove it then).
NOT_YET: dict[tuple[str, str], str] = {
    ("exo status", "-l"): "cli/exo.py (another branch this round) takes --mesh only",
    ("exo place", "-l"): "cli/exo.py (another branch this round) takes --mesh only",
    ("exo place", "--events"): "cli/exo.py (another branch this round): its wait is not streamed yet",
    ("exo stop", "-l"): "cli/exo.py (another branch this round) takes --mesh only",
}
# Commands whose --json is refused because what they print is not a result (a shell, a build on disk).
JSON_REFUSED = {"lab down", "lab ssh", "lab recovery", "lab exo-build", "lab llama-build"}
REQUIRED = {"nodes": ("-l", "--limit"), "changes": ("--check",), "long": ("--events",), "playbook": ("--diff",)}


def _kinds(words: tuple[str, ...]) -> set[str]:
    name = " ".join(words)
    if words[0] == "lab":
        return LAB
    assert name in KINDS, f"`macfleet {name}` is new: say in KINDS what it does, and give it the options that needs"
    return KINDS[name]


@pytest.mark.parametrize(("words", "command"), COMMANDS, ids=IDS)
def test_every_command_takes_the_shared_options(words: tuple[str, ...], command) -> None:
    """Derived from the app: every command it has (others' new groups too), against docs/cli.md's rules."""
    opts = {o for p in command.params for o in p.opts}
    name = " ".join(words)
    kinds = _kinds(words)
    missing = [o for o in ("-v", "--verbose", "--json", "--no-color") if o not in opts]
    if "no-inventory" not in kinds:
        missing += [o for o in ("-i", "--inventory") if o not in opts]
    for kind, needed in REQUIRED.items():
        if kind in kinds:
            missing += [o for o in needed if o not in opts and (name, needed[0]) not in NOT_YET]
    assert missing == [], f"`macfleet {name}` lacks {', '.join(missing)}"
    stale = [o for (n, o) in NOT_YET if n == name and o in opts]
    assert stale == [], f"`macfleet {name}` has {', '.join(stale)} now: remove it from NOT_YET"
    json_param = next(p for p in command.params if "--json" in p.opts)
    refused = json_param.callback is not None and json_param.callback.__name__ == "_no_json_cb"
    assert refused == (name in JSON_REFUSED), f"`macfleet {name} --json` {'is' if refused else 'is not'} refused"


def test_every_command_is_classified_once() -> None:
    names = {name for name in IDS if not name.startswith("lab ")}
    assert set(KINDS) - names == set(), "KINDS names a command the app no longer has"


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


def test_json_is_refused_where_a_command_prints_no_result(cli) -> None:
    result = cli("lab", "exo-build", "--json")
    assert result.exit_code == 2, result.output
    assert "has no JSON output yet" in json.loads(result.stdout)["error"]["message"]
