"""Hostile and careless input: what is read from a Mac, a file or a flag is data, bounded and checked at the edge.

One test per kind of attack; the property test at the end throws random and hostile values at every command
and every parser and accepts only a clean exit (0-3), never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from macfleet.errors import UsageError
from tests.conftest import CAPTURES

TB = CAPTURES / "thunderbolt"
M5_LOCAL = TB / "macos__sp_thunderbolt_json_mbp_m5max_pair_local_anon_1.json"
M5_PEER = TB / "macos__sp_thunderbolt_json_mbp_m5max_pair_peer_anon_1.json"
PORTS = CAPTURES / "hardware-ports" / "macos__networksetup_listallhardwareports_mbp_m4max_trimmed_1.txt"
HOSTILE_NAME = "[/]\x1b[2J\x1b]0;owned\x07[bold]x"


# ------------------------------------------------------------------------------------- terminal injection


def test_markup_and_escapes_from_a_capture_reach_the_terminal_as_text(cli, tmp_path: Path) -> None:
    ports = tmp_path / "ports.txt"
    ports.write_text(PORTS.read_text().replace("Device: en2", f"Device: {HOSTILE_NAME}"))
    result = cli("topology", "links", "--from", f"a={M5_LOCAL}", "--from", f"b={M5_PEER}", "--ports", f"a={ports}")
    assert result.exit_code == 0, result.stderr
    assert "[/]" in result.stdout and "[bold]x" in result.stdout  # shown as it was read
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout  # never acted on by the terminal


def test_escapes_in_an_error_message_do_not_reach_the_terminal(cli, tmp_path: Path) -> None:
    bad = tmp_path / "x.txt"
    bad.write_text("\x1b]0;owned\x07[red]not sw_vers[/red]\n")
    result = cli("facts", "parse", "sw-vers", str(bad))
    assert result.exit_code == 2
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr


# ------------------------------------------------------------------------------ numbers at the edge


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("topology", "watch", "--interval", "inf"), "--interval"),
        (("topology", "watch", "--interval", "nan"), "--interval"),
        (("topology", "watch", "--timeout", "-5"), "--timeout"),
        (("topology", "watch", "--timeout", "nan"), "--timeout"),
        (("topology", "watch", "--timeout", "0"), "--timeout"),
        (("topology", "plan", "--nodes", "1000000", "--model", "mac-studio-m3-ultra"), "expected 2 to 8"),
        (("topology", "plan", "--nodes", "1e3", "--model", "mac-studio-m3-ultra"), "--nodes"),
        (("lab", "up", "--boot-seconds", "nan"), "--boot-seconds"),
        (("lab", "up", "--boot-seconds", "inf"), "--boot-seconds"),
    ],
)
def test_numbers_from_flags_are_finite_and_in_range(cli, argv: tuple[str, ...], says: str) -> None:
    result = cli(*argv, "--json") if argv[1] == "plan" else cli(*argv)
    assert result.exit_code == 2
    assert says in (result.stdout + result.stderr)


def test_a_lab_fault_refuses_nan_seconds() -> None:
    from macfleet.lab import faults

    for bad in ("nan", "inf", "-inf", "1e400"):
        with pytest.raises(UsageError):
            faults._secs(bad, hi=600)
    assert faults._secs("2.5", hi=600) == 2.5


def test_infinite_deadline_in_the_inventory_is_bad_input_not_a_crash(cli, example_inventory: Path) -> None:
    settings = example_inventory / "group_vars/all/macfleet.yml"
    settings.write_text(settings.read_text().replace("gather_deadline_s: 60", "gather_deadline_s: .inf"))
    result = cli("topology", "check", "-i", str(example_inventory), "--json")
    assert result.exit_code == 2
    (problem,) = json.loads(result.stdout)["error"]["details"]["problems"]
    assert (problem["key_path"], problem["found"], problem["line"]) == ("macfleet_probes.gather_deadline_s", "inf", 35)
