"""RDMA-safe stop and reboot, the RDMA ledger and exo's discovery checks, against the 4-node lab where exo runs
(real CLI, real SSH, the lab's reboots and its exo stand-in)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from macfleet.lab.exo.standin import Config, Pace

pytestmark = pytest.mark.lab(minutes=4.5)

STALL_S = 60  # the slow shutdown: longer than the reboot's bound below
PD, QP = "AppleThunderboltRDMAProtectionDomain", "AppleThunderboltRDMAQueuePair"  # the kernel's RDMA classes


def mf(lab, env, *args, timeout=400) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([sys.executable, "-m", "macfleet", *args], cwd=lab.workdir, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:  # what it was doing when the time ran out
        said = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        raise AssertionError(f"macfleet {args[0]} still running after {timeout} s:\n{said[-4000:]}") from None


def test_reboot_names_a_runner_that_ignores_sigterm_and_a_node_stalled_in_shutdown(lab4, tmp_path):
    lab = lab4
    env = {**os.environ, "MACFLEET_STATE_DIR": str(tmp_path / "state")}
    stubborn, stalled = lab.nodes[0], lab.nodes[1]
    policy = lab.inventory / "group_vars" / "all" / "rdmasafe.yml"
    policy.write_text("macfleet_reboot:\n  timeout_s: 25\n")
    lab.fault("runner-ignores-term", stubborn)
    lab.wait(lambda: "ignore exo-lab-runner" in lab.ssh(stubborn, "ps -A -o args=", check=False).stdout, 60,
             "the stubborn runner in place")  # the stand-in replaces its runner at its next tick
    before = lab.ssh(stalled, "sysctl -n kern.boottime").stdout
    lab.fault("slow-shutdown", stalled, str(STALL_S))
    from macfleet.constants import EXO_LABEL

    # what the stop program starts from on the node (shown if the stop says nothing of the runner)
    seen = lab.ssh(stubborn, f"launchctl print system/{EXO_LABEL} | grep pid; ps -A -o pid=,ppid=,stat=,args= | "
                             "grep -v grep | grep -e exo -e python | cut -c1-120", check=False).stdout
    print(seen)
    try:
        p = mf(lab, env, "reboot", "-i", str(lab.inventory), "--json")
        assert p.returncode == 3, p.stdout + p.stderr[-3000:]
        out = json.loads(p.stdout)
        stop = next(ph for ph in out["phases"] if ph["name"] == "stop exo")
        assert stop["ok"] and f"did not exit when asked: {stubborn}: pid " in stop["detail"], (stop, seen)
        assert "exo-lab-runner" in stop["detail"] and "ignored SIGTERM: it ended only" in stop["detail"]
        # only the stubborn runner did not exit when asked; an obeying runner is named only as late (it ended past
        # RUNNER_LATE_S: a loaded machine), and it ended well before exo had to kill the stubborn one
        said = {n: re.findall(rf"{n}: pid \d+ \(.*?\) (ignored SIGTERM: it ended only ([\d.]+) s|did not exit)",
                              stop["detail"]) for n in lab.nodes}
        [(_, stubborn_s)] = said.pop(stubborn)
        assert all(kind.startswith("ignored SIGTERM") and float(s) < float(stubborn_s)
                   for named in said.values() for kind, s in named), stop["detail"]
        detail = out["phases"][-1]["detail"]
        assert f"{stalled} is still shutting down (it never went down" in detail
        assert f"power-cycle {stalled}: hold its power button" in detail
        assert out["nodes"][stubborn]["back"] is True and out["nodes"][stalled]["back"] is False
    finally:
        policy.unlink()
        for n in lab.nodes:
            lab.fault("slow-shutdown", n, clear=True, check=False)
        # the stalled node goes down once its stall ran out: wait for its new boot, not just for SSH
        lab.wait(lambda: lab.ssh(stalled, "sysctl -n kern.boottime", check=False).stdout not in ("", before),
                 STALL_S + 120, f"{stalled} rebooted after its stall", every=1)
        for n in lab.nodes:
            lab.wait_state(n, {"up"}, timeout=120)
            lab.wait_ssh(n)


def _doctor(lab, *only: str) -> dict:
    p = lab.macfleet("doctor", "-i", str(lab.inventory), "--json", "--only", ",".join(only), check=False,
                     timeout=180)
    assert p.returncode in (0, 1), p.stdout + p.stderr
    return json.loads(p.stdout)


def _findings(report: dict, check: str) -> list[dict]:
    return [f for f in report["findings"] if f["check"] == check]


def test_leaking_runner_starts_are_flagged_before_the_device_runs_out_and_a_reboot_clears_them(lab4, tmp_path):
    lab = lab4
    node = lab.nodes[1]
    assert _findings(_doctor(lab, "rdma-ledger"), "rdma-ledger") == []
    lab.fault("rdma-leak", node, "8")  # 8 failed starts: 2 left on a device that takes 10 per boot, one held
    last: dict = {}

    def warned() -> list[dict]:
        last.update(_doctor(lab, "rdma-ledger"))
        return _findings(last, "rdma-ledger")

    try:
        lab.wait(warned, 120, "the ledger's warning")
    except AssertionError:
        log = lab.ssh(node, "grep -c 'Runner terminated' .exo/exo_log/exo.log; sysctl -n kern.boottime; tail -3 "
                            f".exo/exo_log/exo.log; ioclasscount {PD} {QP}; cat .exo/lab_rdma_leak.json",
                      check=False).stdout
        raise AssertionError(f"{[c for c in last['checks'] if c['check'] == 'rdma-ledger']}\n{log}") from None
    [f] = _findings(_doctor(lab, "rdma-ledger"), "rdma-ledger")
    assert f["node"] == node and f["severity"] == "warning" and "room for 1 more runner start" in f["message"]
    assert "reboot the mesh before the next start" in f["fix"] and "8 failed starts since boot" in f["evidence"]
    # the use is the kernel's count (the lab's ioclasscount): 8 held + the running runner on each active device
    kernel = re.search(r"kernel: (\d+) domains, (\d+) queue pairs over (\d+) active devices", f["evidence"])
    assert kernel is not None, f["evidence"]
    devices = int(kernel[3])
    assert devices == len(lab.nodes) - 1 and int(kernel[1]) == int(kernel[2]) == 9 * devices, f["evidence"]
    state = json.loads(lab.ssh(node, "curl -s http://127.0.0.1:52415/state").stdout)
    assert all("RunnerFailed" not in s for s in state["runners"].values())  # flagged while the runner still runs
    env = {**os.environ, "MACFLEET_STATE_DIR": str(tmp_path / "state")}
    p = mf(lab, env, "reboot", "-i", str(lab.inventory), "--json")
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    count = f"ioclasscount {PD} {QP}"
    lab.wait(lambda: lab.ssh(node, count, check=False).stdout == f"{PD} = {devices}, {QP} = {devices}\n", 60,
             "the kernel's count back to the running runner's")
    report = _doctor(lab, "rdma-ledger")
    assert _findings(report, "rdma-ledger") == []
    assert [c["result"] for c in report["checks"] if c["check"] == "rdma-ledger" and c["node"] == node] == ["ok"]


def forget_s(lab) -> float:
    """How long the other nodes' exo may take to forget the odd one: as long as the stand-in keeps a peer's
    record (its node_ttl_s at the lab's refresh), stretched by its pace (up to Pace.MAX times on a loaded host:
    lab/exo/standin.py), plus a doctor pass or two."""
    from macfleet.lab import control, state

    refresh_s = float(control.exo_env(state.load(lab.name))["EXO_LAB_REFRESH_S"])
    return Config(version="", refresh_s=refresh_s, env={}).node_ttl_s * Pace.MAX + 60


def test_a_split_cluster_and_a_coordinator_rank_zero_does_not_hold_are_found(lab4):
    lab = lab4
    forget = forget_s(lab)
    odd, other = lab.nodes[3], lab.nodes[2]
    lab.fault("exo-split", odd)
    try:
        last: dict = {}

        def split() -> list[dict]:
            last.update(_doctor(lab, "exo-peers", "exo-discovery"))
            return _findings(last, "exo-discovery")

        try:
            [f] = lab.wait(lambda: [f for f in split() if f["node"] == odd], forget,
                           "the split, told on the odd node", every=1)
        except AssertionError as e:  # what doctor said last, and what the odd node's exo says of its masters
            seen = lab.ssh(odd, "curl -s -m 5 http://127.0.0.1:52415/state | head -c 1500", check=False).stdout
            raise AssertionError(f"{e}\nfindings: {last.get('findings')}\nnot ok: "
                                 f"{[c for c in last.get('checks', []) if c['result'] != 'ok']}\n{odd}: {seen}"
                                 ) from None
        assert f["node"] == odd and "2 masters" in f["message"] and f"{odd} follows {odd}" in f["message"]
        assert "start it on all of them together" in f["fix"]
    finally:
        lab.fault("exo-split", odd, clear=True)
    lab.wait(lambda: not split(), forget, "one master again")
    lab.fault("exo-coordinator", other, "10.99.0.1")
    try:
        def wrong() -> list[dict]:
            return _findings(_doctor(lab, "exo-discovery"), "exo-discovery")

        found = lab.wait(wrong, 60, "the wrong rank-0 address")
        assert all("at 10.99.0.1, which it does not hold" in f["message"] for f in found)
        assert len({f["node"] for f in found}) == len(lab.nodes) - 1  # every node but rank 0
    finally:
        lab.fault("exo-coordinator", other, clear=True)
