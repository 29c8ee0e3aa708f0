"""Maintenance records and durations (judge/maintenance.py), as tables."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from macfleet.judge import maintenance as m

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "seconds"), [("2h", 7200), ("90m", 5400), ("1h30m", 5400), ("45s", 45),
                                               ("1d", 86400), ("1.5h", 5400), (" 2H ", 7200)])
def test_durations(text, seconds):
    assert m.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2", "2x", "h", "-1h", "0m", "8d", "nan", "1h 30m", "2h2"])
def test_bad_durations_say_what_is_expected(text):
    with pytest.raises(ValueError, match="expected"):
        m.parse_duration(text)


def test_a_persons_maintenance_ends_by_itself():
    rec = m.person("mesh1", "recabling", "ana", 7200, T0)
    assert m.in_force(rec, T0 + timedelta(hours=1)) and not m.in_force(rec, T0 + timedelta(hours=2))
    assert "by ana" in m.describe(rec, T0) and "2 h 00 min left" in m.describe(rec, T0)


def test_a_commands_maintenance_ends_with_its_process():
    rec = m.for_command("mesh1", "reboot", "rdma wedged", 123, "ctl", "linux:x:1", T0)
    assert m.in_force(rec, T0) and not m.in_force(rec, T0, command_alive=False)
    assert not m.in_force(rec, T0 + timedelta(seconds=m.COMMAND_BOUND_S))


@pytest.mark.parametrize("data", [[], {"mesh": "m"}, {**m.person("m", "r", "a", 60, T0).to_json(), "x": 1},
                                  {**m.person("m", "r", "a", 60, T0).to_json(), "until": "2026-11-30T03:00:00"},
                                  {**m.person("m", "r", "a", 60, T0).to_json(), "pid": "one"}])
def test_a_damaged_record_is_not_read_as_none(data):
    with pytest.raises(ValueError):
        m.Maintenance.from_json(data)


def test_reason_is_one_printable_line():
    assert m.check_reason("  recabling studio-3 ") == "recabling studio-3"
    for bad in ("", "a\nb", "x" * 301, "\x1b[31m"):
        with pytest.raises(ValueError):
            m.check_reason(bad)


@pytest.mark.parametrize("bad", [
    {"pid": 99999999999999999999}, {"pid": -1}, {"pid": 2**40},
    {"until": "2026-12-30T00:00:00+00:00"},  # a person's, for four weeks: longer than any maintenance
])
def test_a_record_out_of_range_is_damaged_not_a_crash(bad: dict) -> None:
    """hostile: a huge pid in the shared file crashed every reader (OverflowError in os.kill); -1 read as alive."""
    good = {"mesh": "mesh1", "reason": "r", "by": "ana", "started": "2026-12-02T00:00:00+00:00",
            "until": "2026-12-02T02:00:00+00:00"}
    with pytest.raises(ValueError, match="not a maintenance record"):
        m.Maintenance.from_json({**good, **bad, **({"command": "reboot"} if "pid" in bad else {})})


def test_a_duration_names_each_unit_once() -> None:
    with pytest.raises(ValueError, match="expected a duration"):
        m.parse_duration("1h1h")
