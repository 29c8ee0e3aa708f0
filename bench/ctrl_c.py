"""Benchmark: how long `doctor` and `topology check` take to end after Ctrl-C while a node hangs.

The unit test (tests/collect/test_gather.py, test_ctrl_c_with_a_hung_node_returns_at_once) proves that Ctrl-C
ends the pass (exit 130, "cancelled") long before the hung node's connect timeout, without a wall-time assert;
the figure belongs here. Needs the lab (Linux, root): a 2-node lab, `studio-2` hung (`lab fault hang`: it
answers nothing, so its connection waits out `macfleet_ssh.connect_timeout_s`, set to the most the inventory
allows), each command started, Ctrl-C pressed once the pass has begun, and the time from the press to its exit
taken. Median of --repeat runs per command. The last line printed is one JSON object with the figures.

    python3 -m bench.ctrl_c [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = ("doctor", "topology check")


def _run(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "macfleet", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def press_ctrl_c(command: str, inventory: Path, cwd: Path) -> float:
    """Seconds from Ctrl-C (pressed once the pass has begun) to the command's exit; exit 130 checked."""
    proc = subprocess.Popen([sys.executable, "-m", "macfleet", *command.split(), "-i", str(inventory)], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while "collecting" not in (line := proc.stderr.readline()) and "probing" not in line:
            if not line or time.monotonic() > deadline:
                raise SystemExit(f"{command}: the pass did not start")
        time.sleep(1.0)  # the healthy node answered, the hung one's connection is open: the wait being measured
        pressed = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=300)
        took = time.monotonic() - pressed
    finally:
        proc.kill()
    if proc.returncode != 130:
        raise SystemExit(f"{command}: exit {proc.returncode} after Ctrl-C, expected 130")
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--name", default=os.environ.get("MACFLEET_TEST_LAB_PREFIX", "") + "bcc")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ctrl-c-"))
    _run(["lab", "down", "--name", a.name], work)
    up = _run(["lab", "up", "--name", a.name, "--nodes", "2", "--no-exo", "--boot-seconds", "1"], work)
    if up.returncode != 0:
        sys.exit(f"lab up failed: {up.stderr[-2000:]}")
    inv = work / "inventories" / a.name
    (inv / "group_vars" / "all" / "bench-ctrl-c.yml").write_text("macfleet_ssh:\n  connect_timeout_s: 600\n")
    figures: dict[str, float] = {}
    try:
        _run(["lab", "fault", "--name", a.name, "hang", "studio-2"], work)
        for command in COMMANDS:
            figures[command] = round(statistics.median(press_ctrl_c(command, inv, work) for _ in range(a.repeat)), 2)
            print(f"{command}: {figures[command]} s from Ctrl-C to exit (median of {a.repeat})")
    finally:
        _run(["lab", "down", "--name", a.name], work)
    print(json.dumps({"ctrl_c_to_exit_s": figures, "hung_connect_timeout_s": 600, "repeat": a.repeat}))


if __name__ == "__main__":
    main()
