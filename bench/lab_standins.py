"""Benchmark: what one call of a lab stand-in (the simulated Mac's `pmset`, `ifconfig`, ...) costs on its node.

Brings a small prepared lab up (2 nodes, no exo stand-in, so nothing else runs on the nodes) and, in ONE ssh
session to its first node, runs each command doctor runs (every check's probes, that node's pings to its peers
included, as bench/doctor.py's `probe_script` does) and bootstrap's probe reads, --repeat times each, timing every
call with bash's $EPOCHREALTIME (the lab's `date` is a BSD-date stand-in, without %N) and its CPU with bash's `times`
(user+sys of the children), in rounds: every command once per round. The floor is the interpreter every
stand-in runs on, `python3.11 -S -E -c pass`, timed the same way in the same session. Prints per-command
medians in ms; the mean ratio to the floor is taken over the stand-in commands only (curl and tail are the
host's own). Needs the lab (Linux, root). The last line printed is one JSON object:
`{"bench": "lab_standins", "per_call_ms": {...}, "cpu_ms": {...}, "python_start_ms": x,
"mean_vs_python_start": r, "script_ms": total}`.

    python3 -m bench.lab_standins [--repeat 20] [--nodes 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLOOR = "python-start"
# bootstrap's probe role reads these besides doctor's (the roles' <role>_reads; fdesetup, pmset, pfctl, ifconfig
# and -listnetworkserviceorder are doctor's too)
BOOTSTRAP_READS = (
    ("launchctl-print", "launchctl print system/io.exo.exo"),
    ("sysctl-n", "sysctl -n hw.memsize iogpu.wired_limit_mb"),
    ("brew-list", "/opt/homebrew/bin/brew list --versions rsync iperf3"),
    ("networksetup-getinfo", "networksetup -getinfo 'Thunderbolt 1'"),
    ("mdutil", "mdutil -s ~/.exo/models"),
    ("xcode-select", "xcode-select -p"),
)


def _run(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "macfleet", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def commands(fleet, node: str) -> list[tuple[str, str]]:
    """(key, shell line) of what doctor runs on `node` (its pings to its peers included), then bootstrap's
    probe reads."""
    from macfleet.flow.checks import CheckPlan

    specs = CheckPlan.of(fleet, list(fleet.meshes), None).specs(node)
    seen, out = set(), []
    for s in specs:
        key = s.key if s.key not in seen else f"{s.key}:{s.variant}"
        seen.add(key)
        out.append((key, s.command_line))
    return out + list(BOOTSTRAP_READS)


def timing_script(cmds: list[tuple[str, str]], python: str, repeat: int) -> str:
    """A bash script that runs every command once per round, --repeat rounds (so a load that comes and goes on
    the machine weighs on all commands alike), printing `T key t0 t1` after each call, then bash's `times` (its
    own user and sys, then its children's: cumulative, so a call's CPU is the difference to the previous
    reading); the commands' outputs go to /dev/null. `times` runs in this shell: a $(times) would report its
    subshell's children."""
    lines = ["times"]
    calls = [(FLOOR, f"{python} -S -E -c pass"), *cmds]
    body = "".join(f"t0=$EPOCHREALTIME; {{ {line} ; }} >/dev/null 2>&1 </dev/null; t1=$EPOCHREALTIME; "
                   f"echo T {shlex.quote(key)} $t0 $t1; times\n" for key, line in calls)
    lines.append(f"for ((i = 0; i < {repeat}; i++)); do\n{body}done")
    return "\n".join(lines) + "\n"


def _seconds(bash_time: str) -> float:
    """`0m0.123s` (bash's `times`) in s."""
    minutes, _, rest = bash_time.partition("m")
    return int(minutes) * 60 + float(rest.rstrip("s"))


def _children_s(times_line: str) -> float:
    user, system = times_line.split()
    return _seconds(user) + _seconds(system)


def parse(out: str) -> tuple[dict[str, float], dict[str, float]]:
    """Per-command median wall ms and mean CPU ms per call (user+sys), from the script's output."""
    walls: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    rows = out.splitlines()
    last = _children_s(rows[1])
    for i, row in enumerate(rows):
        parts = row.split()
        if len(parts) == 4 and parts[0] == "T" and i + 2 < len(rows):
            walls.setdefault(parts[1], []).append((float(parts[3]) - float(parts[2])) * 1000)
            now = _children_s(rows[i + 2])
            cpus.setdefault(parts[1], []).append((now - last) * 1000)
            last = now
    wall = {k: round(statistics.median(v), 2) for k, v in walls.items()}
    cpu = {k: round(statistics.mean(v), 2) for k, v in cpus.items()}
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--nodes", type=int, default=2)
    args = ap.parse_args()
    from macfleet.inventory.load import load_inventory
    from macfleet.lab import control
    from macfleet.lab.macos.cli import STANDINS
    from macfleet.lab.state import NODE_PYTHON

    name = os.environ.get("MACFLEET_TEST_LAB_PREFIX", "") + "bs"
    with tempfile.TemporaryDirectory(prefix="macfleet-bench-") as tmp:
        workdir = Path(tmp)
        _run(["lab", "down", "--name", name], workdir)
        # --latency 0: this bench weighs what a stand-in's own code costs, not the wait a Mac's answer takes
        # (lab/macos/latency.py), which would swamp it
        up = _run(["lab", "up", "--name", name, "--nodes", str(args.nodes), "--no-exo", "--latency", "0"], workdir)
        if up.returncode != 0:
            sys.exit(f"lab up failed: {(up.stderr or up.stdout).strip()[-300:]}")
        try:
            fleet = load_inventory(workdir / "inventories" / name)
            node = fleet.nodes[0].name
            cmds = commands(fleet, node)
            script = timing_script(cmds, NODE_PYTHON, args.repeat)
            t0 = time.perf_counter()
            p = subprocess.run(control.ssh_argv(name, node, f"bash -c {shlex.quote(script)}"), capture_output=True,
                               text=True, timeout=60 + 10 * args.repeat * len(cmds))
            script_ms = (time.perf_counter() - t0) * 1000
        finally:
            _run(["lab", "down", "--name", name], workdir)
    if p.returncode != 0:
        sys.exit(f"timing script failed (exit {p.returncode}): {p.stderr.strip()[-300:]}")
    wall, cpu = parse(p.stdout)
    floor = wall.pop(FLOOR)
    floor_cpu = cpu.pop(FLOOR, None)
    for key, line in cmds:
        print(f"{key:24} {wall.get(key, float('nan')):8.2f} ms  cpu {cpu.get(key, float('nan')):7.2f} ms  {line}")
    print(f"{'python3.11 -S -E -c pass':24} {floor:8.2f} ms  cpu {floor_cpu or float('nan'):7.2f} ms")
    words = {key: os.path.basename(shlex.split(line)[2 if line.startswith("sudo -n ") else 0]) for key, line in cmds}
    standin_keys = [k for k, w in words.items() if w in STANDINS and k in wall]
    ratio = statistics.mean(wall[k] for k in standin_keys) / floor
    print(json.dumps({
        "bench": "lab_standins", "repeat": args.repeat, "load_1m": round(os.getloadavg()[0], 1),
        "per_call_ms": wall, "cpu_ms": cpu, "python_start_ms": floor, "python_start_cpu_ms": floor_cpu,
        "mean_standin_ms": round(statistics.mean(wall[k] for k in standin_keys), 2),
        "mean_vs_python_start": round(ratio, 2), "script_ms": round(script_ms, 1),
    }))


if __name__ == "__main__":
    main()
