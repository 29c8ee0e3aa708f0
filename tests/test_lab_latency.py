"""The lab's one table of how long each stand-in takes (lab/macos/latency.py): every stand-in has a figure with
its source or a stated guess, the table is applied in one place, and the lab's setting scales it."""

from __future__ import annotations

import time

import pytest

from macfleet.lab.macos import latency
from macfleet.lab.macos.cli import STANDINS


def test_every_standin_has_a_latency_with_a_source_or_a_stated_guess() -> None:
    covered = {k.split()[0] for k in latency.LATENCY} | set(latency.FAST)
    assert set(STANDINS) <= covered, sorted(set(STANDINS) - covered)
    for key, (seconds, source) in latency.LATENCY.items():
        assert seconds >= 0 and source, key


@pytest.mark.parametrize(("cmd", "args", "want"), [
    ("system_profiler", ["SPThunderboltDataType", "-json"], 1.0),
    ("system_profiler", ["SPHardwareDataType", "SPThunderboltDataType"], 1.3),
    ("system_profiler", ["SPHardwareDataType"], 0.3),
    ("softwareupdate", ["--list"], 20.0),
    ("softwareupdate", ["-l"], 20.0),
    ("softwareupdate", ["--install-rosetta"], 0.0),
    ("networksetup", ["-listallhardwareports"], 0.15),
    ("ibv_devinfo", ["-v"], 0.3),
    ("sysctl", ["-n", "hw.memsize"], 0.0),
])
def test_seconds(cmd: str, args: list[str], want: float) -> None:
    assert latency.seconds(cmd, args) == pytest.approx(want)


def test_the_labs_setting_scales_the_wait() -> None:
    assert latency.scale_of({}) == 1.0 and latency.scale_of({"latency": 0}) == 0.0
    assert latency.scale_of({"latency": "x"}) == 1.0 and latency.scale_of({"latency": 99}) == 1.0
    t0 = time.monotonic()
    latency.pause({"latency": 0.1}, "networksetup", ["-listallhardwareports"])  # 0.015 s
    latency.pause({"latency": 0}, "softwareupdate", ["--list"])
    assert 0.014 <= time.monotonic() - t0 < 1.0


def test_the_table_is_applied_in_one_place() -> None:
    from pathlib import Path

    lab = Path(latency.__file__).parent
    users = [p.name for p in lab.glob("*.py") if "pause(" in p.read_text() and p.name != "latency.py"]
    assert users == ["cli.py"]
