"""Benchmark: `macfleet doctor` on 4 and 8×4 lab nodes, against two floors measured in the same run.

Floors: (a) one plain `ssh node true` (same key, strict host keys); (b) what a hand-written parallel-ssh
script pays for the same simulation: plain OpenSSH to every node at once, each running doctor's probe
commands in one shell. Doctor is timed as the whole CLI subprocess (`python -m macfleet doctor --json`),
median of --repeat runs; its own CPU time (user+sys of the child processes) is divided by the node count.
Each lab is first waited for until doctor finds it clean (32 exo stand-ins on 2 cores take a while to find each
other after `lab up`); one that never settles is reported (`"settled": false` with what doctor still said), and
still timed. The lab answers as slowly as a Mac (lab/macos/latency.py), so `softwareupdate --list` takes its tens
of seconds: doctor keeps that answer (act/probecache.py, a state dir of the bench's own), and `doctor --fresh`,
which asks it again at every pass, is timed too (`cached_vs_fresh`). Needs the lab (Linux, root). The last line
printed is one JSON object:
`{"vs_ssh_4", "vs_floor_4", "vs_floor_32", "cached_vs_fresh_4", "controller_cpu_s_per_node", "results": [...]}`.

    python3 -m bench.doctor [--repeat 3] [--sizes 4,8x4]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# How long a fresh lab may take to settle (doctor clean): a base, plus per node (exo stand-ins finding each other).
SETTLE_BASE_S = 60.0
SETTLE_PER_NODE_S = 5.0
SETTLE_POLL_S = 2.0


def _run(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    # As installed (pip compiles the bytecode): a PYTHONDONTWRITEBYTECODE in the caller's environment would
    # make every run compile macfleet from source again. The cache goes to the bench's own directory.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(cwd / "pycache")
    env["MACFLEET_STATE_DIR"] = str(cwd / "state")  # doctor's kept answers (probe cache) start empty, stay here
    return subprocess.run([sys.executable, "-m", "macfleet", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def probe_script(fleet, meshes, node: str) -> str:
    """doctor's probe commands for `node` in one shell (its pings to its peers included), each output kept
    apart (what a pssh script would run)."""
    from macfleet.flow.checks import CheckPlan

    specs = CheckPlan.of(fleet, list(meshes), None).specs(node)
    return "; ".join(f"echo @@@ {shlex.quote(s.key)}; {s.command_line}" for s in specs)


def wait_settled(inv: Path, workdir: Path, nodes: int) -> dict:
    """Poll doctor until it exits 0 (a settled lab), within SETTLE_BASE_S + SETTLE_PER_NODE_S per node."""
    started = time.monotonic()
    deadline = started + SETTLE_BASE_S + SETTLE_PER_NODE_S * nodes
    tries, last = 0, None
    while True:
        tries += 1
        last = _run(["doctor", "-i", str(inv), "--json"], workdir)
        if last.returncode == 0:
            return {"settled": True, "settle_s": round(time.monotonic() - started, 1), "settle_tries": tries}
        if time.monotonic() + SETTLE_POLL_S > deadline:
            break
        time.sleep(SETTLE_POLL_S)
    try:
        report = json.loads(last.stdout)
        left = sorted({f"{c['check']}:{c['result']}" for c in report["checks"] if c["result"] != "ok"})
    except (ValueError, KeyError, TypeError):
        left = [(last.stderr or last.stdout).strip()[-200:]]
    return {"settled": False, "settle_s": round(time.monotonic() - started, 1), "settle_tries": tries,
            "not_ok": left[:12], "exit": last.returncode}


def bench_size(size: str, repeat: int, workdir: Path) -> dict:
    from macfleet.inventory.load import load_inventory
    from macfleet.lab import control

    name = os.environ.get("MACFLEET_TEST_LAB_PREFIX", "") + "bd" + size.replace("x", "p")
    up_args = ["--pods", size] if "x" in size else ["--nodes", size]
    _run(["lab", "down", "--name", name], workdir)
    up = _run(["lab", "up", "--name", name, *up_args], workdir)
    if up.returncode != 0:
        return {"size": size, "error": (up.stderr or up.stdout).strip()[-300:]}
    try:
        inv = workdir / "inventories" / name
        fleet = load_inventory(inv)
        nodes = [n.name for n in fleet.nodes]
        settled = wait_settled(inv, workdir, len(nodes))
        load_before = os.getloadavg()[0]
        ssh_true = _median_s(lambda: subprocess.run(control.ssh_argv(name, nodes[0], "true"), check=True,
                                                    capture_output=True, timeout=60), repeat)
        scripts = {n: probe_script(fleet, list(fleet.meshes), n) for n in nodes}

        def floor() -> None:
            procs = [subprocess.Popen(control.ssh_argv(name, n, scripts[n]), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL) for n in nodes]
            for p in procs:
                p.wait(timeout=120)

        # what the simulation costs one node: all its probe commands in one ssh, alone
        one_script_s = _median_s(lambda: subprocess.run(control.ssh_argv(name, nodes[0], scripts[nodes[0]]),
                                                        capture_output=True, timeout=120), repeat)
        # the floor and doctor taken in turns, so a load that comes and goes on the machine weighs on both
        floors, doctors, codes, cpu = [], [], [], 0.0
        for _ in range(repeat):
            floors.append(_median_s(floor, 1))
            cpu0 = _children_cpu_s()
            doctors.append(_median_s(
                lambda: codes.append(_run(["doctor", "-i", str(inv), "--json"], workdir).returncode), 1))
            cpu += _children_cpu_s() - cpu0
        floor_s, doctor_s, cpu_per_run = statistics.median(floors), statistics.median(doctors), cpu / repeat
        # every pass asking softwareupdate again (`--fresh`: what each pass cost before doctor kept its answer)
        fresh_s = _median_s(lambda: _run(["doctor", "-i", str(inv), "--json", "--fresh"], workdir), repeat)
        return {"size": size, "nodes": len(nodes), **settled, "load_1m": [round(load_before, 1),
                round(os.getloadavg()[0], 1)], "ssh_true_s": round(ssh_true, 3),
                "one_node_script_s": round(one_script_s, 3), "floor_s": round(floor_s, 3),
                "doctor_s": round(doctor_s, 3), "vs_ssh": round(doctor_s / ssh_true, 2),
                "vs_floor": round(doctor_s / floor_s, 2), "doctor_fresh_s": round(fresh_s, 3),
                "cached_vs_fresh": round(doctor_s / fresh_s, 3),
                "controller_cpu_s_per_node": round(cpu_per_run / len(nodes), 3),
                "exit_codes": sorted(set(codes))}
    finally:
        _run(["lab", "down", "--name", name], workdir)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", default="4,8x4")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="macfleet-bench-") as tmp:
        for size in args.sizes.split(","):
            r = bench_size(size.strip(), args.repeat, Path(tmp))
            print(f"{size}: {r}", file=sys.stderr)
            results.append(r)
    by = {r["nodes"]: r for r in results if "nodes" in r}
    print(json.dumps({
        "bench": "doctor", "repeat": args.repeat,
        "vs_ssh_4": by.get(4, {}).get("vs_ssh"), "vs_floor_4": by.get(4, {}).get("vs_floor"),
        "vs_floor_32": by.get(32, {}).get("vs_floor"), "cached_vs_fresh_4": by.get(4, {}).get("cached_vs_fresh"),
        "controller_cpu_s_per_node": by.get(32, {}).get("controller_cpu_s_per_node"),
        "results": results,
    }))


if __name__ == "__main__":
    main()
