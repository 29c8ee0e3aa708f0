"""Doctor's small probes (facts/probes.py, facts/disk.py) on the outputs in tests/fixtures/probes: real Macs'
`ping` and `softwareupdate --list` quoted in public issues (public/), and shapes we wrote where no Mac's output
is published (see that folder's README). Each quirk the parsers rely on is a named case here, and anything
else is refused with FactsParseError."""

from __future__ import annotations

from pathlib import Path

import pytest

from macfleet.errors import FactsParseError
from macfleet.facts.disk import parse_df
from macfleet.facts.probes import (
    parse_epoch,
    parse_pf_info,
    parse_pf_rules,
    parse_ping,
    parse_softwareupdate_list,
)

PROBES = Path(__file__).resolve().parent.parent / "fixtures" / "probes"


def text(name: str) -> str:
    return (PROBES / name).read_text(encoding="utf-8")


def test_date_epoch() -> None:
    assert parse_epoch(text("date_epoch.txt")).epoch_s == 1796075974


@pytest.mark.parametrize("bad", ["", "Mon Nov 30 22:00:05 UTC 2026", "17960759.5", "%s\n", "1\n2\n"])
def test_date_refuses_anything_but_one_epoch(bad: str) -> None:
    with pytest.raises(FactsParseError):
        parse_epoch(bad)


def test_df_of_the_models_directory() -> None:
    df = parse_df(text("df_k_models.txt"))
    assert (df.device, df.available_kb) == ("/dev/disk3s5", 81856376)
    assert df.available_bytes == 81856376 * 1024


def test_softwareupdate_nothing_pending() -> None:
    assert parse_softwareupdate_list(text("softwareupdate_none.txt")).pending == []


def test_softwareupdate_macos_pending_with_its_restart() -> None:
    pending = parse_softwareupdate_list(text("softwareupdate_macos_pending.txt")).pending
    assert [(u.label, u.version, u.restart, u.is_macos) for u in pending] == [
        ("macOS Tahoe 26.2-25C56", "26.2", True, True), ("Safari26.2-26.2", "26.2", False, False)]
    assert pending[0].title == "macOS Tahoe 26.2"


def test_softwareupdate_progress_lines_only_is_not_a_verdict() -> None:
    """Cut off after "Finding available software" (the catalogue did not answer): not "nothing pending"."""
    with pytest.raises(FactsParseError):
        parse_softwareupdate_list("Software Update Tool\n\nFinding available software\n")


def test_pf_info_enabled_and_disabled() -> None:
    on = parse_pf_info(text("pf_info_enabled.txt"))
    assert on.enabled and on.status_line == "Status: Enabled for 0 days 00:00:46"
    assert not parse_pf_info("Status: Disabled                              Debug: Urgent\n").enabled
    with pytest.raises(FactsParseError):
        parse_pf_info("pfctl: /dev/pf: Permission denied\n")


def test_pf_rules_of_the_bootstrap_anchor() -> None:
    rules = parse_pf_rules(text("pf_rules_macfleet.txt")).rules
    assert len(rules) == 15
    assert (rules[0].action, rules[0].interface, rules[0].proto, rules[0].source.address, rules[0].port) == (
        "pass", "lo0", "tcp", "any", 52415)
    assert rules[6].source.address == "<macfleet_exo_peers>" and rules[6].interface is None
    assert (rules[8].action, rules[8].interface, rules[8].port) == ("block", None, 52415)


@pytest.mark.parametrize(("line", "iface", "source", "port"), [
    ("pass in quick on en2 inet proto tcp from any to any port = 52415 flags S/SA keep state", "en2", "any", 52415),
    ("pass in quick proto tcp from 10.213.0.0/16 to any port = 52415 flags S/SA keep state", None,
     "10.213.0.0/16", 52415),
    ("pass in all flags S/SA keep state", None, "any", None),
    ("block drop in log quick proto tcp from any to any port = 52415", None, "any", 52415),
])
def test_pf_rules_as_pfctl_prints_them(line: str, iface: str | None, source: str, port: int | None) -> None:
    [rule] = parse_pf_rules(line + "\n").rules
    assert (rule.interface, rule.source.address, rule.port) == (iface, source, port)


def test_pf_rules_empty_anchor_and_garbage() -> None:
    assert parse_pf_rules("").rules == []
    with pytest.raises(FactsParseError):
        parse_pf_rules("pfctl: Permission denied\n")


def test_ping_answered_and_lost() -> None:
    ok, lost = parse_ping(text("ping_ok.txt")), parse_ping(text("ping_lost.txt"))
    assert (ok.transmitted, ok.received, ok.rtt_ms) == (1, 1, 0.477)
    assert (lost.received, lost.rtt_ms) == (0, None)
    with pytest.raises(FactsParseError):
        parse_ping("ping: cannot resolve x: Unknown host\n")


# Real Macs' outputs quoted in public issues (tests/fixtures/probes/README.md says where each came from).

def test_ping_as_macos_prints_it() -> None:
    one = parse_ping(text("public/ping_macos12_one.txt"))
    assert (one.transmitted, one.received, one.rtt_ms) == (1, 1, 239.159)
    five = parse_ping(text("public/ping_osx_five.txt"))
    assert (five.transmitted, five.received, five.rtt_ms) == (5, 5, 31.927)


def test_softwareupdate_as_big_sur_printed_it() -> None:
    [update] = parse_softwareupdate_list(text("public/softwareupdate_bigsur_pending.txt")).pending
    assert (update.label, update.title, update.version, update.restart, update.is_macos) == (
        "macOS Big Sur 11.1 Beta 2-20C5061b", "macOS Big Sur 11.1 Beta 2", "11.1", True, True)
