"""RDMA-safe stop and reboot, the RDMA ledger and exo's discovery checks, against the 4-node lab where exo runs
(real CLI, real SSH, the lab's reboots and its exo stand-in)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.lab

STALL_S = 60  # the slow shutdown: longer than the reboot's bound below


def mf(lab, env, *args, timeout=400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "macfleet", *args], cwd=lab.workdir, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_reboot_names_a_runner_that_ignores_sigterm_and_a_node_stalled_in_shutdown(lab4, tmp_path):
    lab = lab4
    env = {**os.environ, "MACFLEET_STATE_DIR": str(tmp_path / "state")}
    stubborn, stalled = lab.nodes[0], lab.nodes[1]
    policy = lab.inventory / "group_vars" / "all" / "rdmasafe.yml"
    policy.write_text("macfleet_reboot:\n  timeout_s: 25\n")
    lab.fault("runner-ignores-term", stubborn)
    lab.fault("slow-shutdown", stalled, str(STALL_S))
    try:
        p = mf(lab, env, "reboot", "-i", str(lab.inventory), "--json")
        assert p.returncode == 3, p.stdout + p.stderr[-3000:]
        out = json.loads(p.stdout)
        stop = next(ph for ph in out["phases"] if ph["name"] == "stop exo")
        assert stop["ok"] and f"did not exit when asked: {stubborn}: pid " in stop["detail"]
        assert "exo-lab-runner) ignored SIGTERM: it ended only" in stop["detail"]
        assert sum(stop["detail"].count(f"{n}: pid") for n in lab.nodes) == 1  # only the stubborn runner
        detail = out["phases"][-1]["detail"]
        assert f"{stalled} is still shutting down (it never went down" in detail
        assert f"power-cycle {stalled}: hold its power button" in detail
        assert out["nodes"][stubborn]["back"] is True and out["nodes"][stalled]["back"] is False
    finally:
        policy.unlink()
        for n in lab.nodes:
            lab.fault("slow-shutdown", n, clear=True, check=False)
            lab.wait_state(n, {"up"}, timeout=STALL_S + 120)
            lab.wait_ssh(n)
