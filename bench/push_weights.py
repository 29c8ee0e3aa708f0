"""Benchmark: `macfleet rollout model` against the naive push and the physical bound, on 4 and 6 nodes.

Needs the lab (Linux, root). For each size it brings a lab up with the lab's default shaping (management
`125mbit`, Thunderbolt `1gbit`: the real 10 GbE : 80 Gb/s ratio), makes a model of --mb megabytes on the fly
(random bytes in 8 safetensors files), and times in one run:

- macfleet: `python -m macfleet rollout model ORG/NAME --from DIR` (the whole CLI: manifest, preflight, the
  controller → seed copy over management, the fan-out over the cables, verify and land);
- naive: the controller sends the whole directory to each node in turn over the management network (rsync over
  SSH with the same key and strict host keys, the way one would script it by hand);
- bound: size ÷ the slowest link that must carry it. The model starts on the controller, whose only way to the
  mesh is a management link, so every byte crosses one at least once: size ÷ management rate.

The last line is one JSON object: "macfleet_s", "naive_s", "bound_s", "vs_bound" (macfleet ÷ bound; target
≤ 1.2), "vs_naive" (naive ÷ macfleet; target ≥ 3 at 4 nodes), and the same figures under "n6" for 6 nodes.

    python3 -m bench.push_weights [--mb 300] [--sizes 4,6] [--mgmt-rate 125mbit] [--tb-rate 1gbit]

Every simulated Mac shares the host's CPUs: when ssh, rsync and the digests of all nodes cannot keep up with
the shaped links (a small or busy host), the figures measure the CPU, not the links. Lower both rates in the
same ratio (e.g. --mgmt-rate 20mbit --tb-rate 160mbit) to measure the links again.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PREFIX = os.environ.get("MACFLEET_TEST_LAB_PREFIX", "")
_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


def rate_bits(rate: str) -> float:
    for unit, mult in _UNITS.items():
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * mult
    raise SystemExit(f"bad rate {rate!r}: expected e.g. 125mbit")


def _macfleet(args: list[str], cwd: Path, env: dict, timeout: float = 3600) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "macfleet", *args], cwd=cwd, capture_output=True, text=True,
                       timeout=timeout, env=env)
    if p.returncode != 0:
        raise SystemExit(f"macfleet {' '.join(args)} -> {p.returncode}\n{p.stderr}")
    return p


def _make_model(d: Path, mb: int) -> int:
    d.mkdir(parents=True)
    rng = random.Random(1)
    per = mb * 1_000_000 // 8
    for i in range(8):
        (d / f"model-{i + 1:05d}-of-00008.safetensors").write_bytes(rng.randbytes(per))
    (d / "config.json").write_text('{"model_type": "bench"}\n')
    return sum(p.stat().st_size for p in d.iterdir())


def _naive(inv: Path, nodes: list[str], src: Path) -> float:
    import yaml

    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    found: dict[str, dict] = {}

    def walk(group: dict) -> None:
        found.update(group.get("hosts") or {})
        for child in (group.get("children") or {}).values():
            walk(child or {})

    for g in hosts.values():
        walk(g or {})
    shell = (f"ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile={inv / 'known_hosts'} "
             f"-i {inv / 'id_ed25519'}")
    t0 = time.monotonic()
    for n in nodes:
        h = found[n]
        dest = f"{h['ansible_user']}@{h['ansible_host']}:naive-copy/"
        subprocess.run(["rsync", "-rlt", "--mkpath", "-e", shell, f"{src}/", dest], check=True,
                       capture_output=True, timeout=3600)
    return time.monotonic() - t0


def bench(size: int, mb: int, work: Path, mgmt_rate: str, tb_rate: str) -> dict:
    name = f"{PREFIX}pw{size}"
    env = {**os.environ, "MACFLEET_STATE_DIR": str(work / f"state{size}")}
    _macfleet(["lab", "down", "--name", name], work, env)
    _macfleet(["lab", "up", "--name", name, "--nodes", str(size), "--no-exo", "--mgmt-rate", mgmt_rate,
               "--tb-rate", tb_rate], work, env, timeout=600)
    try:
        inv = work / "inventories" / name
        src = work / f"model{size}"
        total = _make_model(src, mb)
        nodes = [f"studio-{i + 1}" for i in range(size)]
        t0 = time.monotonic()
        p = _macfleet(["rollout", "model", "bench-org/bench-model", "--from", str(src), "-i", str(inv)], work, env)
        ours = time.monotonic() - t0
        sys.stderr.write(p.stderr)
        naive = _naive(inv, nodes, src)
        bound = total * 8 / rate_bits(mgmt_rate)
        return {"nodes": size, "bytes": total, "macfleet_s": round(ours, 2), "naive_s": round(naive, 2),
                "bound_s": round(bound, 2), "vs_bound": round(ours / bound, 2), "vs_naive": round(naive / ours, 2)}
    finally:
        _macfleet(["lab", "down", "--name", name], work, env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=300)
    parser.add_argument("--sizes", default="4,6")
    parser.add_argument("--mgmt-rate", default="125mbit", help="the lab's default (10 GbE : 80 Gb/s scaled)")
    parser.add_argument("--tb-rate", default="1gbit", help="the lab's default")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="macfleet-bench-") as tmp:
        results = [bench(n, args.mb, Path(tmp), args.mgmt_rate, args.tb_rate) for n in sizes]
    for r in results:
        print(json.dumps(r), file=sys.stderr)
    first = results[0]
    out = {k: first[k] for k in ("macfleet_s", "naive_s", "bound_s", "vs_bound", "vs_naive")}
    out["nodes"] = first["nodes"]
    out.update(mb=args.mb, mgmt_rate=args.mgmt_rate, tb_rate=args.tb_rate)
    for r in results[1:]:
        out[f"n{r['nodes']}"] = {k: r[k] for k in ("macfleet_s", "naive_s", "bound_s", "vs_bound", "vs_naive")}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
