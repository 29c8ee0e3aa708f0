"""Benchmark: `topology check` time on 4 and 7 nodes and on 8 pods × 4, against one `ssh node true`.

Needs the lab (Linux, root). For each size it brings a lab up, times (a) one plain `ssh node true` with the
same key and strict host keys, (b) the check in-process (one parallel collection pass + judgement), and
(c) the whole `python -m macfleet topology check` subprocess (adds interpreter and import start-up), then
tears the lab down. Median of --repeat runs. The last line printed is one JSON object with the figures.

    python3 -m bench.topology_check [--repeat 3] [--sizes 4,6,7,8x4]

A 7-node full mesh of Mac Studio M3 Ultra is beyond its five RDMA-capable ports (6 is the largest RDMA
mesh), so 7 is benched with `lab up --all-ports`: the port next to Ethernet carries one cable per Mac, and the
check reports those as wrong ports — the figures are for collecting and judging seven Macs.
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


def _run(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "macfleet", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def _median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_size(size: str, repeat: int, workdir: Path) -> dict:
    from macfleet.flow.topology import check_topology  # the CLI's own flow: collect once, judge per mesh
    from macfleet.inventory.load import load_inventory
    from macfleet.lab import control

    # The test-lab prefix keeps two checkouts' benches on one machine from sharing a lab.
    name = os.environ.get("MACFLEET_TEST_LAB_PREFIX", "") + "bt" + size.replace("x", "p")
    up_args = ["--pods", size] if "x" in size else ["--nodes", size]
    if "x" not in size and int(size) > 6:
        up_args.append("--all-ports")
    _run(["lab", "down", "--name", name], workdir)
    up = _run(["lab", "up", "--name", name, *up_args, "--no-exo"], workdir)
    if up.returncode != 0:
        return {"size": size, "error": (up.stderr or up.stdout).strip()[-300:]}
    try:
        inv = workdir / "inventories" / name
        fleet = load_inventory(inv)
        first = fleet.nodes[0].name
        argv = control.ssh_argv(name, first, "true")
        ssh_true = _median_s(lambda: subprocess.run(argv, check=True, capture_output=True, timeout=60), repeat)

        findings: list[int] = []

        def in_process() -> None:
            reports = check_topology(fleet, list(fleet.meshes)).reports
            findings.append(sum(len(r.findings) for r in reports))

        check_in = _median_s(in_process, repeat)
        cli_codes: list[int] = []
        cli_problems: list[str] = []

        def cli() -> None:
            p = _run(["topology", "check", "-i", str(inv), "--json"], workdir)
            cli_codes.append(p.returncode)
            if p.returncode != 0:  # say why, so a regression can be told from a loaded controller
                try:
                    found = json.loads(p.stdout).get("findings", [])
                    cli_problems.extend(f"{f.get('code')}: {f.get('message', '')[:200]}" for f in found)
                except ValueError:
                    cli_problems.append((p.stderr or p.stdout).strip()[-200:])

        check_cli = _median_s(cli, repeat)
        return {
            "size": size,
            "nodes": len(fleet.nodes),
            "meshes": len(fleet.meshes),
            "ssh_true_s": round(ssh_true, 3),
            "check_in_process_s": round(check_in, 3),
            "check_cli_s": round(check_cli, 3),
            "ratio_in_process_to_ssh_true": round(check_in / ssh_true, 2),
            "ratio_cli_to_ssh_true": round(check_cli / ssh_true, 2),
            "findings": findings[-1],
            "cli_exit_codes": sorted(set(cli_codes)),
            "cli_problems": cli_problems[:5],
        }
    finally:
        _run(["lab", "down", "--name", name], workdir)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", default="4,6,7,8x4")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="macfleet-bench-") as tmp:
        for size in args.sizes.split(","):
            r = bench_size(size.strip(), args.repeat, Path(tmp))
            print(f"{size}: {r}", file=sys.stderr)
            results.append(r)
    print(json.dumps({"bench": "topology_check", "repeat": args.repeat, "results": results}))


if __name__ == "__main__":
    main()
