"""Benchmark: `macfleet bootstrap` re-run time with nothing to change, on 1, 4 and 8 pods × 4 nodes.

Needs the lab (Linux, root). For each size it brings a prepared lab up (what bootstrap leaves, so a run has
nothing to change), waits until doctor finds it clean (as bench.doctor does), runs `python -m macfleet
bootstrap --non-interactive --json` once to settle, then times --repeat more runs (median), each followed by
the floors, and records the `changed` total of the last one. Ratios are taken within this one
run, so the machine's load cancels out. The last line printed is one JSON object:
`{"rerun_4_vs_1": …, "rerun_32_vs_4": …, "changed": …, "floor_4_vs_1": …, "floor_32_vs_4": …,
"floor_least_4_vs_1": …, "results": […]}`
(targets: rerun_4_vs_1 ≤ 1.3, changed 0).

The floor: on the same lab, after each re-run, plain ansible-playbook runs a playbook of the same shape
as a re-run with nothing to change: FLOOR_REMOTE tasks that run `true` on every node through the login shell
(as bootstrap's reads do) and FLOOR_LOCAL tasks that only work on the controller (as its checks, facts and
argument-spec validations do). Every simulated Mac's SSH and shell run on this host's cores, so this is how
far Ansible itself scales here with the node count for that shape; on real Macs each node brings its own CPU.
A re-run ratio near the floor's is the host's and Ansible's, not bootstrap's. The least floor
(`floor_least_4_vs_1`) is one `true` per node and nothing else: how a playbook of the smallest shape scales.
Both floors load macfleet's callback plugins, as bootstrap's playbook does.

    python3 -m bench.bootstrap [--repeat 3] [--sizes 1,4,8x4] [--no-floor]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.doctor import wait_settled
from macfleet.inventory.load import load_inventory

REPO = Path(__file__).resolve().parents[1]
# A re-run with nothing to change: the first play's one read of each Mac, then the probe's answer kept as a
# fact and the verdict, both on the controller.
FLOOR_REMOTE = 1
FLOOR_LOCAL = 2


def _macfleet(args: list[str], cwd: Path, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "macfleet", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def bench_size(size: str, repeat: int, workdir: Path, floor: bool = True) -> dict:
    name = "bpb" + size.replace("x", "p")
    up_args = ["--pods", size] if "x" in size else ["--nodes", size]
    _macfleet(["lab", "down", "--name", name], workdir)
    up = _macfleet(["lab", "up", "--name", name, *up_args], workdir)
    if up.returncode != 0:
        return {"size": size, "error": (up.stderr or up.stdout).strip()[-300:]}
    inv = workdir / "inventories" / name
    argv = ["bootstrap", "-i", str(inv), "--non-interactive", "--json"]
    try:
        # a mesh being re-run is a settled one: wait, as bench.doctor does, until the exo stand-ins have found
        # each other (on these shared cores they otherwise weigh on the larger lab's first runs)
        settled = wait_settled(inv, workdir, len(load_inventory(inv).nodes))
        settle = _macfleet(argv, workdir)
        times: list[float] = []
        floors: list[float | None] = []
        least: list[float | None] = []
        last: dict = {}
        codes: list[int] = []
        # re-runs and floors in turns, so a load that comes and goes on the machine weighs on both
        for _ in range(repeat):
            t0 = time.perf_counter()
            p = _macfleet(argv, workdir)
            times.append(time.perf_counter() - t0)
            codes.append(p.returncode)
            try:
                last = json.loads(p.stdout)
            except json.JSONDecodeError:
                last = {"error": p.stderr.strip()[-300:]}
            if floor:
                floors.append(_floor(inv, workdir, FLOOR_REMOTE, FLOOR_LOCAL))
                least.append(_floor(inv, workdir, 1, 0))
        return {
            "size": size,
            "floor_s": _median(floors),
            "floor_least_s": _median(least),
            "nodes": len(last.get("nodes", {})),
            **settled,
            "settle_exit": settle.returncode,
            "rerun_s": round(statistics.median(times), 2),
            "changed": last.get("changed"),
            "exit_codes": sorted(set(codes)),
        }
    finally:
        _macfleet(["lab", "down", "--name", name], workdir)


def _median(times: list[float | None]) -> float | None:
    return round(statistics.median(times), 2) if times and None not in times else None  # type: ignore[type-var]


def _floor(inv: Path, workdir: Path, n_remote: int, n_local: int) -> float | None:
    """One run of a plain ansible-playbook of n_remote `true` commands and n_local controller-only tasks."""
    book = workdir / "floor.yml"
    remote = "".join(f"    - name: Run true ({i}).\n      ansible.builtin.raw: \"true\"\n      changed_when: false\n"
                     for i in range(n_remote))
    local = "".join(f"    - name: Say ok ({i}).\n      ansible.builtin.debug:\n        msg: ok\n"
                    for i in range(n_local))
    tasks = remote + local
    book.write_text(f"- name: Floor.\n  hosts: macfleet\n  gather_facts: false\n  tasks:\n{tasks}")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_CALLBACK_PLUGINS": str(REPO / "playbooks" / "callback_plugins")}
    t0 = time.perf_counter()
    p = subprocess.run(["ansible-playbook", "-i", str(inv), str(book)], cwd=workdir, capture_output=True,
                       text=True, timeout=1800, env=env)
    return time.perf_counter() - t0 if p.returncode == 0 else None


def _ratio(results: dict[str, dict], a: str, b: str, key: str = "rerun_s") -> float | None:
    ta, tb = results.get(a, {}).get(key), results.get(b, {}).get(key)
    return round(ta / tb, 2) if ta and tb else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", default="1,4,8x4")
    ap.add_argument("--no-floor", action="store_true", help="skip the plain-Ansible floor (it takes as long again)")
    args = ap.parse_args()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="macfleet-bench-") as tmp:
        for size in args.sizes.split(","):
            r = bench_size(size.strip(), args.repeat, Path(tmp), floor=not args.no_floor)
            print(f"{size}: {r}", file=sys.stderr)
            results[size.strip()] = r
    changed = [r.get("changed") for r in results.values()]
    print(json.dumps({
        "bench": "bootstrap",
        "repeat": args.repeat,
        "rerun_4_vs_1": _ratio(results, "4", "1"),
        "rerun_32_vs_4": _ratio(results, "8x4", "4"),
        "changed": sum(c for c in changed if c is not None) if None not in changed else None,
        "floor_4_vs_1": _ratio(results, "4", "1", "floor_s"),
        "floor_32_vs_4": _ratio(results, "8x4", "4", "floor_s"),
        "floor_least_4_vs_1": _ratio(results, "4", "1", "floor_least_s"),
        "results": list(results.values()),
    }))


if __name__ == "__main__":
    main()
