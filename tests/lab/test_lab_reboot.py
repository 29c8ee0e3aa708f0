"""Destructive: reboot cycle, power, Recovery, launchd RunAtLoad, rsync over a shaped Thunderbolt link (2 nodes)."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from macfleet.facts.registry import KINDS

pytestmark = pytest.mark.lab(minutes=0.6)

PLIST = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0"><dict>
<key>Label</key><string>org.example.sleeper</string>
<key>ProgramArguments</key><array><string>/bin/sleep</string><string>1000</string></array>
<key>RunAtLoad</key><true/>
</dict></plist>
"""


def uuids(lab, node) -> dict[int, str]:
    tb = KINDS["thunderbolt"].parser(lab.ssh(node, "system_profiler SPThunderboltDataType -json").stdout)
    return {p.receptacle: p.domain_uuid for p in tb.ports}


def test_reboot_cycle(lab_small):
    lab = lab_small
    node = "studio-1"
    lab.ssh(node, "mkdir -p ~/Library/LaunchAgents && cat > ~/Library/LaunchAgents/org.example.sleeper.plist <<'X'\n"
            + PLIST + "X\nlaunchctl bootstrap gui/$(id -u) ~/Library/LaunchAgents/org.example.sleeper.plist")
    assert "org.example.sleeper" in lab.ssh(node, "launchctl list").stdout
    assert "state = running" in lab.ssh(node, "launchctl print gui/$(id -u)/org.example.sleeper").stdout
    before = uuids(lab, node)
    boottime = lab.ssh(node, "sysctl -n kern.boottime").stdout
    # bootstrap's LaunchDaemon set memory less 16 GB at boot (512 GB Mac Studio)
    set_out = lab.sudo(node, "sysctl -w iogpu.wired_limit_mb=123456").stdout
    assert set_out == "iogpu.wired_limit_mb: 507904 -> 123456\n"
    # LaunchAgents start at boot only for a user who logs in automatically
    lab.sudo(node, "defaults write /Library/Preferences/com.apple.loginwindow autoLoginUser \"$SUDO_USER\"")
    lab.sudo(node, "pmset -a displaysleep 7")
    lab.sudo(node, "networksetup -setmanual 'Thunderbolt 1' 10.98.0.1 255.255.255.252")
    lab.sudo(node, "ifconfig en6 inet 10.97.0.1 netmask 255.255.255.0 alias")
    peer_before = uuids(lab, "studio-2")

    from macfleet.lab import control

    session = subprocess.Popen(control.ssh_argv(lab.name, node, "sleep 60"), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    lab.wait(lambda: "sleep 60" in lab.ssh(node, "ps -eo args").stdout, 10, "the open session")
    boot_id = lab.node_state(node)["boot_id"]
    t0 = time.monotonic()
    lab.ssh(node, "sudo -n shutdown -r now", check=False)
    # read the state file, not `lab status`: on a loaded machine a CLI poll can miss a 1 s boot entirely
    lab.wait(lambda: (b := lab.node_state(node)).get("boot_id") != boot_id or b["power"] != "on", 20,
             f"{node} to go down")
    assert session.wait(timeout=20) == 255  # the open SSH session drops, as when a Mac goes down
    lab.wait_state(node, {"up"}, timeout=30)
    lab.wait_ssh(node)
    took = time.monotonic() - t0
    assert took >= 1.0  # --boot-seconds 1

    after = uuids(lab, node)
    assert set(after) == set(before) and all(after[r] != before[r] for r in before)
    assert uuids(lab, "studio-2") == peer_before  # the peer did not reboot
    assert lab.ssh(node, "sysctl -n kern.boottime").stdout != boottime
    # reset at reboot, then set again by the wired-limit LaunchDaemon
    assert lab.ssh(node, "sysctl -n iogpu.wired_limit_mb").stdout == "507904\n"
    assert " displaysleep         7" in lab.ssh(node, "pmset -g").stdout  # persisted
    assert "inet 10.98.0.1 " in lab.ssh(node, "ifconfig en2").stdout  # networksetup persisted
    assert "10.97.0.1" not in lab.ssh(node, "ifconfig en6").stdout  # ifconfig is not
    # launchd: RunAtLoad job from ~/Library/LaunchAgents started again at boot
    lab.wait(lambda: "state = running" in lab.ssh(node, "launchctl print gui/$(id -u)/org.example.sleeper",
                                                     check=False).stdout, 10, "RunAtLoad job")
    lab.ssh(node, "launchctl bootout gui/$(id -u)/org.example.sleeper"
            " && rm ~/Library/LaunchAgents/org.example.sleeper.plist")
    assert "org.example.sleeper" not in lab.ssh(node, "launchctl list").stdout
    lab.sudo(node, "networksetup -setdhcp 'Thunderbolt 1'")
    lab.sudo(node, "defaults delete /Library/Preferences/com.apple.loginwindow autoLoginUser")


def test_halt_stays_off_then_recovery_enables_rdma(lab_small):
    lab = lab_small
    node = "studio-2"
    lab.ssh(node, "sudo -n shutdown -h now", check=False)
    lab.wait_state(node, {"off"}, timeout=20)
    time.sleep(1.5)  # longer than --boot-seconds: a halted Mac stays off  # noqa: lab-sleep-ok
    assert lab.status()[node]["state"] == "off"
    # the peer sees its cable go dark
    tb1 = KINDS["thunderbolt"].parser(lab.ssh("studio-1", "system_profiler SPThunderboltDataType -json").stdout)
    assert not any(p.connected for p in tb1.ports)
    p = lab.macfleet("lab", "recovery", "--name", lab.name, node, "--", "rdma_ctl", "disable")
    assert p.returncode == 0
    lab.wait_state(node, {"up"}, timeout=30)
    lab.wait_ssh(node)
    assert lab.ssh(node, "rdma_ctl status").stdout == "disabled\n"
    assert "rdma_en" not in lab.ssh(node, "ibv_devices").stdout
    # the peer's RDMA ports go down and its view of studio-2 loses the RDMA service
    devinfo = KINDS["ibv-devinfo"].parser(lab.ssh("studio-1", "ibv_devinfo").stdout)
    assert all(d.state == "PORT_DOWN" for d in devinfo.devices)
    assert "64087" not in lab.ssh("studio-1", "system_profiler SPThunderboltDataType").stdout
    assert lab.macfleet("lab", "power", "--name", lab.name, node, "off", "--json").returncode == 0
    assert lab.status()[node]["state"] == "off"
    lab.macfleet("lab", "recovery", "--name", lab.name, node, "--", "rdma_ctl", "enable")
    lab.wait_state(node, {"up"}, timeout=30)
    lab.wait_ssh(node)
    assert lab.ssh(node, "rdma_ctl status").stdout == "enabled\n"
    lab.wait(lambda: all(d.state == "PORT_ACTIVE" for d in KINDS["ibv-devinfo"].parser(
        lab.ssh("studio-1", "ibv_devinfo -d rdma_en3").stdout).devices), 10, "PORT_ACTIVE again")


def test_power_cycle_and_ansible_become(lab_small):
    import os

    lab = lab_small
    assert json.loads(lab.macfleet("lab", "power", "--name", lab.name, "studio-1", "cycle", "--json").stdout)["state"] \
        in ("booting", "up")
    lab.wait_state("studio-1", {"up"}, timeout=30)
    lab.wait_ssh("studio-1")
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1"}
    before = {n: lab.ssh(n, "sysctl -n iogpu.wired_limit_mb").stdout.strip() for n in lab.nodes}
    p = subprocess.run(["ansible", "-i", str(lab.inventory), "macfleet", "-b", "-m", "ansible.builtin.command",
                        "-a", "sysctl -w iogpu.wired_limit_mb=4096"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    # Ansible's become works through bootstrap's scoped drop-in (no password); the value before is the
    # wired-limit daemon's, or what an earlier test left
    assert p.stdout.count(" -> 4096") == 2
    for node, value in before.items():  # the shared lab as this test found it
        lab.sudo(node, f"sysctl -w iogpu.wired_limit_mb={int(value)}")


def test_rsync_over_thunderbolt_moves_bytes_at_shaped_rate(lab_small):
    lab = lab_small
    truth = lab.truth()
    cable = truth["cables"][0]
    a, b = cable["a"], cable["b"]
    b_ip = truth["addresses"][b["node"]][str(b["receptacle"])][0]
    # give A the lab's client key and B's host key under its Thunderbolt address (strict checking stays on)
    key = (lab.inventory / "id_ed25519").read_text()
    host_key = next(line.split(None, 1)[1] for line in (lab.inventory / "known_hosts").read_text().splitlines()
                    if line.startswith(truth["nodes"][b["node"]]["address"] + " "))
    lab.ssh(a["node"], f"umask 077; mkdir -p ~/.ssh; printf '%s' '{key}' > ~/.ssh/id_ed25519; "
            f"echo '{b_ip} {host_key.strip()}' > ~/.ssh/known_hosts")
    size_mb = 20
    lab.ssh(a["node"], f"head -c {size_mb}M /dev/urandom > ~/blob && sha256sum ~/blob | cut -d' ' -f1 > ~/blob.sum")
    ssh_opts = "-o StrictHostKeyChecking=yes -o BatchMode=yes"
    # time on the node itself; take off what a bare ssh login costs (key exchange on a busy 2-core box)
    # (macOS `date` has no %N: the nodes' date is the macOS stand-in, so take the time from python3)
    now = "$(python3 -c 'import time; print(time.time())')"
    out = lab.ssh(a["node"], f"t0={now}; ssh {ssh_opts} {b_ip} true; t1={now}; "
                  f"rsync -e 'ssh {ssh_opts}' ~/blob {b_ip}:blob; t2={now}; echo $t0 $t1 $t2",
                  timeout=180).stdout.split()
    t0, t1, t2 = (float(x) for x in out[-3:])
    took = max(0.05, (t2 - t1) - (t1 - t0))
    assert lab.ssh(b["node"], "sha256sum ~/blob | cut -d' ' -f1").stdout == lab.ssh(a["node"], "cat ~/blob.sum").stdout
    rate_mbit = size_mb * 8 * 1.048576 / took
    # shaped to 80 mbit/s: never (much) faster, and about that rate; the low bound leaves room for a busy box
    assert 80 * 0.3 < rate_mbit < 80 * 1.15, f"{rate_mbit:.0f} mbit/s over an 80 mbit link"
    lab.ssh(a["node"], "rm -f ~/blob ~/blob.sum ~/.ssh/id_ed25519")
    lab.ssh(b["node"], "rm -f ~/blob")
