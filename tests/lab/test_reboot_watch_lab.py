"""`macfleet reboot` and `macfleet watch` against the 2-node lab (real CLI, real SSH, the lab's reboots).

One module, one `lab_small` (no exo: the reboot then leaves exo stopped, as it found it)."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest

from macfleet.lab.exo.standin import DEFAULT_INSTANCE_MODEL as OWN  # the model of the lab's own instance

pytestmark = pytest.mark.lab(minutes=3.1)

POLICY = """macfleet_remediation:
  checks: [reachable, rdma]
  debounce: 2
  ladder: {rdma: [reboot]}
  reboot_breaker_limit: %(limit)d
  reboot_gap_s: 0
  webhook: %(webhook)s
  windows: %(windows)s
macfleet_reboot:
  timeout_s: %(timeout)d
  filevault_credential_file: %(cred)s
macfleet_probes:
  command_timeout_s: 4
"""


def set_policy(lab, *, limit=2, webhook="null", windows="[]", timeout=60, cred="null") -> None:
    (lab.inventory / "group_vars" / "all" / "watch.yml").write_text(POLICY % dict(
        limit=limit, webhook=webhook, windows=windows, timeout=timeout, cred=cred))


@pytest.fixture
def env(tmp_path):
    return {**os.environ, "MACFLEET_STATE_DIR": str(tmp_path / "state")}


def mf(lab, env, *args, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "macfleet", *args], cwd=lab.workdir, env=env, capture_output=True,
                          text=True, timeout=timeout)


def boottimes(lab) -> dict[str, str]:
    return {n: lab.ssh(n, "sysctl -n kern.boottime").stdout for n in lab.nodes}


def audit(env) -> list[dict]:
    files = list(Path(env["MACFLEET_CLUSTER_STATE_DIR"]).glob("*/audit.jsonl"))
    return [json.loads(line) for f in files for line in f.read_text().splitlines()]


def back_up(lab) -> None:
    for n in lab.nodes:
        lab.wait_state(n, {"up"}, timeout=90)
        lab.wait_ssh(n)


LOCK_AS = ("import sys; from pathlib import Path;"
           "from macfleet.act.lock import ClusterLock, lock_path, process_started;"
           "l = ClusterLock(lock_path(Path(sys.argv[1]))); h = l.acquire('rollout exo', 'switching releases');"
           "h.record.pid = int(sys.argv[2]); h.record.started = process_started(h.record.pid); l._write(h.record)")


def test_refusals_before_any_node_goes_down_then_authrestart_takeover_and_slow_boot(lab_small, env, tmp_path):
    """FileVault without a credential, a loose credential file, a live lock: refused, nothing rebooted. Then one
    real reboot: FileVault node through authrestart, a stale lock taken over, a slow node waited for."""
    lab = lab_small
    set_policy(lab)
    lab.fault("filevault-on", "studio-2")
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        before = boottimes(lab)
        p = mf(lab, env, "reboot", "-i", str(lab.inventory), "--json")
        assert p.returncode == 1, p.stderr
        out = json.loads(p.stdout)
        assert out["result"] == "refused" and "FileVault is on on studio-2" in out["refusal"]
        assert "no FileVault credential is stored" in out["refusal"]
        secret = tmp_path / "fv-password"
        secret.write_text("s3cret-unlock\n")
        secret.chmod(0o644)
        set_policy(lab, cred=str(secret))
        p = mf(lab, env, "reboot", "-i", str(lab.inventory), "--json")
        assert p.returncode == 1 and "readable by others" in json.loads(p.stdout)["refusal"]
        secret.chmod(0o600)
        subprocess.run([sys.executable, "-c", LOCK_AS, str(lab.inventory), str(holder.pid)], env=env, check=True,
                       cwd=lab.workdir)
        p = mf(lab, env, "reboot", "-i", str(lab.inventory), "--json")
        assert p.returncode == 1
        assert f"locked by rollout exo (pid {holder.pid}" in json.loads(p.stdout)["refusal"]
        assert boottimes(lab) == before  # nothing went down
        holder.kill()
        holder.wait()
        lab.fault("slow-boot", "studio-1", "6")
        p = mf(lab, env, "reboot", "-i", str(lab.inventory), "studio-1", "studio-2", "--json", "--reason", "test")
        assert p.returncode == 0, p.stdout + p.stderr
        out = json.loads(p.stdout)
        assert {x["node"]: x["method"] for x in out["plan"]} == {"studio-1": "shutdown", "studio-2": "authrestart"}
        assert "s3cret-unlock" not in p.stdout + p.stderr
        assert all(boottimes(lab)[n] != before[n] for n in lab.nodes)  # studio-2 came back through authrestart
        assert "took over a stale cluster lock held by rollout exo" in out["lock"] and "is gone" in out["lock"]
        assert "; released (ok: " in out["lock"]
        assert out["nodes"]["studio-1"]["took_s"] >= 6 > out["nodes"]["studio-2"]["took_s"]
        assert [ph["name"] for ph in out["phases"]] == ["stop exo", "reboot", "wait for nodes",
                                                         "verify RDMA, IP plan, cabling", "start exo"]
        assert "waiting" in p.stderr and "studio-1: back" in p.stderr  # per-node progress
    finally:
        holder.kill()
        holder.wait()
        back_up(lab)
        lab.fault("slow-boot", "studio-1", clear=True, check=False)
        lab.fault("filevault-on", "studio-2", clear=True)
        set_policy(lab)


def test_authrestart_refused_restarts_plainly_and_unlocks_at_the_screen(lab_small, env, tmp_path):
    """A FileVault node whose `fdesetup authrestart` fails (fdesetup(8): not every Mac supports it) and whose
    unlock-screen key is recorded: the reboot restarts it plainly, finds it at its unlock screen (macOS 26:
    password-only SSH, apple_ssh_and_filevault(7)), unlocks it with the stored credential, and the mesh verifies."""
    from macfleet.lab.state import STATE_ROOT

    lab = lab_small
    inv = str(lab.inventory)
    secret = tmp_path / "fv-password"
    secret.write_text((STATE_ROOT / lab.name / "admin-password").read_text())
    secret.chmod(0o600)
    set_policy(lab, cred=str(secret))
    lab.fault("filevault-on", "studio-2")
    try:
        # the operator's first time at that screen: its key recorded once (trust --unlock), the node unlocked
        lab.ssh("studio-2", "sudo -n shutdown -r now", check=False)
        lab.wait_state("studio-2", {"locked"}, 60)
        lab.wait(lambda: mf(lab, env, "trust", "-i", inv, "--unlock", "studio-2", "--yes", "--json").returncode == 0,
                 30, "the unlock screen's key recorded")
        p = mf(lab, env, "unlock", "-i", inv, "studio-2", "--password-file", str(secret), "--json")
        assert p.returncode == 0, p.stdout + p.stderr
        lab.wait_ssh("studio-2", 60)
        lab.fault("authrestart-unsupported", "studio-2")
        before = boottimes(lab)
        p = mf(lab, env, "reboot", "-i", inv, "--json", "--reason", "test")
        assert p.returncode == 0, p.stdout + p.stderr
        out = json.loads(p.stdout)
        assert "studio-2: authrestart was not possible" in p.stderr and "restarting it plainly" in p.stderr
        assert all(boottimes(lab)[n] != before[n] for n in lab.nodes)
        assert lab.ssh("studio-2", "fdesetup status").stdout == "FileVault is On.\n"  # unlocked, not switched off
        assert secret.read_text().strip() not in p.stdout + p.stderr
        assert out["result"] == "ok", out
    finally:
        lab.fault("authrestart-unsupported", "studio-2", clear=True)
        lab.fault("filevault-on", "studio-2", clear=True)
        for recorded in lab.inventory.rglob("*.unlock"):  # the unlock-screen key this test recorded
            recorded.unlink()
        set_policy(lab)
        back_up(lab)


def test_node_not_back_is_named_with_what_it_looked_like_and_hang_refused(lab_small, env):
    lab = lab_small
    set_policy(lab, timeout=4)
    lab.fault("slow-boot", "studio-2", "15")
    try:
        p = mf(lab, env, "reboot", "-i", str(lab.inventory), "--json")
        assert p.returncode == 3, p.stdout + p.stderr
        out = json.loads(p.stdout)
        assert out["result"] == "failed" and out["nodes"]["studio-2"]["back"] is False
        assert out["nodes"]["studio-2"]["last_seen"].startswith("down:")
        detail = out["phases"][-1]["detail"]
        assert "not back within 4 s: studio-2 went down and answers nothing" in detail
        assert "power-cycle studio-2: hold its power button" in detail
        assert "released (failed" in out["lock"]
    finally:
        back_up(lab)
        lab.fault("slow-boot", "studio-2", clear=True)
    set_policy(lab)
    lab.fault("hang", "studio-1")
    try:
        before = lab.ssh("studio-2", "sysctl -n kern.boottime").stdout
        p = mf(lab, env, "reboot", "-i", str(lab.inventory), "--json")
        assert p.returncode == 3
        assert "could not read FileVault on studio-1" in json.loads(p.stdout)["refusal"]
        assert lab.ssh("studio-2", "sysctl -n kern.boottime").stdout == before
        p = mf(lab, env, "watch", "-i", str(lab.inventory), "--once")
        assert p.returncode == 3, p.stderr  # a node unreachable (docs/cli.md)
        last = audit(env)[-1]
        assert last["node"] == "studio-1" and last["finding"] == "reachable" and last["action"] == "none"
        assert "only 1 of 2 node(s) answered" in last["decision"]  # half the mesh unseen: nothing counted
    finally:
        lab.fault("hang", "studio-1", clear=True)
        back_up(lab)


class Hook(http.server.BaseHTTPRequestHandler):
    got: ClassVar[list[dict]] = []

    def do_POST(self):
        Hook.got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *a):
        return


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_watch_heals_a_wedge_then_breaker_trips_on_a_returning_wedge(lab_small, env):
    lab = lab_small
    hook = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    set_policy(lab, limit=2, webhook=f"http://127.0.0.1:{hook.server_address[1]}/hook")
    port = _free_port()
    lab.fault("rdma-wedge", "studio-1")
    injected = time.monotonic()
    watch = subprocess.Popen([sys.executable, "-m", "macfleet", "watch", "-i", str(lab.inventory), "--interval", "1",
                              "--listen", f"127.0.0.1:{port}"], cwd=lab.workdir, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        lab.wait(lambda: any(e["action"] == "none" and "debouncing" in e["decision"] for e in audit(env)), 60,
                 "a debounced probe")
        metrics = _get(port, "/metrics")
        assert 'macfleet_probe_check{check="rdma",mesh="mesh1",node="studio-1"} 0.0' in metrics
        page = _get(port, "/")
        assert "RDMA wedged on studio-1" in page
        _render_in_chromium(port, "RDMA wedged on studio-1")
        lab.wait(lambda: any(e["decision"].startswith("healthy (recovered") for e in audit(env)), 150, "healed")
        mttr = time.monotonic() - injected
        story = [e["action"] for e in audit(env)]
        assert story[:3] == ["none", "reboot", "none"], story  # debounce 2: one wait, then the reboot
        reboot = next(e for e in audit(env) if e["action"] == "reboot")
        assert reboot["node"] == "studio-1" and reboot["result"].startswith("reboot ok")
        print(f"\nMTTR (wedge injected -> healthy, debounce 2 at 1 s, 1 s boots): {mttr:.1f} s")
        lab.wait(lambda: 'macfleet_reboots_total{mesh="mesh1"} 1.0' in _get(port, "/metrics"), 10, "metrics")
        lab.wait(lambda: any(h["action"] == "reboot" for h in Hook.got), 20, "the webhook")
        # the wedge comes back after every boot: the breaker trips after 2 reboots, pages, then only says so
        for _ in range(2):
            n = sum(e["action"] == "reboot" for e in audit(env))
            lab.fault("rdma-wedge", "studio-1")
            lab.wait(lambda n=n: sum(e["action"] == "reboot" for e in audit(env)) > n
                     or any("breaker tripped" in e["decision"] for e in audit(env)), 150, "a reboot or the breaker")
            lab.wait(lambda: audit(env)[-1]["action"] == "none", 150, "the next decision")
        lab.wait(lambda: any("breaker tripped" in e["decision"] for e in audit(env)), 60, "breaker")
        lab.wait(lambda: sum("circuit breaker open since" in e["decision"] for e in audit(env)) >= 2, 60, "open")
        assert sum(e["action"] == "reboot" for e in audit(env)) == 2
        assert 'macfleet_breaker_open{mesh="mesh1"} 1.0' in _get(port, "/metrics")
        lab.wait(lambda: any("breaker tripped" in h["decision"] and h["page"] for h in Hook.got), 20, "paged")
    finally:
        watch.send_signal(signal.SIGTERM)
        _out, err = watch.communicate(timeout=60)
        hook.shutdown()
    assert watch.returncode == 0, err[-2000:]
    assert "circuit breaker: at most 2 reboot(s)" in err  # the policy in words at start
    p = mf(lab, env, "watch", "-i", str(lab.inventory), "--reset")
    assert p.returncode == 0 and "breaker closed" in p.stderr
    assert audit(env)[-1]["action"] == "reset"
    lab.fault("rdma-wedge", "studio-1", clear=True)
    back_up(lab)


def test_outside_window_no_reboot_logged_and_paged(lab_small, env):
    lab = lab_small
    hook = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    Hook.got = []
    # a one-minute window twelve hours away from now
    hour = (time.gmtime().tm_hour + 12) % 24
    window = f'[{{start: "{hour:02d}:00", end: "{hour:02d}:01"}}]'
    set_policy(lab, webhook=f"http://127.0.0.1:{hook.server_address[1]}/", windows=window)
    lab.fault("rdma-wedge", "studio-1")
    try:
        before = lab.ssh("studio-2", "sysctl -n kern.boottime").stdout
        for _ in range(3):
            assert mf(lab, env, "watch", "-i", str(lab.inventory), "--once").returncode == 1  # a finding
        entries = audit(env)
        assert [e["action"] for e in entries] == ["none", "page", "none"]
        assert "outside the maintenance window" in entries[1]["decision"]
        assert "already paged" in entries[2]["decision"]
        assert lab.ssh("studio-2", "sysctl -n kern.boottime").stdout == before
    finally:
        lab.fault("rdma-wedge", "studio-1", clear=True)
        hook.shutdown()
        set_policy(lab)
    # --once exits before the notifier's thread could post: the page is queued then sent at close
    assert any("outside the maintenance window" in h["decision"] for h in Hook.got)


def _get(port: int, path: str) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return r.read().decode()


def _render_in_chromium(port: int, expect: str) -> None:
    browser = _chromium()
    if browser is None:
        print("chromium is not installed: the status page was checked over HTTP only")
        return
    with tempfile.TemporaryDirectory() as profile:
        p = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                            "--dump-dom", f"http://127.0.0.1:{port}/"], capture_output=True, text=True, timeout=90)
    assert expect in p.stdout, p.stderr[-2000:]


def test_a_reboot_killed_after_issuing_its_reboots_is_resumed_and_the_mesh_verified(lab4, tmp_path):
    """kill -9 once the reboots are issued (the lock says so), then run `macfleet reboot` again: it does not
    reboot the mesh a second time; it waits for every node, verifies RDMA, the IP plan and the cabling, starts
    exo where it ran and verifies exo's /state, then exits 0. On the shared 4-node lab, where exo runs."""
    lab = lab4
    env = {**os.environ, "MACFLEET_STATE_DIR": str(tmp_path / "state")}
    before = boottimes(lab)
    first = subprocess.Popen([sys.executable, "-m", "macfleet", "reboot", "-i", str(lab.inventory), "--json",
                              "--reason", "to be killed"], cwd=lab.workdir, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        def phase() -> str | None:
            for f in Path(env["MACFLEET_CLUSTER_STATE_DIR"]).glob("*/lock.json"):
                try:
                    return json.loads(f.read_text())["phase"].get("phase")
                except (OSError, ValueError, KeyError):
                    return None
            return None

        lab.wait(lambda: phase() == "waiting for nodes" or first.poll() is not None, 120, "the reboots issued")
        assert first.poll() is None, first.communicate()
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
        p = mf(lab, env, "reboot", "-i", str(lab.inventory), "--json", timeout=400)
        assert p.returncode == 0, p.stdout + p.stderr[-3000:]
        out = json.loads(p.stdout)
        assert out["result"] == "ok" and out["resumed"].startswith(f"resuming the reboot of reboot (pid {first.pid}")
        assert [ph["name"] for ph in out["phases"]] == ["wait for nodes", "verify RDMA, IP plan, cabling",
                                                         "start exo", "verify exo /state",
                                                         "models placed and answering"]
        assert out["phases"][2]["detail"] == f"started on {len(lab.nodes)} node(s)"  # exo ran everywhere before
        assert "took over a stale cluster lock held by reboot" in out["lock"]
        # its last phase's word: nothing declared, and the one model placed (the lab's own instance) answers
        assert f"released (ok: answering: {OWN}: " in out["lock"], out["lock"]
        after = boottimes(lab)
        for n in lab.nodes:  # rebooted once, by the killed run: the same boot the resumed run saw come back
            assert after[n] != before[n] and out["nodes"][n]["last_seen"] == f"back (booted {after[n].strip()})"
        assert not list(Path(env["MACFLEET_CLUSTER_STATE_DIR"]).glob("*/lock.json"))  # released
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
        for n in lab.nodes:
            lab.wait_state(n, {"up"}, timeout=120)
            lab.wait_ssh(n)


def test_the_healer_leaves_a_mesh_in_maintenance_to_the_operators_reboot(lab_small, env):
    """Issue 28: a wedge under a person's maintenance is observed, not acted on and not paged, past the debounce;
    the operator's `macfleet reboot` keeps that maintenance; once it is ended the healer sees the mesh healthy."""
    lab = lab_small
    hook = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    Hook.got = []
    set_policy(lab, webhook=f"http://127.0.0.1:{hook.server_address[1]}/hook")
    inv = ["-i", str(lab.inventory)]
    assert mf(lab, env, "maintenance", "start", "--for", "1h", "--reason", "rewiring studio-1", *inv).returncode == 0
    lab.fault("rdma-wedge", "studio-1")
    port = _free_port()
    watch = subprocess.Popen([sys.executable, "-m", "macfleet", "watch", *inv, "--interval", "1", "--listen",
                              f"127.0.0.1:{port}"], cwd=lab.workdir, env=env, stderr=subprocess.PIPE, text=True)
    def observed() -> list[dict]:
        return [e for e in audit(env) if "observing only" in e["decision"] and e["finding"] == "rdma"]

    try:
        lab.wait(lambda: len(observed()) >= 3, 90, "three probes of the wedge under maintenance (debounce 2)")
        assert 'macfleet_maintenance{mesh="mesh1"} 1.0' in _get(port, "/metrics")
        assert "rewiring studio-1" in _get(port, "/")
        p = mf(lab, env, "reboot", *inv, "--reason", "by hand", "--json", timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        assert "reboot: kept: mesh mesh1 in maintenance by" in p.stderr
        assert mf(lab, env, "maintenance", "end", *inv).returncode == 0
        lab.wait(lambda: audit(env)[-1]["decision"] == "healthy", 90, "the healer's next probe: healthy")
        lab.wait(lambda: 'macfleet_maintenance{mesh="mesh1"} 0.0' in _get(port, "/metrics"), 20, "the metric")
    finally:
        watch.send_signal(signal.SIGTERM)
        _out, err = watch.communicate(timeout=60)
        hook.shutdown()
        lab.fault("rdma-wedge", "studio-1", clear=True, check=False)  # the reboot cleared it, unless it failed
    assert watch.returncode == 0, err[-2000:]
    actions = [e["action"] for e in audit(env)]
    assert "reboot" not in actions and actions[0] == "maintenance-start" and "maintenance-end" in actions
    assert Hook.got == [], Hook.got  # planned work: nobody paged
    back_up(lab)
