"""`macfleet rdma status` and `rdma enable` against the lab, over real SSH: the real CLI as a subprocess, the
person at the rack played by `macfleet lab recovery NODE -- rdma_ctl enable` (only possible while the node
is off, after which it boots)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.lab.conftest import STATE_ROOT, Lab

pytestmark = pytest.mark.lab(minutes=1.4)


class Walkthrough:
    """`macfleet rdma enable` running, its stderr read as it comes, answers typed on its stdin."""

    def __init__(self, lab: Lab, *args: str):
        self.lab = lab
        self.proc = subprocess.Popen([sys.executable, "-m", "macfleet", "rdma", "enable", "-i", str(lab.inventory),
                                      *args], cwd=lab.workdir, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1)
        self.err = ""
        self.pos = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self.lock:
                self.err += line

    def expect(self, pattern: str, timeout: float = 60) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                m = re.compile(pattern).search(self.err, self.pos)
            if m:
                self.pos = m.end()
                return m
            if time.monotonic() > deadline or self.proc.poll() is not None:
                time.sleep(0.2)
                with self.lock:
                    m = re.compile(pattern).search(self.err, self.pos)
                if m:
                    self.pos = m.end()
                    return m
                raise AssertionError(f"no {pattern!r} within {timeout}s; stderr so far:\n{self.err}")
            time.sleep(0.1)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 120) -> tuple[int, str]:
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()
        rc = self.proc.wait(timeout=timeout)
        time.sleep(0.2)
        return rc, out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def recovery(lab: Lab, node: str) -> None:
    """The person at the rack: Recovery → Terminal → `rdma_ctl enable` → Restart."""
    p = lab.macfleet("lab", "recovery", "--name", lab.name, node, "--", "rdma_ctl", "enable")
    assert "RDMA enabled" in p.stdout


def status(lab: Lab) -> tuple[int, dict]:
    p = lab.macfleet("rdma", "status", "-i", str(lab.inventory), "--json", check=False, timeout=120)
    return p.returncode, json.loads(p.stdout)


def problems(payload: dict, node: str) -> list[dict]:
    return next(n for n in payload["nodes"] if n["name"] == node)["problems"]


def shut_and_enable(w: Walkthrough, lab: Lab, node: str) -> None:
    w.expect(rf"{node}: what now\?")
    w.send("y")
    w.expect(rf"{node} has shut down")
    recovery(lab, node)
    w.expect(rf"{node}: RDMA is on", timeout=90)


def test_walkthrough_enables_rdma_resumes_after_ctrl_c_and_survives_a_node_that_never_returns(make_lab) -> None:
    lab = make_lab("rw", "--nodes", "4", "--no-exo", "--boot-seconds", "1", "--tb-rate", "80mbit")
    state_file = lab.inventory / "rdma-enable.state.json"
    lab.fault("rdma-off", "studio-2")
    lab.fault("rdma-off", "studio-4")
    rc, payload = status(lab)
    assert rc == 1 and payload["ready"] is False
    assert [p["code"] for p in problems(payload, "studio-2")] == ["rdma-off"]
    assert [p["code"] for p in problems(payload, "studio-4")] == ["rdma-off"]
    # every port they take down at their peers, named at those peers
    s1 = [p["message"] for p in problems(payload, "studio-1")]
    assert len(s1) == 2 and "studio-2 has RDMA off" in s1[0] and "studio-4 has RDMA off" in s1[1]
    assert all("RDMA off" in p["message"] for n in ("studio-1", "studio-3") for p in problems(payload, n))
    down = {(n["name"], p["peer"]) for n in payload["nodes"] for p in n["ports"] if p["state"] == "down"}
    assert ("studio-1", "studio-2") in down and ("studio-3", "studio-4") in down and len(down) == 10

    # First run: identify studio-2 (and make it ping), shut it down, then Ctrl-C while it is in Recovery.
    w = Walkthrough(lab, "--timeout", "60")
    try:
        w.expect(r"\[1/2\] studio-2")
        w.expect(r"serial number\s+\S+")
        w.send("p")
        w.expect(r"studio-2: playing Ping")
        log = STATE_ROOT / lab.name / "nodes" / "studio-2" / "run" / "afplay.log"
        assert json.loads(log.read_text().splitlines()[-1])["args"] == ["/System/Library/Sounds/Ping.aiff"]
        w.expect(r"studio-2: what now\?")
        w.send("y")
        w.expect(r"Press and hold the power button")
        w.expect(r"studio-2 has shut down")
        w.proc.send_signal(signal.SIGINT)
        rc, _ = w.finish()
        assert rc == 130, w.err
    finally:
        w.kill()
    saved = json.loads(state_file.read_text())["nodes"]
    assert [(x["node"], x["phase"]) for x in saved] == [("studio-2", "away"), ("studio-4", "todo")]
    recovery(lab, "studio-2")

    # Second run resumes at studio-2 (no new shutdown), then walks studio-4, then verifies the mesh.
    w = Walkthrough(lab, "--timeout", "60", "--json")
    try:
        w.expect(r"resuming at studio-2")
        w.expect(r"studio-2: RDMA is on", timeout=90)
        assert "[1/2] studio-2" not in w.err
        shut_and_enable(w, lab, "studio-4")
        rc, out = w.finish()
    finally:
        w.kill()
    assert rc == 0, w.err
    final = json.loads(out)
    assert final["ready"] is True
    assert {p["state"] for n in final["nodes"] for p in n["ports"]} == {"active"}
    assert all(p["gid_v4"] for n in final["nodes"] for p in n["ports"])
    assert not state_file.exists()

    # A node that never comes back: a clear timeout message, and the next node is still walked through.
    lab.fault("rdma-off", "studio-2", clear=True)
    lab.fault("rdma-off", "studio-4", clear=True)
    lab.fault("rdma-off", "studio-3")
    lab.fault("rdma-off", "studio-4")
    w = Walkthrough(lab, "--timeout", "20")
    try:
        w.expect(r"studio-3: what now\?")
        w.send("y")
        w.expect(r"studio-3 has shut down")
        w.expect(r"studio-3 did not come back within 20 s: check it at the rack", timeout=60)
        shut_and_enable(w, lab, "studio-4")
        rc, out = w.finish()
    finally:
        w.kill()
        lab.macfleet("lab", "power", "--name", lab.name, "studio-3", "on", check=False)
        lab.wait_state("studio-3", {"up"}, timeout=60)
    assert rc == 3, w.err  # studio-3 is still off: the verdict is incomplete
    assert re.search(r"studio-3\s+│\s+timed-out", out) and re.search(r"studio-4\s+│\s+done", out), out


def test_a_thunderbolt_4_mac_is_told_plainly_and_not_walked_through(make_lab) -> None:
    lab = make_lab("r4", "--nodes", "2", "--model", "mac-mini-m4", "--no-exo", "--boot-seconds", "1")
    rc, payload = status(lab)
    assert rc == 1
    for n in payload["nodes"]:
        assert [p["code"] for p in n["problems"]] == ["not-tb5"]
        assert "can never do RDMA" in n["problems"][0]["message"]
        assert n["rdma_enabled"] is True  # rdma_ctl says enabled; ibv_devices stays empty
    lab.fault("rdma-off", "mini-1")
    p = subprocess.run([sys.executable, "-m", "macfleet", "rdma", "enable", "-i", str(lab.inventory)],
                       cwd=lab.workdir, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    assert "mini-1 is not walked through" in p.stderr and "can never do RDMA" in p.stderr
    assert "what now?" not in p.stderr
    assert lab.status()["mini-1"]["state"] == "up"


def test_bridge_on_and_a_wedged_rdma_stack(lab_small: Lab) -> None:
    a, b = lab_small.nodes
    try:
        lab_small.fault("bridge-on", a)
        rc, payload = status(lab_small)
        assert rc == 1
        gid = [p for p in problems(payload, a) if p["code"] == "no-ipv4-gid"]
        assert gid and "errno 22" in gid[0]["message"] and "macfleet topology apply" in gid[0]["fix"]
        assert all(p["gid_v4"] is None for n in payload["nodes"] if n["name"] == a for p in n["ports"])
    finally:
        lab_small.fault("bridge-on", a, clear=True, check=False)
    try:
        lab_small.fault("rdma-wedge", b)
        t0 = time.monotonic()
        rc, payload = status(lab_small)
        took = time.monotonic() - t0
        assert rc == 1 and took < 45, took
        wedged = [p for p in problems(payload, b) if p["code"] == "rdma-wedged"]
        assert wedged and wedged[0]["message"].startswith(f"RDMA wedged on {b}")
        assert {p["state"] for n in payload["nodes"] if n["name"] == b for p in n["ports"]} == {"unknown"}
    finally:
        lab_small.fault("rdma-wedge", b, clear=True, check=False)
