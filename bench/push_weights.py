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

While macfleet runs, the bench samples the bytes each node's management link carried (the host side of its
veth, every 50 ms) and stamps each line macfleet logs with the time since the command started; `--trace`
prints both: when the first byte of the model crossed the management link, when the last did, and how long
the link stood idle in between (every idle second is a second over the bound).

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
import threading
import time
from pathlib import Path

PREFIX = os.environ.get("MACFLEET_TEST_LAB_PREFIX", "")
LAB_STATE = Path(os.environ.get("MACFLEET_LAB_STATE", "/run/macfleet-lab"))
SAMPLE_S = 0.05
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


class _LinkTrace:
    """Bytes sent to each node over its management link (the host end of its veth), sampled every 50 ms."""

    def __init__(self, lab: str) -> None:
        nodes = json.loads((LAB_STATE / lab / "lab.json").read_text())["nodes"]
        self.files = {n: Path(f"/sys/class/net/{v['host_veth']}/statistics/tx_bytes") for n, v in nodes.items()}
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _total(self) -> int:
        return sum(int(f.read_text()) for f in self.files.values())

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic() - self._t0, self._total()))
            self._stop.wait(SAMPLE_S)

    def __enter__(self) -> _LinkTrace:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self, rate_bits_s: float) -> dict:
        """First and last sample where the links carried bulk bytes (over half the rate: SSH handshakes and
        requests stay well under it), and the time between them they carried less (idle)."""
        busy = rate_bits_s / 8 * SAMPLE_S / 2
        base = self.samples[0][1] if self.samples else 0
        active = [(t0, t1) for (t0, b0), (t1, b1) in zip(self.samples, self.samples[1:], strict=False)
                  if (b1 - b0) > busy * (t1 - t0) / SAMPLE_S]
        if not active:
            return {}
        first, last = active[0][0], active[-1][1]
        carried = sum(t1 - t0 for t0, t1 in active)
        return {"first_byte_s": round(first, 2), "last_byte_s": round(last, 2),
                "idle_between_s": round(last - first - carried, 2),
                "mb": round((self.samples[-1][1] - base) / 1e6, 1)}


def _timed_run(argv: list[str], cwd: Path, env: dict) -> tuple[float, list[str]]:
    """Run macfleet, each line it logs stamped with the seconds since it started."""
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "macfleet", *argv], cwd=cwd, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, env=env)
    assert p.stderr is not None
    lines = [f"[{time.monotonic() - t0:6.2f}] {line.rstrip()}" for line in p.stderr]
    rc = p.wait(3600)
    took = time.monotonic() - t0
    if rc != 0:
        raise SystemExit(f"macfleet {' '.join(argv)} -> {rc}\n" + "\n".join(lines))
    return took, lines


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


def bench(size: int, mb: int, work: Path, mgmt_rate: str, tb_rate: str, trace: bool = False) -> dict:
    name = f"{PREFIX}pw{size}"
    env = {**os.environ, "MACFLEET_STATE_DIR": str(work / f"state{size}"),
           "MACFLEET_CLUSTER_STATE_DIR": str(work / f"cluster{size}")}
    _macfleet(["lab", "down", "--name", name], work, env)
    _macfleet(["lab", "up", "--name", name, "--nodes", str(size), "--no-exo", "--mgmt-rate", mgmt_rate,
               "--tb-rate", tb_rate], work, env, timeout=600)
    try:
        inv = work / "inventories" / name
        src = work / f"model{size}"
        total = _make_model(src, mb)
        nodes = [f"studio-{i + 1}" for i in range(size)]
        load = os.getloadavg()[0]
        with _LinkTrace(name) as links:
            ours, lines = _timed_run(["rollout", "model", "bench-org/bench-model", "--from", str(src), "-i",
                                      str(inv)], work, env)
        sys.stderr.write("\n".join(lines) + "\n")
        naive = _naive(inv, nodes, src)
        bound = total * 8 / rate_bits(mgmt_rate)
        out = {"nodes": size, "bytes": total, "macfleet_s": round(ours, 2), "naive_s": round(naive, 2),
               "bound_s": round(bound, 2), "vs_bound": round(ours / bound, 2), "vs_naive": round(naive / ours, 2),
               "load": [round(load, 1), round(os.getloadavg()[0], 1)]}
        if trace:
            out["mgmt_link"] = links.summary(rate_bits(mgmt_rate))
        return out
    finally:
        _macfleet(["lab", "down", "--name", name], work, env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=300)
    parser.add_argument("--sizes", default="4,6")
    parser.add_argument("--mgmt-rate", default="125mbit", help="the lab's default (10 GbE : 80 Gb/s scaled)")
    parser.add_argument("--tb-rate", default="1gbit", help="the lab's default")
    parser.add_argument("--trace", action="store_true",
                        help="add when the management links carried the model, and how long they idled between")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="macfleet-bench-") as tmp:
        results = [bench(n, args.mb, Path(tmp), args.mgmt_rate, args.tb_rate, args.trace) for n in sizes]
    for r in results:
        print(json.dumps(r), file=sys.stderr)
    first = results[0]
    out = {k: first[k] for k in ("macfleet_s", "naive_s", "bound_s", "vs_bound", "vs_naive", "load")}
    out["nodes"] = first["nodes"]
    out.update(mb=args.mb, mgmt_rate=args.mgmt_rate, tb_rate=args.tb_rate)
    for r in results[1:]:
        out[f"n{r['nodes']}"] = {k: r[k] for k in ("macfleet_s", "naive_s", "bound_s", "vs_bound", "vs_naive",
                                                   "load", "mgmt_link") if k in r}
    if "mgmt_link" in first:
        out["mgmt_link"] = first["mgmt_link"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
