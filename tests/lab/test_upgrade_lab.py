"""`macfleet upgrade` against a 4-node lab with exo, over real SSH (issue 29 item 4): --check changes nothing; an
update offered to every node is installed one node at a time with exo kept stopped until all four run the target; a
killed upgrade is resumed by the next run; an install that fails half-way stops the upgrade with the node on its
build; an update that switches RDMA off stops there and names the walkthrough.

The lab's softwareupdate (lab/macos/devtools.py) installs with the admin's credentials only (--user, --stdinpass)
and restarts into the new build; the offers take 6 s each (`update-offered ... 6`: a test's choice, not a Mac's)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.lab.conftest import STATE_ROOT, Lab

pytestmark = pytest.mark.lab(minutes=3.2)


def _target(lab: Lab, build: str) -> None:
    gv = lab.inventory / "group_vars" / "all" / "macfleet.yml"
    data = yaml.safe_load(gv.read_text())
    data["macfleet_macos"] = {"build": build}
    gv.write_text(yaml.safe_dump(data))


def _build(lab: Lab, node: str) -> str:
    return lab.node_state(node, "persist")["os"]["build"]


def _exo_runs(lab: Lab, node: str) -> bool:
    p = lab.ssh(node, "launchctl print system/org.macfleet.exo", check=False)
    return p.returncode == 0 and "state = running" in p.stdout


def _upgrade(lab: Lab, env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "macfleet", "upgrade", "-i", str(lab.inventory), "--json", *args],
                            cwd=lab.workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})


def _done(p: subprocess.Popen, timeout: float = 600) -> tuple[int, dict]:
    out, err = p.communicate(timeout=timeout)
    try:
        return p.returncode, json.loads(out)
    except json.JSONDecodeError:
        raise AssertionError(f"upgrade -> {p.returncode}\n{out}\n{err}") from None


def test_upgrade_one_node_at_a_time_check_resume_and_rdma_off(make_lab, tmp_path: Path) -> None:
    lab = make_lab("ug", "--nodes", "4", "--boot-seconds", "1", "--tb-rate", "80mbit")
    n1, *rest = lab.nodes
    env = {"MACFLEET_STATE_DIR": str(tmp_path / "state")}
    pw = ["--password-file", str(lab.password_file)]
    lab.wait(lambda: all(_exo_runs(lab, n) for n in lab.nodes), 120, "exo running on every node")
    old = _build(lab, n1)
    for n in lab.nodes:
        lab.fault("update-offered", n, "25C60", "26.2.1", "6")
    _target(lab, "25C60")

    # --check: the plan, nothing changed (no password needed)
    rc, plan = _done(_upgrade(lab, env, "--check"))
    assert rc == 0 and plan["result"] == "check", plan
    assert [n["standing"] for n in plan["nodes"]] == ["offered"] * len(lab.nodes)
    assert plan["nodes"][0]["label"] == "macOS Tahoe 26.2.1-25C60"
    assert {_build(lab, n) for n in lab.nodes} == {old} and all(_exo_runs(lab, n) for n in lab.nodes)

    # killed once the first node runs the target: exo stays stopped on every node (the others are not on it yet)
    p = _upgrade(lab, env, *pw)
    lab.wait(lambda: _build(lab, n1) == "25C60" or p.poll() is not None, 300, f"{n1} on 25C60")
    if p.poll() is not None:
        out, err = p.communicate()
        raise AssertionError(f"upgrade ended early ({p.returncode}): {json.loads(out).get('refusals')} "
                             f"{json.loads(out).get('failure')}\n{err[-2000:]}")
    lab.wait_ssh(n1, timeout=120)
    assert not any(_exo_runs(lab, n) for n in lab.nodes)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    for n in lab.nodes:
        lab.wait_ssh(n, timeout=120)
    assert not any(_exo_runs(lab, n) for n in lab.nodes)

    # the next run resumes: the other nodes one at a time, then exo on every node
    rc, out = _done(_upgrade(lab, env, *pw))
    assert rc == 0 and out["result"] == "ok", out
    assert out["resumed"] and "resuming the upgrade" in out["resumed"]
    assert {_build(lab, n) for n in lab.nodes} == {"25C60"}
    assert sorted(out["exo_started"]) == sorted(lab.nodes)
    assert all(_exo_runs(lab, n) for n in lab.nodes)
    cluster = Path(os.environ["MACFLEET_CLUSTER_STATE_DIR"])  # the test's own shared state (tests/conftest.py)
    assert not list(cluster.glob("*/lock.json"))  # released
    audit = [json.loads(x) for f in cluster.glob("*/audit.jsonl") for x in f.read_text().splitlines()]
    took = [e["action"] for e in audit if e["decision"].startswith(("maintenance for upgrade", "upgrade finished"))]
    assert took[-2:] == ["maintenance-start", "maintenance-end"], audit  # the healer left the mesh to it
    password = lab.password_file.read_text().strip()
    leaks = subprocess.run(["grep", "-rlF", "-e", password, str(tmp_path / "state"), str(cluster), str(lab.inventory)],
                           capture_output=True, text=True)
    assert leaks.stdout == "", f"the password is in {leaks.stdout}"

    # an install that fails half-way: the node keeps its build, nothing else is installed, exo stays stopped
    lab.fault("update-fails", n1)
    for n in lab.nodes:
        lab.fault("update-offered", n, clear=True)
        lab.fault("update-offered", n, "25C62", "26.2.2", "6")
    _target(lab, "25C62")
    rc, out = _done(_upgrade(lab, env, *pw))
    assert rc == 1 and out["result"] == "failed" and "the install of macOS Tahoe 26.2.2-25C62 failed" in out["failure"]
    assert {_build(lab, n) for n in lab.nodes} == {"25C60"} and not any(_exo_runs(lab, n) for n in lab.nodes)
    lab.fault("update-fails", n1, clear=True)

    # then an update that switches RDMA off: the resumed run stops at that node, named with the walkthrough
    lab.fault("update-rdma-off", n1)
    rc, out = _done(_upgrade(lab, env, *pw))
    assert rc == 1 and out["result"] == "failed" and out["resumed"], out
    assert f"macfleet rdma enable {n1}" in out["failure"]
    assert _build(lab, n1) == "25C62" and {_build(lab, n) for n in rest} == {"25C60"}
    assert not any(_exo_runs(lab, n) for n in lab.nodes)
    assert STATE_ROOT.exists()
