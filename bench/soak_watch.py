"""Soak: `macfleet watch` against a 4-node lab with exo for a given time, under accident and attack (issue 25).

Not part of the test suite (it takes as long as you give it). What it does, every cycle of `--cycle` seconds:
  - a flapping node: studio-2's exo is booted out (`lab fault exo-down`), then brought back by the fault's
    --clear if watch has not restarted it first;
  - a node whose exo lies: studio-3's runner fails with text that carries rich markup, ESC and a bidi override
    (`lab fault exo-runner-failed studio-3 TEXT`), which a restart does not fix; later studio-4's exo hangs
    (`lab fault exo-hang`: SIGSTOP, its API answers nothing);
  - its page: 300 idle connections held open (watch runs with a 256-descriptor limit, launchd's default), a
    client dripping its request one byte every 3 s, a client reading the answer one byte a second, and a
    scraper of /metrics every 2 s whose answers are counted;
  - its state directories (MACFLEET_STATE_DIR, MACFLEET_CLUSTER_STATE_DIR: one 4 MB tmpfs) filled to the last
    byte for half of every other cycle (ENOSPC on the state file, the audit log and the cluster lock), then freed.
At the end (SIGTERM) it checks: watch never died and said no `internal error`; the audit log parses, is in
time order, and holds exactly the decisions watch printed (none lost to the full disk, none twice); every
restart the audit log calls carried out came while a fault it can fix was on; the metrics' actions agree with
the audit log. The last line is one JSON object with the figures.

    python3 -m bench.soak_watch --minutes 20 [--cycle 120] [--name heasoak]
Needs root (the lab, the tmpfs).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

EVIL = "soak [/bold] boom \x1b[31mred \u202eevil"
POLICY = """macfleet_remediation:
  checks: [reachable, rdma, exo-running, exo-runners]
  debounce: 2
  ladder: {exo-running: [restart-exo], exo-runners: [restart-exo]}
  restart_limit: 50
  settle_s: 6
macfleet_probes:
  command_timeout_s: 4
"""
DECISION = re.compile(r"^(\S+): (none|page|restart-exo|reboot): ")


def mf(args: list[str], cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "macfleet", *args], cwd=cwd, env=env or dict(os.environ),
                          capture_output=True, text=True, timeout=timeout)


class Faults:
    """The lab's faults, switched on and off, with a timeline of when each was on (the ground truth)."""

    def __init__(self, lab: str, work: Path):
        self.lab, self.work = lab, work
        self.on: dict[tuple, float] = {}
        self.spans: list[tuple[str, str, float, float]] = []  # (kind, node, from, to)

    def set(self, kind: str, node: str, *args: str) -> None:
        if (kind, node) in self.on:
            return
        p = mf(["lab", "fault", "--name", self.lab, kind, node, *args], self.work)
        if p.returncode == 0:
            self.on[(kind, node)] = time.time()
        else:
            print(f"soak: {kind} {node}: {p.stderr.strip()[-200:]}", file=sys.stderr)

    def clear(self, kind: str, node: str) -> None:
        since = self.on.pop((kind, node), None)
        if since is None:
            return
        mf(["lab", "fault", "--name", self.lab, kind, node, "--clear"], self.work)
        self.spans.append((kind, node, since, time.time()))

    def clear_all(self) -> None:
        for kind, node in list(self.on):
            self.clear(kind, node)


class Clients:
    """Idle, dripping and slow clients on the page, and a scraper whose answers are counted."""

    def __init__(self, port: int):
        self.port = port
        self.stop = threading.Event()
        self.scrapes = {"ok": 0, "busy": 0, "failed": 0}
        self.scrape_s: list[float] = []
        self.idle_opened = 0
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._idle, self._drip, self._slow_reader,
                                                                         self._scrape)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _idle(self) -> None:
        held: list[socket.socket] = []
        while not self.stop.is_set():
            held = [s for s in held if _alive(s)]
            while len(held) < 300 and not self.stop.is_set():
                try:
                    held.append(socket.create_connection(("127.0.0.1", self.port), timeout=2))
                    self.idle_opened += 1
                except OSError:
                    break
            self.stop.wait(5)
        for s in held:
            s.close()

    def _drip(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
                for b in b"GET /metrics HTTP/1.0\r\n\r\n":
                    if self.stop.wait(3):
                        return
                    s.send(bytes([b]))

    def _slow_reader(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
                s.sendall(b"GET / HTTP/1.0\r\n\r\n")
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
                while not self.stop.wait(1) and s.recv(1):
                    pass

    def _scrape(self) -> None:
        while not self.stop.wait(2):
            t0 = time.monotonic()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                    r.read()
                self.scrapes["ok"] += 1
                self.scrape_s.append(time.monotonic() - t0)
            except urllib.error.HTTPError as exc:
                self.scrapes["busy" if exc.code == 503 else "failed"] += 1
            except OSError:
                self.scrapes["failed"] += 1


def _alive(s: socket.socket) -> bool:
    try:
        s.setblocking(False)
        data = s.recv(1, socket.MSG_PEEK)
        return data != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            s.setblocking(True)


class Disk:
    """The state directory's tmpfs, filled to the last byte and freed."""

    def __init__(self, path: Path):
        self.path = path
        self.filler = path / "filler"
        self.spans: list[tuple[float, float]] = []
        self._since: float | None = None

    def fill(self) -> None:
        if self._since is not None:
            return
        with contextlib.suppress(OSError), self.filler.open("ab") as fh:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        with contextlib.suppress(OSError), self.filler.open("ab") as fh:  # the last bytes too
            while True:
                fh.write(b"\0")
                fh.flush()
        self._since = time.time()

    def free(self) -> None:
        if self._since is None:
            return
        self.filler.unlink(missing_ok=True)
        self.spans.append((self._since, time.time()))
        self._since = None


def _sample(pid: int) -> tuple[int, int, int]:
    """(open descriptors, threads, RSS kB) of `pid`."""
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    status = Path(f"/proc/{pid}/status").read_text()
    threads = int(re.search(r"Threads:\s+(\d+)", status)[1])
    rss = int(re.search(r"VmRSS:\s+(\d+)", status)[1])
    return fds, threads, rss


def _at(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def check(audit: list[dict], stderr: str, faults: Faults, metrics: str, settle_s: float = 6) -> dict:
    """What the end of the soak must find; returns the problems found (empty: all good) and the figures."""
    problems = []
    printed = [(m[1], m[2]) for line in stderr.splitlines() if (m := DECISION.match(line))]
    logged = [(e["mesh"], e["action"]) for e in audit if e["action"] in ("none", "page", "restart-exo", "reboot")]
    if printed != logged:
        problems.append(f"the audit log holds {len(logged)} decisions, watch printed {len(printed)}")
    times = [_at(e["time"]) for e in audit]
    if any(b < a for a, b in itertools.pairwise(times)):
        problems.append("the audit log is not in time order")
    # a restart is right while exo is down, hung, or its runner failed (the first rung for each)
    fixable = [(a, b) for kind, _node, a, b in faults.spans if kind in ("exo-down", "exo-hang", "exo-runner-failed")]
    done = [e for e in audit if e["action"] == "restart-exo" and e["result"].startswith("exo restarted")]
    for e in done:
        t = _at(e["time"])
        if not any(a <= t <= b + settle_s + 15 for a, b in fixable):
            problems.append(f"a restart at {e['time']} with no fault on that it fixes: {e['decision'][:120]}")
    counted = sum(float(m[1]) for m in re.finditer(r'^macfleet_actions_total\{action="restart-exo",mesh="[^"]+"\} '
                                                   r"(\S+)$", metrics, re.M))
    if metrics and counted != len(done):
        problems.append(f"macfleet_actions_total says {counted:g} restarts, the audit log {len(done)}")
    if "internal error" in stderr or "Traceback" in stderr:
        problems.append("watch said `internal error`")
    if "\x1b" in stderr or "\u202e" in stderr:
        problems.append("a terminal control reached stderr")
    return {"problems": problems, "decisions": len(logged), "restarts_done": len(done),
            "restarts_refused": sum(e["action"] == "restart-exo" and e["result"].startswith("refused") for e in audit),
            "pages": sum(e["action"] == "page" for e in audit),
            "unknown_seen": sum("could not tell" in (e["decision"] or "") for e in audit)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--cycle", type=float, default=120.0)
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--name", default="heasoak")
    ap.add_argument("--port", type=int, default=19471)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="soak-watch-"))
    state = work / "state"
    state.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(state)], check=True)
    disk = Disk(state)
    env = {**os.environ, "MACFLEET_STATE_DIR": str(state), "MACFLEET_CLUSTER_STATE_DIR": str(state)}
    mf(["lab", "down", "--name", a.name], work)
    up = mf(["lab", "up", "--name", a.name, "--nodes", "4"], work)
    if up.returncode != 0:
        subprocess.run(["umount", str(state)], check=False)
        sys.exit(f"lab up failed: {up.stderr[-2000:]}")
    inv = work / "inventories" / a.name
    (inv / "group_vars" / "all" / "watch.yml").write_text(POLICY)
    faults = Faults(a.name, work)
    clients = Clients(a.port)
    samples: list[tuple[int, int, int]] = []
    watch = subprocess.Popen([sys.executable, "-m", "macfleet", "watch", "-i", str(inv), "--interval",
                              f"{a.interval:g}", "--listen", f"127.0.0.1:{a.port}"], cwd=work, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)))
    err_lines: list[str] = []
    reader = threading.Thread(target=lambda: err_lines.extend(iter(watch.stderr.readline, "")), daemon=True)
    reader.start()
    metrics = ""
    died = None
    t_start = time.time()
    try:
        time.sleep(5)
        clients.start()
        end = time.monotonic() + a.minutes * 60
        cycle_no = 0
        while time.monotonic() < end and died is None:
            c0 = time.monotonic()
            plan = [(0.00, lambda: faults.set("exo-down", "studio-2")),
                    (0.15, lambda odd=cycle_no % 2: disk.fill() if odd else None),
                    (0.30, lambda: faults.clear("exo-down", "studio-2")),
                    (0.35, lambda: faults.set("exo-runner-failed", "studio-3", EVIL)),
                    (0.55, lambda: faults.clear("exo-runner-failed", "studio-3")),
                    (0.60, lambda: faults.set("exo-hang", "studio-4")),
                    (0.65, lambda: disk.free()),
                    (0.85, lambda: faults.clear("exo-hang", "studio-4"))]
            for frac, action in plan:
                while time.monotonic() < c0 + frac * a.cycle and time.monotonic() < end:
                    if watch.poll() is not None:
                        died = watch.returncode
                        break
                    with contextlib.suppress(OSError):
                        samples.append(_sample(watch.pid))
                    time.sleep(1)
                if died is not None or time.monotonic() >= end:
                    break
                action()
            cycle_no += 1
        disk.free()
        faults.clear_all()
        time.sleep(a.interval * 3)
        with contextlib.suppress(OSError), urllib.request.urlopen(f"http://127.0.0.1:{a.port}/metrics",
                                                                  timeout=20) as r:
            metrics = r.read().decode()
    finally:
        clients.stop.set()
        disk.free()
        faults.clear_all()
        if watch.poll() is None:
            watch.send_signal(signal.SIGTERM)
        try:
            watch.wait(timeout=60)
        except subprocess.TimeoutExpired:
            watch.kill()
        reader.join(10)
        audit_files = list(state.glob("*/audit.jsonl"))
        audit_text = "".join(f.read_text() for f in audit_files)
        mf(["lab", "down", "--name", a.name], work)
        subprocess.run(["umount", str(state)], check=False)
    stderr = "".join(err_lines)
    (work / "watch.stderr").write_text(stderr)
    (work / "audit.jsonl").write_text(audit_text)
    audit, bad_lines = [], 0
    for line in audit_text.splitlines():
        try:
            audit.append(json.loads(line))
        except ValueError:
            bad_lines += 1
    result = check(audit, stderr, faults, metrics)
    if bad_lines:
        result["problems"].append(f"{bad_lines} audit line(s) do not parse")
    if died is not None or watch.returncode != 0:
        result["problems"].append(f"watch exited with {watch.returncode} during the soak" if died is not None else
                                  f"watch exited with {watch.returncode} at SIGTERM")
    errors = {m[1]: float(m[2]) for m in re.finditer(r'^macfleet_watch_errors_total\{kind="([^"]+)"\} (\S+)$',
                                                      metrics, re.M)}
    webhook_refused = {m[1]: float(m[2]) for m in re.finditer(r'^macfleet_http_refused_total\{reason="([^"]+)"\} '
                                                              r"(\S+)$", metrics, re.M)}
    scrape = sorted(clients.scrape_s)
    print(json.dumps({
        "minutes": round((time.time() - t_start) / 60, 1), "cycle_s": a.cycle, "interval_s": a.interval,
        **result, "fault_spans": len(faults.spans), "disk_full_spans": len(disk.spans),
        "disk_full_s": round(sum(b - a for a, b in disk.spans)), "watch_errors": errors,
        "http_refused": webhook_refused, "scrapes": clients.scrapes,
        "scrape_p50_s": round(scrape[len(scrape) // 2], 3) if scrape else None,
        "scrape_max_s": round(scrape[-1], 3) if scrape else None, "idle_connections_opened": clients.idle_opened,
        "max_fds": max((s[0] for s in samples), default=None),
        "max_threads": max((s[1] for s in samples), default=None),
        "max_rss_kb": max((s[2] for s in samples), default=None), "artifacts": str(work)}))
    sys.exit(1 if result["problems"] else 0)


if __name__ == "__main__":
    main()
