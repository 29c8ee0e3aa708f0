"""Benchmark: mean time to repair a wedged RDMA mesh with `macfleet watch`, on a 4-node lab, in one run.

A wedge is injected on one node while `watch --interval I` runs (debounce K, RDMA checks only, commands capped
at T seconds so a hung `ibv_devinfo` costs T per probe). MTTR is the time from the moment the wedge went on
(the lab's record of it) to the time of the audit log's first "healthy (recovered …)" decision. The floor is
what any healer with the same policy must pay:
K probes that each wait out the hung command (K × (I + T)) plus one simulated boot (the lab's boot time).
The last line printed is one JSON object: {"mttr_s", "floor_s", "vs_floor", ...} (target vs_floor ≤ 1.3).

    python3 -m bench.mttr [--interval 1] [--debounce 2] [--boot-seconds 5] [--command-timeout 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

POLICY = """macfleet_remediation:
  checks: [reachable, rdma]
  debounce: {debounce}
  ladder: {{rdma: [reboot]}}
macfleet_probes:
  command_timeout_s: {timeout}
"""


def _run(args: list[str], cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "macfleet", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _audit(state: Path) -> list[dict]:
    return [json.loads(line) for f in state.glob("*/audit.jsonl") for line in f.read_text().splitlines()]


def _at(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def timeline(state: Path, t0_wall: float) -> list[str]:
    """Where the time went, in seconds after the wedge was on: each audit decision after it, and each phase of
    the reboot (from the lock history beside the lock)."""
    lines = [f"{_at(e['time']) - t0_wall:7.2f}  watch: {e['action']}: {e['decision'][:90]}"
             for e in _audit(state) if _at(e["time"]) >= t0_wall]
    for f in state.glob("*/history.jsonl"):
        for entry in map(json.loads, f.read_text().splitlines()):
            lines += [f"{_at(p['at']) - t0_wall:7.2f}  reboot: {p['name']} ({p['took_s']:g} s: {p['detail'][:60]})"
                      for p in entry["phases"] if p.get("at")]
            wait = next((p for p in entry["phases"] if p["name"] == "wait for nodes" and p.get("at")), None)
            for node, w in (entry.get("nodes") or {}).items():
                if wait is not None and w.get("took_s") is not None:
                    lines.append(f"{_at(wait['at']) + w['took_s'] - t0_wall:7.2f}  reboot: {node} seen back")
                booted = re.search(r"sec = (\d+), usec = (\d+)", w.get("last_seen", ""))
                if booted:
                    at = int(booted[1]) + int(booted[2]) / 1e6
                    lines.append(f"{at - t0_wall:7.2f}  lab: {node} booted (its kern.boottime)")
            if entry.get("started"):
                lines.append(f"{_at(entry['started']) - t0_wall:7.2f}  reboot: started (lock taken)")
    return sorted(lines, key=lambda line: float(line.split()[0]))


def wedge_since(lab: str, fallback: float) -> float:
    """When the wedge went on: the lab's own record of applying it (the fault command goes on for a while
    after that, and watch's probes see the wedge from that moment); else when the fault command started."""
    root = Path(os.environ.get("MACFLEET_LAB_STATE", "/run/macfleet-lab"))
    try:
        records = json.loads((root / lab / "faults.json").read_text())
        return float(next(r["data"]["since"] for r in records if r["kind"] == "rdma-wedge"))
    except (OSError, ValueError, KeyError, StopIteration):
        return fallback


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--debounce", type=int, default=2)
    ap.add_argument("--boot-seconds", type=float, default=5.0)
    ap.add_argument("--command-timeout", type=float, default=3.0)
    ap.add_argument("--name", default=os.environ.get("MACFLEET_TEST_LAB_PREFIX", "") + "bm4")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mttr-"))
    env = {**os.environ, "MACFLEET_STATE_DIR": str(work / "state"), "MACFLEET_CLUSTER_STATE_DIR": str(work / "cluster")}
    _run(["lab", "down", "--name", a.name], work, env)
    up = _run(["lab", "up", "--name", a.name, "--nodes", "4", "--no-exo", "--boot-seconds", f"{a.boot_seconds:g}"],
              work, env)
    if up.returncode != 0:
        sys.exit(f"lab up failed: {up.stderr[-2000:]}")
    inv = work / "inventories" / a.name
    (inv / "group_vars" / "all" / "watch.yml").write_text(POLICY.format(debounce=a.debounce,
                                                                         timeout=a.command_timeout))
    watch = None
    try:
        watch = subprocess.Popen([sys.executable, "-m", "macfleet", "watch", "-i", str(inv), "--interval",
                                  f"{a.interval:g}"], cwd=work, env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not any(e["decision"] == "healthy" for e in _audit(work / "cluster")):  # watching a healthy mesh
            if time.monotonic() > deadline:
                sys.exit("watch never judged the mesh healthy")
            time.sleep(0.2)
        before_fault = time.time()
        _run(["lab", "fault", "--name", a.name, "rdma-wedge", "studio-2"], work, env)
        t0_wall = wedge_since(a.name, before_fault)
        deadline = time.monotonic() + 600
        while not (healed := [e for e in _audit(work / "cluster") if e["decision"].startswith("healthy (recovered")]):
            if time.monotonic() > deadline:
                sys.exit("not healed within 600 s")
            time.sleep(0.2)
        mttr = _at(healed[0]["time"]) - t0_wall
    finally:
        if watch is not None:
            watch.send_signal(signal.SIGTERM)
            watch.communicate(timeout=60)
        _run(["lab", "down", "--name", a.name], work, env)
    reboot = next(e for e in _audit(work / "cluster") if e["action"] == "reboot")
    floor = a.debounce * (a.interval + a.command_timeout) + a.boot_seconds
    print(f"reboot: {reboot['result']}")
    for line in timeline(work / "cluster", t0_wall):
        print(line)
    print(json.dumps({"mttr_s": round(mttr, 2), "floor_s": round(floor, 2), "vs_floor": round(mttr / floor, 2),
                      "interval_s": a.interval, "debounce": a.debounce, "boot_s": a.boot_seconds,
                      "command_timeout_s": a.command_timeout, "nodes": 4}))


if __name__ == "__main__":
    main()
