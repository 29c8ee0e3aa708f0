"""Benchmark: how long `macfleet --help` and each group's `--help` take, as a user's shell runs them.

Each command is run --repeat times as a subprocess (`python -m macfleet ... --help`), interleaved with the
interpreter's own start-up (`python -c pass`) so a loaded machine slows both alike. Printed per command: the
fastest and the median wall time, the median as a multiple of the bare interpreter's median (the ratio holds
across machines and loads; the absolute figure is what a user waits), and the fastest CPU time (user + system,
from the child's rusage): on a machine shared with other work the wall time waits for a core, the CPU time does
not, and a help is one single-threaded process, so on an idle machine its wall time is about its CPU time. The
target (issue 30) is under 0.3 s for each: met when the fastest wall time is, or, on a loaded machine (load
average above the cores), when the fastest CPU time is. The last line printed is one JSON object with the
figures.

    python3 -m bench.cli_help [--repeat 7] [--groups doctor,topology]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 0.3
ROOT = Path(__file__).resolve().parent.parent


def _time(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0  # reaped here: Popen must not wait for it again
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> dict:
    from macfleet.cli.app import GROUPS  # light: the table only

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--groups", default=",".join(name for name, _, _ in GROUPS))
    args = parser.parse_args(argv)
    runs: dict[str, list[str]] = {"macfleet --help": ["--help"]}
    runs.update({f"macfleet {g} --help": [g, "--help"] for g in args.groups.split(",") if g})
    bare: list[float] = []
    times: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeat):
        for name, words in runs.items():  # interleaved: a burst of load lands on every command alike
            bare.append(_time([sys.executable, "-c", "pass"])[0])
            wall, used = _time([sys.executable, "-m", "macfleet", *words])
            times[name].append(wall)
            cpu[name].append(used)
    bare_med = statistics.median(bare)
    loaded = os.getloadavg()[0] > (os.cpu_count() or 1)
    rows = {}
    print(f"python -c pass: median {bare_med:.3f} s, fastest {min(bare):.3f} s ({len(bare)} runs)"
          + (f"; load average {os.getloadavg()[0]:.1f}: judged on CPU time" if loaded else ""))
    for name, ts in times.items():
        med = statistics.median(ts)
        under = min(cpu[name] if loaded else ts) < TARGET_S
        rows[name] = {"fastest_s": round(min(ts), 4), "median_s": round(med, 4),
                      "fastest_cpu_s": round(min(cpu[name]), 4), "x_interpreter": round(med / bare_med, 2),
                      "under_target": under}
        print(f"{'ok ' if under else 'SLOW'} {name:32} fastest {min(ts):.3f} s  median {med:.3f} s  "
              f"{med / bare_med:5.1f}x python  cpu {min(cpu[name]):.3f} s")
    result = {"target_s": TARGET_S, "interpreter_median_s": round(bare_med, 4), "repeat": args.repeat,
              "load_average": os.getloadavg()[0], "judged_on": "cpu" if loaded else "wall", "commands": rows}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
