"""The exo stand-in's runner: a child process, stopped as exo stops its runners, and the RDMA resources each
failed start leaves held until the node reboots.

Sources (docs/lab.md lists the guesses):
- exo runs each runner as a child process (exo b5375f8 src/exo/worker/runner/supervisor.py:203-243). On
  SIGTERM exo cancels everything (src/exo/main.py:157-178) and stops each runner: it waits 3 s for it to end,
  then SIGTERM and 5 s, then SIGTERM again every 2 s up to 10 attempts, then SIGKILL, logging
  "Child process didn't respond to SIGTERM, killing" (src/exo/utils/async_process.py:32-36,206-235).
- Fault `runnerIgnoresTerm` (lab fault runner-ignores-term): the runner ignores SIGTERM; a runner stuck in the
  RDMA driver behaves so (issue 28); GUESS for the way it comes about.
- Each failed start is logged `Runner terminated with exitcode=1` (src/exo/worker/runner/supervisor.py:375-401)
  and leaves one protection domain and one queue pair held on the node's devices until it reboots (issue 28:
  "each failed runner start can leak some until the holders are reaped"; how many: GUESS). A device takes
  max_qp - 1 = 10 queue pairs (ml-explore/mlx#4209: the 11th ibv_create_qp fails with errno 16; the lab's
  ibv_devinfo -v prints max_qp 11): once 10 are held, every start fails with JACCL's EBUSY message.
- The kernel's count of them (`ioclasscount AppleThunderboltRDMAProtectionDomain AppleThunderboltRDMAQueuePair`,
  dryvist/nix-ai docs/runbooks/cluster-link-truths.md) is the lab's `ioclasscount` stand-in's
  (lab/macos/rdma.py): the held ones and the running runner's, one of each per active device (GUESS).
- Fault `failStarts` N (lab fault rdma-leak): the next N runner starts fail, one every FAILED_START_S (exo
  notices a dead runner within 5 s: supervisor.py:357-362).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

JOIN_S, TERM_S, RETRY_S, ATTEMPTS = 3.0, 5.0, 2.0, 10  # exo's AsyncProcess (async_process.py:32-36)
CAPACITY = 10  # starts a device takes per boot (max_qp 11, the 11th queue pair refused)
FAILED_START_S = 5.0
LEAK_FILE = "lab_rdma_leak.json"  # in exo's home (~/.exo): Leak below; the lab's ioclasscount reads it
TERMINATED = "Runner terminated with exitcode=1"
EBUSY = "[jaccl] Creating the queue pair failed with errno 16"  # samples exo__mlx-pr-4209_queue_pair_limit_output.txt
STOP_WHERE = "exo.utils.async_process:_terminate_if_still_alive:234"
# The child: `exo-lab-runner` in its argv names it in ps; it holds nothing but its place, and ends once its exo is
# gone, as a runner whose channel to exo closed does (exo b5375f8 src/exo/worker/runner/bootstrap.py:90-91).
_CHILD = ("# exo-lab-runner\n"
          "import os, signal, sys, time\n"
          "if sys.argv[1] == 'ignore':\n"
          "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
          "parent = os.getppid()\n"
          "while os.getppid() == parent:\n"
          "    time.sleep(0.5)\n")


def _mode(faults: dict) -> str:
    return "ignore" if faults.get("runnerIgnoresTerm") else "obey"


def start(faults: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _CHILD, _mode(faults), "exo-lab-runner"], stdin=subprocess.DEVNULL)


def ensure(p: subprocess.Popen, faults: dict, log) -> subprocess.Popen:
    """The runner as the fault overlay wants it now: a runner that should ignore SIGTERM and does not (or the
    reverse) is replaced, as exo starts a new runner for its instance."""
    if p.args[3] == _mode(faults) and p.poll() is None:
        return p
    stop(p, log)
    return start(faults)


def _wait(p: subprocess.Popen, seconds: float) -> bool:
    try:
        p.wait(timeout=seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


def stop(p: subprocess.Popen, log) -> None:
    """As exo stops a runner: wait, SIGTERM, retries, then SIGKILL."""
    if _wait(p, JOIN_S):
        return
    for attempt in range(1, ATTEMPTS + 1):
        p.send_signal(signal.SIGTERM)
        if _wait(p, TERM_S if attempt == 1 else RETRY_S):
            return
    log.error(STOP_WHERE, "Child process didn't respond to SIGTERM, killing")
    p.kill()
    _wait(p, 5.0)


class Leak:
    """Failed starts since this boot, and the runner holding its share now, kept in a file beside exo's (a new boot
    time starts over). The lab's `ioclasscount` stand-in counts the kernel's protection domains and queue pairs
    from it (lab/macos/rdma.py): {"boot": `sysctl -n kern.boottime`, "failed": N, "runner": the pid of the runner
    while it holds its resources (its state is not RunnerFailed), else null}."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self, boot: str) -> dict:
        try:
            data = json.loads(self.path.read_text())
            if data.get("boot") == boot:
                return {"boot": boot, "failed": int(data["failed"]), "runner": data.get("runner")}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        return {"boot": boot, "failed": 0, "runner": None}

    def _write(self, data: dict) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")  # whole, for the reader
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)

    def held(self, boot: str) -> int:
        return self._read(boot)["failed"]

    def failed_start(self, boot: str) -> int:
        data = self._read(boot)
        data["failed"] += 1
        self._write(data)
        return data["failed"]

    def holding(self, boot: str, pid: int | None) -> None:
        """Note the runner that holds its resources now (None: none does); written only when it changes."""
        data = self._read(boot)
        if data["runner"] != pid or not self.path.exists():
            data["runner"] = pid
            self._write(data)


class Starts:
    """The `failStarts` fault: how many failed starts are still due, one every FAILED_START_S."""

    def __init__(self) -> None:
        self.done_for: object = None
        self.done = 0
        self.last = 0.0

    def due(self, faults: dict, now: float | None = None) -> bool:
        want = faults.get("failStarts")
        if not isinstance(want, int) or want <= 0:
            self.done_for, self.done = None, 0
            return False
        key = (want, faults.get("failStartsId"))
        if key != self.done_for:
            self.done_for, self.done, self.last = key, 0, 0.0
        now = time.monotonic() if now is None else now
        if self.done >= want or now - self.last < FAILED_START_S:
            return False
        self.done += 1
        self.last = now
        return True
