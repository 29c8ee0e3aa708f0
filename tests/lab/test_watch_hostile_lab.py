"""`macfleet watch` against the 4-node lab with exo (issue 25): text a node controls in exo's runner error is
printed as text (it used to end watch with MarkupError), and an exo that hangs without dying (SIGSTOP: every
exo check unknown, which watch called healthy) is restarted once past the debounce. Restores lab4: the
faults cleared, exo running everywhere, the policy file removed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab(minutes=1.2)

POLICY = """macfleet_remediation:
  checks: [reachable, exo-running, exo-runners]
  debounce: %(debounce)d
  ladder: {exo-running: [restart-exo]}
  settle_s: 3
macfleet_probes:
  command_timeout_s: 4
"""
EVIL = "boom [/bold] x \x1b[31mred \u202eevil"


def audit(_state: Path) -> list[dict]:
    state = Path(os.environ["MACFLEET_CLUSTER_STATE_DIR"])  # the test's own (tests/conftest.py)
    return [json.loads(line) for f in state.glob("*/audit.jsonl") for line in f.read_text().splitlines()]


def test_node_text_is_data_and_a_hung_exo_is_restarted(lab4, tmp_path):
    lab = lab4
    policy = lab.inventory / "group_vars" / "all" / "watch-hostile.yml"
    env = {**os.environ, "MACFLEET_STATE_DIR": str(tmp_path / "state")}
    argv = [sys.executable, "-m", "macfleet", "watch", "-i", str(lab.inventory)]
    proc = None
    try:
        policy.write_text(POLICY % {"debounce": 1})  # exo-runners is paged, with the runner's text in the reason
        lab.fault("exo-runner-failed", "studio-3", EVIL)
        lab.wait(lambda: EVIL in lab.ssh("studio-1", "curl -s localhost:52415/state").stdout.encode().decode(
            "unicode_escape", "replace"), 30, "the runner failure in /state")
        p = subprocess.run([*argv, "--once"], cwd=lab.workdir, env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 1, p.stderr[-3000:]  # a finding
        assert "boom [/bold] x" in p.stderr and "\x1b" not in p.stderr and "\u202e" not in p.stderr
        assert "\ufffd[31mred" in p.stderr and audit(tmp_path / "state")[-1]["action"] == "page"
        lab.fault("exo-runner-failed", "studio-3", clear=True)

        policy.write_text(POLICY % {"debounce": 2})
        lab.fault("exo-hang", "studio-2")
        proc = subprocess.Popen([*argv, "--interval", "1"], cwd=lab.workdir, env=env, stderr=subprocess.PIPE,
                                text=True)
        acted = lab.wait(lambda: next((e for e in audit(tmp_path / "state") if e["action"] == "restart-exo"), None),
                         120, "watch restarting the hung exo")
        assert acted["finding"] == "exo-running" and acted["node"] == "studio-2", acted
        assert "could not tell" in acted["decision"] and acted["result"].startswith("exo restarted")
        before = [e for e in audit(tmp_path / "state") if e["time"] < acted["time"]]
        assert not any(e["decision"] == "healthy" for e in before[-2:]), before[-2:]  # a hung exo is not healthy
        lab.wait(lambda: any(e["time"] > acted["time"] and e["decision"].startswith("healthy (recovered")
                             for e in audit(tmp_path / "state")), 120, "a healthy probe after the restart")
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=60)[1]
        assert proc.returncode == 0 and "internal error" not in err, err[-3000:]
        restarts = [e for e in audit(tmp_path / "state") if e["action"] == "restart-exo"]
        assert len(restarts) == 1, restarts
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        policy.unlink(missing_ok=True)
        lab.fault("exo-hang", "studio-2", clear=True, check=False)
        lab.fault("exo-runner-failed", "studio-3", clear=True, check=False)
        for n in lab.nodes:
            lab.wait(lambda n=n: lab.ssh(n, "curl -s -m 2 localhost:52415/node_id", check=False).returncode == 0, 60,
                     f"exo answering on {n}")
