"""`macfleet trust` and `macfleet bootstrap` against the lab, over real SSH and real Ansible.

A fresh lab is what a Mac out of the box is, as far as bootstrap touches it. The tests of one module share it
and run in order: what bootstrap refuses (nothing half done), --check (nothing changed), the real run (every
step done, the password in no file), the second run (changed=0), the packet filter, one node unreachable.
A prepared lab with exo checks that it is a bootstrapped mesh (changed=0) and that exo, a LaunchDaemon, comes
back after every node reboots with nobody logged in, while a LaunchAgent-only exo does not.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from tests.lab.conftest import STATE_ROOT, Lab

pytestmark = pytest.mark.lab(minutes=5.7)

CHECK_TIMEOUT = 900
SU = "/Library/Preferences/com.apple.SoftwareUpdate"


def _auto_updates_found(lab: Lab) -> set[str]:
    """The nodes doctor's auto-updates check finds able to update or restart by themselves, once doctor read
    every node ("could not read" is not "nothing found"; a node just back from Recovery may still be starting
    on a loaded host): on a timeout, what doctor said last."""
    last: dict[str, object] = {}

    def read() -> bool:
        p = lab.macfleet("doctor", "-i", str(lab.inventory), "--only", "auto-updates", "--json", check=False,
                         timeout=120)
        last["report"] = report = json.loads(p.stdout)
        last["stderr"] = p.stderr
        results = {c["node"]: c["result"] for c in report["checks"] if c["check"] == "auto-updates"}
        return set(results) == set(lab.nodes) and "unknown" not in results.values()

    try:
        lab.wait(read, 120, "doctor to read every node's Software Update preferences")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{last}") from None
    report = last["report"]
    assert isinstance(report, dict)
    return {f["node"] for f in report["findings"] if f["check"] == "auto-updates"}


def _persist(lab: Lab, node: str, **values: object) -> None:
    """Set persist.json keys of a node, under its lock, as the lab's own faults do."""
    from macfleet.lab.macos.common import Lab as Userland

    node_obj = Userland(STATE_ROOT / lab.name).node(node)
    node_obj.update("persist", lambda p: p.update(values))


def _snapshot(lab: Lab) -> dict[str, object]:
    """Each node's persisted state and the files of its own filesystem view (what bootstrap would change)."""
    snap: dict[str, object] = {}
    for node in lab.nodes:
        d = STATE_ROOT / lab.name / "nodes" / node
        persist = json.loads((d / "persist.json").read_text())
        # each file with its content's digest: a changed preference is a change, not only a new file
        files = sorted((str(p.relative_to(d / "fs")), hashlib.sha256(p.read_bytes()).hexdigest()
                        if p.is_file() and not p.is_symlink() else "")
                       for p in (d / "fs").rglob("*") if "exo_log" not in p.parts and ".ansible" not in p.parts)
        snap[node] = {"persist": persist, "files": files,
                      "wired": lab.node_state(node).get("wired_limit_mb"), "pf": lab.node_state(node).get("pf_anchors")}
    return snap


def _bootstrap(lab: Lab, *args: str, password: bool = True, env: dict[str, str] | None = None,
               timeout: float = CHECK_TIMEOUT) -> tuple[int, dict]:
    pw = ["--become-password-file", str(lab.password_file)] if password else []
    p = subprocess.run([os.sys.executable, "-m", "macfleet", "bootstrap", "-i", str(lab.inventory),
                        "--non-interactive", "--json", *pw, *args], cwd=lab.workdir, capture_output=True, text=True,
                       timeout=timeout, env={**os.environ, **(env or {})})
    try:
        data = json.loads(p.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"bootstrap -> {p.returncode}\n{p.stdout}\n{p.stderr}") from None
    return p.returncode, data


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> Lab:
    from tests.lab.conftest import _down, _up

    lab = _up("bf", tmp_path_factory.mktemp("fresh"), "--nodes", "2", "--fresh", "--boot-seconds", "1",
              "--tb-rate", "80mbit", trust=False)
    yield lab
    _down(lab)


def test_fresh_lab_is_a_mac_out_of_the_box(fresh: Lab) -> None:
    pw = fresh.password_file
    assert stat.S_IMODE(pw.stat().st_mode) == 0o600 and pw.read_text().strip()
    assert (fresh.inventory / "known_hosts").read_text().strip() == ""
    trusted = fresh.macfleet("trust", "-i", str(fresh.inventory), "--yes", "--json")
    assert all(n["recorded"] for n in json.loads(trusted.stdout)["nodes"])
    n1 = fresh.nodes[0]
    stub = fresh.ssh(n1, "/usr/bin/python3 -c 'print(1)'", check=False)
    assert stub.returncode == 1 and "No developer tools were found" in stub.stderr
    assert fresh.ssh(n1, "xcode-select -p", check=False).returncode == 2
    assert fresh.ssh(n1, "sudo -n true", check=False).returncode != 0  # sudo asks for a password
    assert fresh.ssh(n1, "test -e /opt/homebrew/bin/rsync", check=False).returncode != 0
    assert fresh.ssh(n1, "command -v iperf3", check=False).returncode != 0  # macOS has none: Homebrew's comes later
    assert "Enabled" in fresh.ssh(n1, "networksetup -getnetworkserviceenabled 'Thunderbolt Bridge'").stdout
    assert fresh.ssh(n1, f"defaults read {SU} AutomaticallyInstallMacOSUpdates").stdout.strip() == "1"


def test_without_a_password_nothing_is_done_and_the_fix_is_named(fresh: Lab) -> None:
    before = _snapshot(fresh)
    rc, data = _bootstrap(fresh, password=False)
    assert rc == 1
    for node in fresh.nodes:
        assert data["nodes"][node]["failed"] is True
        assert any("--become-password-file" in line for line in data["nodes"][node]["needs_human"])
    assert _snapshot(fresh) == before


def test_preflight_failures_name_their_fix_and_leave_nothing_half_done(fresh: Lab) -> None:
    n1, n2 = fresh.nodes
    before = _snapshot(fresh)
    _persist(fresh, n1, os={"version": "26.1", "build": "25B78"})
    fresh.fault("disk-full", n2)
    try:
        rc, data = _bootstrap(fresh)
        assert rc == 1
        assert "older than 26.2" in " ".join(data["nodes"][n1]["needs_human"])
        assert "GB free" in " ".join(data["nodes"][n2]["needs_human"])
    finally:
        _persist(fresh, n1, os={"version": "26.5.1", "build": "25F80"})
        fresh.fault("disk-full", n2, clear=True)
    _persist(fresh, n1, clt_unavailable=True)
    _persist(fresh, n2, clt_unavailable=True)
    try:
        rc, data = _bootstrap(fresh)
        assert rc == 1
        for node in fresh.nodes:
            assert data["nodes"][node]["failed"] is True
            assert "xcode-select --install" in " ".join(data["nodes"][node]["needs_human"])
    finally:
        _persist(fresh, n1, clt_unavailable=False)
        _persist(fresh, n2, clt_unavailable=False)
    after = _snapshot(fresh)
    for node in fresh.nodes:
        after[node]["persist"].pop("clt_unavailable", None)  # type: ignore[union-attr]
    assert after == before


def test_check_reports_changes_and_changes_nothing(fresh: Lab) -> None:
    before = _snapshot(fresh)
    generated = sorted(fresh.inventory.rglob("macfleet_generated.yml"))
    rc, data = _bootstrap(fresh, "--check")
    assert data["changed"] > 0 and rc in (0, 1)
    assert _snapshot(fresh) == before
    assert sorted(fresh.inventory.rglob("macfleet_generated.yml")) == generated


def test_fresh_to_ready_then_nothing_to_change(fresh: Lab, tmp_path: Path) -> None:
    for node in fresh.nodes:  # the operator's visit at the rack (Recovery), which bootstrap only lists
        fresh.macfleet("lab", "power", "--name", fresh.name, node, "off")
        fresh.macfleet("lab", "recovery", "--name", fresh.name, node, "--", "rdma_ctl", "enable")
        fresh.wait_ssh(node, timeout=120)
    # n2's macOS refuses to create network services, as reported on macOS 26 (dryvist/nix-darwin#1750)
    n2 = fresh.nodes[1]
    _persist(fresh, n2, sc_create_refused=True)
    state = tmp_path / "state"
    assert _auto_updates_found(fresh) == set(fresh.nodes)  # out of the box, a Mac may update by itself
    rc, data = _bootstrap(fresh, env={"MACFLEET_STATE_DIR": str(state)})
    assert rc == 0, data
    assert _auto_updates_found(fresh) == set()  # bootstrap switched automatic install, download, restart off
    assert fresh.ssh(fresh.nodes[1], f"defaults read {SU} AutomaticallyInstallMacOSUpdates").stdout.strip() == "0"
    assert all(n["changed"] > 0 and not n["failed"] and not n["needs_human"] for n in data["nodes"].values())
    rc, again = _bootstrap(fresh, env={"MACFLEET_STATE_DIR": str(state)})
    assert rc == 0 and again["changed"] == 0, again
    assert all(n["changed"] == 0 for n in again["nodes"].values())
    password = fresh.password_file.read_text().strip()
    leaks = subprocess.run(["grep", "-rlF", "-e", password, str(state)], capture_output=True, text=True)
    assert leaks.stdout == "", f"the password is in {leaks.stdout}"
    n1 = fresh.nodes[0]
    assert fresh.ssh(n1, "sudo -n true", check=False).returncode != 0  # scoped: not NOPASSWD: ALL
    assert fresh.ssh(n1, "/usr/bin/python3 -c 'print(1)'").stdout.strip() == "1"
    # the probe above read Homebrew as an admin in a stock macOS admin's 18 groups, under the Mac's limit of 16
    assert len(fresh.ssh(n1, "id -G").stdout.split()) == 18
    code = ("import os, pwd, subprocess; print(os.sysconf('SC_NGROUPS_MAX')); me = pwd.getpwuid(os.getuid()); "
            "subprocess.run(['true'], extra_groups=os.getgrouplist(me.pw_name, me.pw_gid))")
    limit = fresh.ssh(n1, f"/usr/bin/python3 -I -c {code!r}", check=False)
    assert limit.stdout.split() == ["16"] and "ValueError: too many groups" in limit.stderr, limit
    assert fresh.ssh(n1, "test -x /opt/homebrew/bin/rsync", check=False).returncode == 0
    assert fresh.ssh(n1, "/opt/homebrew/bin/iperf3 --version").returncode == 0  # what `bench links` runs
    # Spotlight skips ~/.exo/models by its name (hidden ~/.exo): bootstrap ran no mdutil, which refuses a folder
    assert fresh.ssh(n1, "mdutil -s ~/.exo/models", check=False).returncode == 1
    assert "Indexing disabled" not in fresh.ssh(n1, "mdutil -s /").stdout
    assert fresh.macfleet("topology", "check", "-i", str(fresh.inventory), check=False).returncode == 0
    # n2's ports have their planned addresses without a network service, and again after a restart (the LaunchDaemon)
    import yaml

    host_vars = fresh.inventory / "host_vars" / n2 / "macfleet_generated.yml"
    ports = yaml.safe_load(host_vars.read_text())["ipplan_interfaces"]
    order = fresh.ssh(n2, "networksetup -listnetworkserviceorder").stdout
    assert ports and not re.search(r"Hardware Port: Thunderbolt \d", order), order
    assert fresh.ssh(n2, "plutil -lint /Library/LaunchDaemons/org.macfleet.ipplan.plist").returncode == 0

    def addressed() -> bool:
        return all(fresh.ssh(n2, f"ipconfig getifaddr {p['device']}", check=False).stdout.strip() == p["address"]
                   for p in ports)

    def boot_time() -> str:
        return fresh.ssh(n2, "sysctl -n kern.boottime", check=False).stdout.strip()

    assert addressed()
    before = boot_time()
    fresh.macfleet("lab", "power", "--name", fresh.name, n2, "cycle")
    fresh.wait(lambda: boot_time() not in ("", before), 120, f"{n2} to restart")
    fresh.wait(addressed, 60, f"{n2}'s planned addresses after a restart")


def _connects(lab: Lab, node: str, address: str, port: int = 52415) -> bool:
    code = f"import socket; socket.create_connection(({address!r}, {port}), timeout=2).close()"
    return lab.ssh(node, f"/usr/bin/python3 -c {code!r}", check=False).returncode == 0


def test_packet_filter_lets_exo_in_from_the_mesh_and_the_controller_only(fresh: Lab) -> None:
    import socket

    n1, n2 = fresh.nodes
    truth = fresh.truth()
    lan = truth["nodes"][n1]["address"]  # n1's management address, on the LAN
    tb = next(iter(truth["addresses"][n1].values()))[0]  # n1's end of the cable to n2
    server = fresh.ssh(n1, "nohup /usr/bin/python3 -m http.server 52415 >/dev/null 2>&1 & echo $!").stdout.strip()
    try:
        fresh.wait(lambda: _connects(fresh, n1, "127.0.0.1"), 20, "a listener on 52415")
        assert not _connects(fresh, n2, lan), "a LAN address got through to exo's port"
        assert _connects(fresh, n2, tb), "the Thunderbolt peer was refused"
        with socket.create_connection((lan, 52415), timeout=5):
            pass  # the controller is let in
    finally:
        fresh.ssh(n1, f"kill {server}", check=False)


def test_one_node_unreachable_the_other_done_exit_3(fresh: Lab) -> None:
    n1, n2 = fresh.nodes
    fresh.macfleet("lab", "power", "--name", fresh.name, n2, "off")
    # and n1 without Homebrew (its iperf3 gone too): a line for a human, not a failure
    fresh.ssh(n1, "rm /opt/homebrew/bin/iperf3 && mv /opt/homebrew/bin/brew /opt/homebrew/brew.away")
    try:
        rc, data = _bootstrap(fresh)
        assert rc == 3
        assert data["nodes"][n2]["failed"] is True and data["nodes"][n2]["needs_human"][0].startswith("unreachable")
        assert data["nodes"][n1]["failed"] is False
        assert any("Homebrew is not installed" in line and "iperf3" in line
                   for line in data["nodes"][n1]["needs_human"]), data
    finally:
        fresh.ssh(n1, "mv /opt/homebrew/brew.away /opt/homebrew/bin/brew && /opt/homebrew/bin/brew install iperf3",
                  check=False)
        fresh.macfleet("lab", "power", "--name", fresh.name, n2, "on")
        fresh.wait_ssh(n2, timeout=120)


ONE_READ_PLAY = "Find the Macs that have nothing to change, with one read of each."


def _settled(state: Path, play: str | None = None) -> set[str]:
    """The Macs the last bootstrap's playbook found settled (every role found it as it should be), in `play`
    or in any."""
    runs = sorted((p for p in state.rglob("job_events") if p.is_dir()), key=lambda p: p.stat().st_mtime)
    hosts = set()
    for f in runs[-1].glob("*.json"):
        data = json.loads(f.read_text()).get("event_data", {})
        if str((data.get("res") or {}).get("msg", "")).startswith("settled: ") and play in (None, data.get("play")):
            hosts.add(data["host"])
    return hosts


def _drift(lab: Lab) -> None:
    """Something for every role to put back, spread over both Macs, as a person or another tool leaves it."""
    n1, n2 = lab.nodes
    lab.sudo(n1, "pmset -a sleep 10; networksetup -setnetworkserviceenabled 'Thunderbolt Bridge' on; "
                 "launchctl bootout system/org.macfleet.exo")
    lab.ssh(n1, "rm /opt/homebrew/bin/iperf3")
    lab.sudo(n2, "sysctl iogpu.wired_limit_mb=0; rm /etc/pf.anchors/macfleet; "
                 "sed -i 's/^#.*$/# edited/' /etc/sudoers.d/macfleet")
    lab.fault("ip-drift", n2, "saved")
    lab.fault("exo-networksetup", n1)  # exo's app's network daemon, loaded: bootstrap boots it out, disables it
    lab.sudo(n2, f"defaults write {SU} AutomaticallyInstallMacOSUpdates -bool true")  # System Settings, by hand


def _drift_is_gone(lab: Lab) -> None:
    n1, n2 = lab.nodes
    assert re.search(r"(?m)^\s*sleep\s+0\b", lab.ssh(n1, "pmset -g").stdout)
    assert "(*) Thunderbolt Bridge" in lab.ssh(n1, "networksetup -listnetworkserviceorder").stdout
    assert lab.ssh(n1, "test -x /opt/homebrew/bin/iperf3", check=False).returncode == 0
    assert lab.ssh(n1, "launchctl print system/org.macfleet.exo", check=False).returncode == 0
    assert lab.ssh(n2, "sysctl -n iogpu.wired_limit_mb").stdout.strip() not in ("", "0")
    assert lab.ssh(n1, "launchctl print system/io.exo.networksetup", check=False).returncode == 113
    assert '"io.exo.networksetup" => disabled' in lab.ssh(n1, "launchctl print-disabled system").stdout
    assert lab.ssh(n2, "test -f /etc/pf.anchors/macfleet", check=False).returncode == 0
    assert lab.sudo(n2, "grep -c '^# edited' /etc/sudoers.d/macfleet", check=False).stdout.strip() == "0"
    assert lab.macfleet("topology", "check", "-i", str(lab.inventory), check=False).returncode == 0
    assert lab.ssh(n2, f"defaults read {SU} AutomaticallyInstallMacOSUpdates").stdout.strip() == "0"


def _old_drop_in_asks_for_the_password_once(lab: Lab, state: dict[str, str]) -> None:
    """A drop-in from before the probe was a raw task (Ansible's module line only): sudo's `-l` would say yes to
    the probe's line (the admin may run anything with a password), so bootstrap runs it to know. Without a
    password that Mac is left out and the fix named; with it, the drop-in is rewritten and the other Mac settled."""
    n1, n2 = lab.nodes[0], lab.nodes[1]
    drop_in = STATE_ROOT / lab.name / "nodes" / n1 / "fs" / "sudoers.d" / "macfleet"
    text = drop_in.read_text()
    old = re.sub(r", \\\n\s*/bin/sh -c echo BECOME-SUCCESS-\S+ ; /usr/bin/python3 -I -c \*", "", text)
    assert old != text
    drop_in.write_text(old)
    rc, data = _bootstrap(lab, password=False, env=state)
    assert rc == 1 and data["nodes"][n1]["failed"], data
    assert any("sudo asks for the admin password" in line for line in data["nodes"][n1]["needs_human"]), data
    assert not data["nodes"][n2]["failed"] and data["nodes"][n2]["changed"] == 0, data
    rc, data = _bootstrap(lab, env=state)
    assert rc == 0 and data["nodes"][n1]["changed"] >= 1 and data["nodes"][n2]["changed"] == 0, data
    assert drop_in.read_text() == text


def _doctor_models(lab: Lab) -> list[dict]:
    p = lab.macfleet("doctor", "-i", str(lab.inventory), "--only", "exo-models-dir", "--json", check=False,
                     timeout=120)
    return [f for f in json.loads(p.stdout)["findings"] if f["check"] == "exo-models-dir"]


def _models_dir_is_given_to_exo(lab: Lab, state: dict[str, str]) -> None:
    """Another models directory in the inventory: doctor says exo looks elsewhere, bootstrap tells exo
    (EXO_DEFAULT_MODELS_DIR in its LaunchDaemon), doctor is content; then back."""
    import yaml

    gv = lab.inventory / "group_vars" / "all" / "macfleet.yml"
    before = gv.read_text()
    data = yaml.safe_load(before)
    data.setdefault("macfleet_exo", {})["models_dir"] = "~/.exo/models-b"
    gv.write_text(yaml.safe_dump(data))
    try:
        found = _doctor_models(lab)
        assert {f["node"] for f in found} == set(lab.nodes) and "models-b" in found[0]["message"], found
        rc, out = _bootstrap(lab, env=state)
        assert rc == 0 and all(n["changed"] > 0 for n in out["nodes"].values()), out
        assert _doctor_models(lab) == []
        env = lab.ssh(lab.nodes[0], "cat /Library/LaunchDaemons/org.macfleet.exo.plist").stdout
        assert "<key>EXO_DEFAULT_MODELS_DIR</key>" in env and "/.exo/models-b</string>" in env
    finally:
        gv.write_text(before)
    rc, out = _bootstrap(lab, env=state)
    assert rc == 0, out


def test_prepared_lab_is_a_bootstrapped_mesh_and_exo_survives_a_reboot(make_lab, tmp_path: Path) -> None:
    lab = make_lab("bp", "--nodes", "2", "--boot-seconds", "1", "--tb-rate", "80mbit")
    state = {"MACFLEET_STATE_DIR": str(tmp_path / "state")}
    rc, data = _bootstrap(lab, env=state)
    assert rc == 0 and data["changed"] == 0, data
    # a ready Mac costs one read and nothing more
    assert _settled(tmp_path / "state", ONE_READ_PLAY) == set(lab.nodes)
    # a Mac where any role has something to do is not settled: each drift is put back, then all are settled
    _drift(lab)
    rc, data = _bootstrap(lab, env=state)
    assert rc == 0 and all(n["changed"] > 0 for n in data["nodes"].values()), data
    assert _settled(tmp_path / "state") == set()
    _drift_is_gone(lab)
    rc, data = _bootstrap(lab, env=state)
    assert rc == 0 and data["changed"] == 0, data
    assert _settled(tmp_path / "state", ONE_READ_PLAY) == set(lab.nodes)
    _models_dir_is_given_to_exo(lab, state)
    _old_drop_in_asks_for_the_password_once(lab, state)
    for node in lab.nodes:
        lab.ssh(node, "sudo -n shutdown -r now", check=False)
    for node in lab.nodes:
        lab.wait(lambda n=node: lab.state(n) == "up" and lab.ssh(n, "true", check=False).returncode == 0,
                 120, f"{node} back")
        lab.wait(lambda n=node: lab.ssh(n, "launchctl print system/org.macfleet.exo", check=False).returncode == 0,
                 60, f"exo's LaunchDaemon on {node}")
    assert lab.macfleet("topology", "check", "-i", str(lab.inventory), check=False).returncode == 0
    # exo as a LaunchAgent only: with nobody logged in it stays down after a reboot; automatic login brings it
    n1 = lab.nodes[0]
    agent = "~/Library/LaunchAgents/org.macfleet.exo.plist"
    lab.sudo(n1, "launchctl bootout system/org.macfleet.exo; "
                 f"mv /Library/LaunchDaemons/org.macfleet.exo.plist /tmp/mf-exo-{lab.name}.plist")
    lab.ssh(n1, f"mkdir -p ~/Library/LaunchAgents && cp /tmp/mf-exo-{lab.name}.plist {agent}")
    lab.ssh(n1, "sudo -n shutdown -r now", check=False)
    lab.wait(lambda: lab.ssh(n1, "true", check=False).returncode == 0, 120, f"{n1} back")
    uid = lab.ssh(n1, "id -u").stdout.strip()
    assert lab.ssh(n1, f"launchctl print gui/{uid}/org.macfleet.exo", check=False).returncode != 0
    lab.sudo(n1, "defaults write /Library/Preferences/com.apple.loginwindow autoLoginUser \"$SUDO_USER\"")
    lab.ssh(n1, "sudo -n shutdown -r now", check=False)
    lab.wait(lambda: lab.ssh(n1, "true", check=False).returncode == 0, 120, f"{n1} back")
    lab.wait(lambda: lab.ssh(n1, f"launchctl print gui/{uid}/org.macfleet.exo", check=False).returncode == 0, 60,
             "exo's LaunchAgent after an automatic login")
