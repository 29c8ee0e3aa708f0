"""Hostile and careless input: what is read from a Mac, a file or a flag is data, bounded and checked at the edge.

One test per kind of attack; the property test at the end throws random and hostile values at every command
and every parser and accepts only a clean exit (0-3), never a traceback.
"""

from __future__ import annotations

from pathlib import Path

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
