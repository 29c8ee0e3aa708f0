"""The 4-node lab: status, inventory, every stand-in parsed into the lab's true state, topology, Ansible."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess

import pytest
import yaml

from macfleet.facts.registry import KINDS

pytestmark = pytest.mark.lab(minutes=0.5)

MGMT = ipaddress.IPv4Network("198.18.0.0/15")


def parse(kind: str, text: str):
    return KINDS[kind].parser(text)


def test_status_json(lab4):
    st = lab4.status()
    assert list(st) == ["studio-1", "studio-2", "studio-3", "studio-4"]
    for n in st.values():
        assert set(n) == {"name", "mesh", "state", "address", "faults"}
        assert n["faults"] == []
        assert n["state"] == "up" and n["mesh"] == "mesh1"
        assert ipaddress.IPv4Address(n["address"]) in MGMT


def test_inventory_written(lab4):
    inv = lab4.inventory
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    group = hosts["macfleet"]["children"]["mesh1"]["hosts"]
    assert set(group) == set(lab4.nodes)
    for node, hv in group.items():
        assert hv["ansible_host"] == lab4.status()[node]["address"]
        assert hv["macfleet_model"] == "Mac15,14" and hv["ansible_user"] != "root"
    gv = yaml.safe_load((inv / "group_vars/all/macfleet.yml").read_text())
    assert gv == {"macfleet_ssh": {"private_key_file": "id_ed25519", "known_hosts_file": "known_hosts"},
                  "macfleet_exo": {"env": {"EXO_LAB_REFRESH_S": "1"}}}  # what bootstrap renders into exo's daemon
    av = yaml.safe_load((inv / "group_vars/all/ansible.yml").read_text())
    assert "StrictHostKeyChecking=yes" in av["ansible_ssh_common_args"]
    assert os.stat(inv / "id_ed25519").st_mode & 0o777 == 0o600
    assert len((inv / "known_hosts").read_text().splitlines()) == 4
    p = lab4.macfleet("inventory", "check", "-i", str(inv), check=False)
    assert p.returncode == 0, p.stdout + p.stderr


def test_lab_ssh_passes_stdout_stderr_and_exit_code(lab4):
    p = lab4.macfleet("lab", "ssh", "--name", lab4.name, "studio-2", "echo out; echo err >&2; exit 7", check=False)
    assert (p.returncode, p.stdout, p.stderr) == (7, "out\n", "err\n")


def test_macos_userland_first(lab4):
    out = lab4.ssh("studio-1", "command -v sysctl ifconfig shutdown reboot ping networksetup; sysctl hw.model").stdout
    assert "hw.model: Mac15,14" in out
    sudo = lab4.sudo("studio-1", "sh -c 'command -v shutdown sysctl; ls -d /sbin/shutdown'").stdout
    # Linux's own sysctl/shutdown must not answer: the stand-ins are in front of /usr/bin and /usr/sbin
    assert lab4.ssh("studio-1", "sysctl kernel.hostname", check=False).returncode != 0
    p = lab4.sudo("studio-1", "shutdown --help", check=False)  # systemd's would print help, exit 0
    assert p.returncode == 1 and "usage: shutdown" in p.stderr
    assert "/shutdown" in sudo


def test_every_standin_parses_into_true_state(lab4):
    """Each node's stand-ins against the lab's plan; the nodes are read at once (each one's commands in turn, at
    a Mac's pace), as doctor reads them."""
    from concurrent.futures import ThreadPoolExecutor

    truth = lab4.truth()
    st = lab4.status()
    with ThreadPoolExecutor(len(lab4.nodes)) as pool:
        for done in [pool.submit(_parses_into_true_state, lab4, truth, st, node) for node in lab4.nodes]:
            done.result()  # a node's failed assert is raised here


def _parses_into_true_state(lab4, truth: dict, st: dict, node: str) -> None:
    info = truth["nodes"][node]
    ports = truth["models"][info["model"]]["ports"]
    cabled = {}
    for c in truth["cables"]:
        for end, far in ((c["a"], c["b"]), (c["b"], c["a"])):
            if end["node"] == node:
                cabled[end["receptacle"]] = far
    boot = lab4.node_state(node)

    tb = parse("thunderbolt", lab4.ssh(node, "system_profiler SPThunderboltDataType -json").stdout)
    text = parse("thunderbolt", lab4.ssh(node, "system_profiler SPThunderboltDataType").stdout)
    xml = parse("thunderbolt", lab4.ssh(node, "system_profiler SPThunderboltDataType -xml").stdout)
    for facts in (tb, text, xml):
        by_r = {p.receptacle: p for p in facts.ports}
        assert set(by_r) == {p["receptacle"] for p in ports}
        for r, p in by_r.items():
            assert p.domain_uuid == boot["domain_uuids"][str(r)]
            assert p.connected == (r in cabled)
            if r in cabled:
                far = cabled[r]
                assert p.speed_gbps == 80
                peer_boot = lab4.node_state(far["node"])
                dumped = json.dumps(p.model_dump(mode="json"))
                assert peer_boot["domain_uuids"][str(far["receptacle"])] in dumped

    hp = parse("hardware-ports", lab4.ssh(node, "networksetup -listallhardwareports").stdout)
    tbports = {x.name: x.device for x in hp.ports if x.name.startswith("Thunderbolt ") and x.name[-1].isdigit()}
    assert tbports == {f"Thunderbolt {p['receptacle']}": p["device"] for p in ports}

    devs = parse("ibv-devices", lab4.ssh(node, "ibv_devices").stdout)
    assert [d.name for d in devs.devices] == [f"rdma_{p['device']}" for p in ports]

    info_v = parse("ibv-devinfo", lab4.ssh(node, "ibv_devinfo -v").stdout)
    for d in info_v.devices:
        port = next(p for p in ports if f"rdma_{p['device']}" == d.name)
        expect = "PORT_ACTIVE" if port["receptacle"] in cabled and port["rdma_capable"] else "PORT_DOWN"
        assert d.state == expect, (node, d.name)

    ifc = parse("ifconfig", lab4.ssh(node, "ifconfig").stdout)
    by_if = {i.name: i for i in ifc.interfaces}
    for r, (ip, prefix) in truth["addresses"][node].items():
        dev = next(p["device"] for p in ports if p["receptacle"] == int(r))
        assert [a.address for a in by_if[dev].inet] == [ip]
        assert by_if[dev].inet[0].prefixlen == prefix
    assert "bridge0" not in by_if  # Thunderbolt Bridge off in the default start state

    assert parse("rdma-ctl", lab4.ssh(node, "rdma_ctl status").stdout).enabled is True
    sw = parse("sw-vers", lab4.ssh(node, "sw_vers").stdout)
    assert sw.product_name == "macOS" and sw.product_version == boot.get("os_version", "26.5.1")
    sc = parse("sysctl", lab4.ssh(node, "sysctl hw.memsize hw.ncpu hw.model iogpu.wired_limit_mb").stdout)
    assert sc.values["hw.memsize"] == str(512 * 1024**3) and sc.values["hw.model"] == "Mac15,14"
    hw = parse("hardware", lab4.ssh(node, "system_profiler SPHardwareDataType -json").stdout)
    assert hw.memory_bytes == 512 * 1024**3 and hw.chip == "Apple M3 Ultra"
    pm = parse("pmset", lab4.ssh(node, "pmset -g").stdout)
    assert pm.settings["sleep"] == "0" and pm.settings["autorestart"] == "1"
    assert parse("fdesetup", lab4.ssh(node, "fdesetup status").stdout).filevault_on is False
    assert parse("csrutil", lab4.ssh(node, "csrutil status").stdout).status == "enabled"
    assert parse("remote-login", lab4.ssh(node, "sudo -n systemsetup -getremotelogin").stdout).enabled is True
    svcs = parse("services", lab4.ssh(node, "networksetup -listallnetworkservices").stdout)
    assert {s.name: s.enabled for s in svcs.services}["Thunderbolt Bridge"] is False
    order = parse("service-order", lab4.ssh(node, "networksetup -listnetworkserviceorder").stdout)
    assert len(order.services) == len(svcs.services)
    r0, (ip0, _p) = next(iter(truth["addresses"][node].items()))
    gi = parse("getinfo", lab4.ssh(node, f"networksetup -getinfo 'Thunderbolt {r0}'").stdout)
    assert gi.configuration == "manual" and gi.ip_address == ip0
    assert st[node]["state"] == "up"


def test_topology_links_six_at_80(lab4, tmp_path):
    args = []
    for node in lab4.nodes:
        (tmp_path / f"{node}.json").write_text(lab4.ssh(node, "system_profiler SPThunderboltDataType -json").stdout)
        (tmp_path / f"{node}.ports").write_text(lab4.ssh(node, "networksetup -listallhardwareports").stdout)
        args += ["--from", f"{node}={tmp_path / (node + '.json')}", "--ports", f"{node}={tmp_path / (node + '.ports')}"]
    p = lab4.macfleet("topology", "links", *args, "--json")
    data = json.loads(p.stdout)
    links = data["links"] if isinstance(data, dict) else data
    assert len(links) == 6
    assert all("80" in json.dumps(link) for link in links)


def test_ansible_ping_and_command_strict_host_keys(lab4):
    env = {**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_NOCOLOR": "1"}
    inv = str(lab4.inventory)
    p = subprocess.run(["ansible", "-i", inv, "macfleet", "-m", "ansible.builtin.ping"], capture_output=True,
                       text=True, env=env, cwd=lab4.workdir, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("SUCCESS") == 4
    p = subprocess.run(["ansible", "-i", inv, "macfleet", "-m", "ansible.builtin.command", "-a", "sysctl hw.memsize"],
                       capture_output=True, text=True, env=env, cwd=lab4.workdir, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("hw.memsize: 549755813888") == 4


def test_files_are_per_node_and_ping_over_thunderbolt(lab4):
    lab4.ssh("studio-1", "echo hello > ~/only-here")
    assert lab4.ssh("studio-2", "test -e ~/only-here", check=False).returncode == 1
    lab4.ssh("studio-1", "rm ~/only-here")
    truth = lab4.truth()
    c = next(c for c in truth["cables"] if {c["a"]["node"], c["b"]["node"]} == {"studio-1", "studio-2"})
    far_ip = truth["addresses"][c["b"]["node"]][str(c["b"]["receptacle"])][0]
    out = lab4.ssh(c["a"]["node"], f"ping -c 2 -t 5 {far_ip}").stdout
    assert "2 packets transmitted, 2 packets received, 0.0% packet loss" in out


def test_networksetup_changes_namespace_and_ifconfig_is_volatile(lab4):
    # Thunderbolt 1 (en2) is the non-RDMA port, uncabled in the default mesh: safe to play with.
    lab4.sudo("studio-3", "networksetup -setmanual 'Thunderbolt 1' 10.99.0.1 255.255.255.252")
    assert "inet 10.99.0.1 netmask 0xfffffffc" in lab4.ssh("studio-3", "ifconfig en2").stdout
    assert "10.99.0.1" in json.dumps(lab4.node_state("studio-3", "persist"))
    lab4.sudo("studio-3", "networksetup -setdhcp 'Thunderbolt 1'")
    assert "inet " not in lab4.ssh("studio-3", "ifconfig en2").stdout
    assert lab4.ssh("studio-3", "networksetup -setmanual 'Thunderbolt 1' 10.99.0.1 255.255.255.0",
                    check=False).returncode != 0  # not root
    assert lab4.ssh("studio-3", "networksetup -getinfo 'Nope'", check=False).returncode == 4


def test_rdma_ctl_enable_refused_outside_recovery(lab4):
    p = lab4.sudo("studio-2", "rdma_ctl disable", check=False)  # as reported from real Macs, even as root
    assert p.returncode == 77 and "This tool needs to be executed from Recovery OS" in p.stderr
    assert lab4.ssh("studio-2", "rdma_ctl status").stdout == "enabled\n"


def test_systemsetup_setremotelogin_needs_full_disk_access(lab4):
    p = lab4.sudo("studio-2", "systemsetup -setremotelogin on", check=False)
    assert p.returncode == 1 and "requires Full Disk Access privileges" in p.stdout


def test_recovery_refused_while_on(lab4):
    p = lab4.macfleet("lab", "recovery", "--name", lab4.name, "studio-4", "--", "rdma_ctl", "enable", check=False)
    assert p.returncode == 2


def test_not_root_is_usage_error(monkeypatch):
    from macfleet.errors import UsageError
    from macfleet.lab import control

    monkeypatch.setattr(control.os, "geteuid", lambda: 1000)
    with pytest.raises(UsageError) as exc:
        control.require_root_linux()
    assert exc.value.exit_code == 2 and "root" in exc.value.message
