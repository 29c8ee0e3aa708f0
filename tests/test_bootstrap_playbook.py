"""The bootstrap roles' generated files, checked by the tools that read them: the sudoers drop-in by visudo,
its Ansible line against the command line Ansible's own sudo plugin builds, the launchd plists by plistlib."""

from __future__ import annotations

import fnmatch
import plistlib
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
ROLES = ROOT / "playbooks" / "roles"
BOOTSTRAP_ROLES = ("preflight", "clt", "probe", "sudoers", "homebrew", "pmset", "gpu", "exo", "spotlight", "pf",
                   "ipplan", "filevault")


def render(role: str, template: str, **values: object) -> str:
    # Ansible's template module: trim_blocks on, lstrip_blocks off
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    defaults = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text()) or {}
    return env.from_string((ROLES / role / "templates" / template).read_text()).render(**{**defaults, **values})


def play_vars(name: str, **inventory: object) -> object:
    """A variable of bootstrap's plays (playbooks/vars/bootstrap.yml over vars/defaults.yml) as Ansible resolves
    it from this inventory: every variable it names rendered first (Ansible's `combine` as a plain merge)."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["combine"] = lambda first, *more: {k: v for d in (first, *more) for k, v in d.items()}
    play = yaml.safe_load((ROOT / "playbooks" / "vars" / "bootstrap.yml").read_text())
    ctx: dict[str, object] = {**yaml.safe_load((ROOT / "playbooks" / "vars" / "defaults.yml").read_text()),
                              **inventory}

    def resolve(var: str) -> object:
        if var not in ctx:
            text = play[var]
            for used in sorted(set(re.findall(r"\b[a-z_]+\b", text)) & set(play) - {var}):
                resolve(used)
            ctx[var] = yaml.safe_load(env.from_string(text).render(**ctx)) if isinstance(text, str) else text
        return ctx[var]

    return resolve(name)


def sudoers(**values: object) -> str:
    return render("sudoers", "macfleet.sudoers.j2", **{"sudoers_user": "admin", **values})


@pytest.mark.parametrize("role", (*BOOTSTRAP_ROLES, "llama_rpc"))
def test_every_role_has_defaults_specs_and_a_readme(role: str) -> None:
    specs = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text()) or {}
    assert set(defaults) <= set(options), f"{role}: defaults without an argument spec"
    assert all(name.startswith(f"{role}_") for name in options)
    assert (ROLES / role / "README.md").is_file()


@pytest.mark.skipif(shutil.which("visudo") is None, reason="needs visudo")
@pytest.mark.parametrize("allow_ansible", [True, False])
def test_sudoers_drop_in_passes_visudo(tmp_path: Path, allow_ansible: bool) -> None:
    f = tmp_path / "macfleet"
    f.write_text(sudoers(sudoers_allow_ansible=allow_ansible, sudoers_extra_commands=["/usr/bin/true x"]))
    p = subprocess.run(["visudo", "-cf", str(f)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    rule = [line for line in f.read_text().splitlines() if line.startswith("admin ")]
    assert rule == ["admin ALL = (root) NOPASSWD: MACFLEET_READ, MACFLEET_POWER, MACFLEET_EXO, MACFLEET_LLAMA"
                    + (", MACFLEET_ANSIBLE" if allow_ansible else "") + ", MACFLEET_EXTRA"]
    assert "ALL = (root) NOPASSWD: ALL" not in f.read_text()


def test_sudoers_ansible_line_matches_what_ansible_runs_and_nothing_wider() -> None:
    from ansible.plugins.loader import become_loader, shell_loader

    from macfleet.flow.bootstrap import BECOME_PROBE

    become = become_loader.get("sudo")
    become.set_options(direct={"become_user": "root"})
    shell = shell_loader.get("sh")
    shell.executable = "/bin/sh"  # what Ansible's action plugins set before a module runs
    text = sudoers().replace("\\\n", "")  # sudoers continues a line with a backslash
    alias = re.search(r"^Cmnd_Alias MACFLEET_ANSIBLE = (.*)$", text, re.M)
    assert alias is not None
    entries = [entry.strip().split(" ", 1) for entry in alias.group(1).split(", ")]

    def allowed(argv: list[str]) -> bool:  # sudo matches the arguments as one string
        return any(argv[0] == command and fnmatch.fnmatchcase(" ".join(argv[1:]), args) for command, args in entries)

    def as_root(line: str) -> list[str]:
        words = shlex.split(become.build_become_command(line, shell))
        return words[words.index("root") + 1:]

    assert allowed(as_root("/usr/bin/python3"))  # a module, with pipelining
    probe = "/usr/bin/python3 -I -c " + shlex.quote("import sys\nprint(1)") + " " + shlex.quote('{"files": []}')
    assert allowed(as_root(probe))  # bootstrap's probe (a raw task)
    assert allowed(list(BECOME_PROBE.argv[2:]))  # macfleet's own check that sudo runs the probe
    assert not allowed(["/bin/sh", "-c", "rm -rf /"])
    assert not allowed(["/bin/sh", "-c", "echo BECOME-SUCCESS-abc ; /bin/rm -rf /"])


@pytest.mark.parametrize(("role", "template", "values"), [
    ("gpu", "wired-limit.plist.j2", {"gpu_target_mb": 507904}),
    ("pf", "pf.plist.j2", {}),
    ("exo", "exo.plist.j2", {"exo_user": "admin", "exo_home": "/Users/admin", "exo_env": {"EXO_X": "a&b"},
                             "exo_args": ["--x"], "exo_port": 52416}),
])
def test_launchd_plists_parse(role: str, template: str, values: dict) -> None:
    job = plistlib.loads(render(role, template, **values).encode())
    assert job["Label"].startswith("org.macfleet.")
    assert job["RunAtLoad"] is True
    assert job["ProgramArguments"][0].startswith("/")
    if role == "exo":
        assert job["UserName"] == "admin" and job["KeepAlive"] is True
        assert job["ProgramArguments"] == ["/opt/exo/current/bin/exo", "--api-port", "52416", "--x"]
        assert job["EnvironmentVariables"]["EXO_X"] == "a&b"
    if role == "gpu":
        assert job["ProgramArguments"] == ["/usr/sbin/sysctl", "iogpu.wired_limit_mb=507904"]


def test_pf_anchor_lets_exo_ports_in_only_from_the_mesh_and_the_controller() -> None:
    # the release `current` points at listens on zenoh 52414/tcp and discovery 52413/udp (exo since 09f9ea313)
    text = render("pf", "macfleet.pf.j2", pf_sources=["10.213.0.0/16", "198.18.1.1"], pf_interfaces=["en3", "en4"],
                  pf_release_tcp_ports=[52414], pf_release_udp_ports=[52413])
    rules = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert rules == [
        "table <macfleet_exo_peers> const { 10.213.0.0/16, 198.18.1.1 }",
        "pass in quick on lo0 proto tcp to any port { 52415, 52414 }",
        "pass in quick on en3 proto tcp to any port { 52415, 52414 }",
        "pass in quick on en4 proto tcp to any port { 52415, 52414 }",
        "pass in quick proto tcp from <macfleet_exo_peers> to any port { 52415, 52414 }",
        "block in quick proto tcp to any port { 52415, 52414 }",
        "pass in quick on lo0 proto udp to any port { 52413 }",
        "pass in quick on en3 proto udp to any port { 52413 }",
        "pass in quick on en4 proto udp to any port { 52413 }",
        "pass in quick proto udp from <macfleet_exo_peers> to any port { 52413 }",
        "block in quick proto udp to any port { 52413 }",
        "pass in quick on lo0 proto tcp to any port { 50052 }",
        "pass in quick on en3 proto tcp to any port { 50052 }",
        "pass in quick on en4 proto tcp to any port { 50052 }",
        "block in quick proto tcp to any port { 50052 }",
    ]


def test_pf_anchor_of_a_release_without_fixed_peer_ports_lists_the_api_only() -> None:
    """exo 1.0.x listens for libp2p on a port the OS picks (v1.0.71 `--libp2p-port` default 0): no rule can name
    it, and the anchor lists the API port alone, the inventory's (macfleet_exo.port)."""
    text = render("pf", "macfleet.pf.j2", pf_sources=["10.213.0.0/16"], pf_interfaces=["en3"], pf_tcp_ports=[52416],
                  pf_mesh_tcp_ports=[])
    rules = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert rules == [
        "table <macfleet_exo_peers> const { 10.213.0.0/16 }",
        "pass in quick on lo0 proto tcp to any port { 52416 }",
        "pass in quick on en3 proto tcp to any port { 52416 }",
        "pass in quick proto tcp from <macfleet_exo_peers> to any port { 52416 }",
        "block in quick proto tcp to any port { 52416 }",
    ]


def test_pf_anchor_lets_rpc_server_in_on_the_thunderbolt_ports_only_at_the_inventory_port() -> None:
    """hostile.md row 11: rpc-server (unauthenticated) was reached from the LAN; its port is in the anchor, let in on
    the Thunderbolt interfaces only (not from the sources, not from the controller), at the inventory's port."""
    from macfleet.inventory.model import LlamaSettings

    def ports(**inventory: object) -> list[int]:
        return play_vars("pf_mesh_tcp_ports", **inventory)

    # the one default; the roles' defaults repeat it for plain Ansible (tests/test_facts_once.py checks them all)
    assert ports() == [LlamaSettings().rpc_port]
    assert ports(macfleet_llama={"enabled": True, "rpc_port": 50100}) == [50100]
    text = render("pf", "macfleet.pf.j2", pf_sources=["10.213.0.0/16", "198.18.1.1"], pf_interfaces=["en3"],
                  pf_mesh_tcp_ports=[50100])
    rpc = [line for line in text.splitlines() if "50100" in line and not line.startswith("#")]
    assert rpc == ["pass in quick on lo0 proto tcp to any port { 50100 }",
                   "pass in quick on en3 proto tcp to any port { 50100 }",
                   "block in quick proto tcp to any port { 50100 }"]


def test_probe_reads_files_and_commands_in_one_run(tmp_path: Path) -> None:
    """The probe role's script: a file's SHA-1 (what the roles compare with the rendered template), mode and
    owner; a missing file is null, not an empty record; a command's rc and output, a missing one rc 127."""
    import hashlib
    import json
    import os
    import sys

    f = tmp_path / "plist"
    f.write_bytes(b"<plist/>\n")
    f.chmod(0o640)
    request = {"files": [str(f), str(tmp_path), str(tmp_path / "missing")],
               "commands": [["echo", "a b"], ["sh", "-c", "echo err >&2; exit 3"], ["/nonexistent/cmd"]]}
    p = subprocess.run([sys.executable, "-I", str(ROLES / "probe" / "files" / "probe.py")], input=json.dumps(request),
                       capture_output=True, text=True, timeout=60, check=True)
    state = json.loads(p.stdout)
    rec = state["files"][str(f)]
    assert rec["type"] == "file" and rec["mode"] == "0640" and rec["uid"] == os.getuid()
    assert rec["checksum"] == hashlib.sha1(b"<plist/>\n").hexdigest()
    assert state["files"][str(tmp_path)]["type"] == "directory"
    assert state["files"][str(tmp_path / "missing")] is None
    assert state["commands"]["echo a b"] == {"rc": 0, "stdout": "a b\n", "stderr": ""}
    assert state["commands"]["sh -c echo err >&2; exit 3"] == {"rc": 3, "stdout": "", "stderr": "err\n"}
    assert state["commands"]["/nonexistent/cmd"]["rc"] == 127


def test_probe_runs_admin_commands_as_the_admin(tmp_path: Path) -> None:
    """Homebrew refuses root, so the probe (run as root) reads `brew list` as the admin: that account's uid,
    home and a plain PATH; an unknown account is a failed read (rc 126), never a read as root."""
    import json
    import os
    import pwd
    import sys

    if os.geteuid() != 0:
        pytest.skip("switching to another account needs root")
    nobody = pwd.getpwnam("nobody")
    request = {"admin": "nobody", "admin_commands": [["id", "-u"], ["sh", "-c", "echo $HOME"]],
               "commands": [["id", "-u"]]}
    probe = str(ROLES / "probe" / "files" / "probe.py")
    p = subprocess.run([sys.executable, "-I", probe], input=json.dumps(request), capture_output=True, text=True,
                       timeout=60, check=True)
    state = json.loads(p.stdout)
    assert state["admin_commands"]["id -u"]["stdout"].strip() == str(nobody.pw_uid)
    assert state["admin_commands"]["sh -c echo $HOME"]["stdout"].strip() == nobody.pw_dir
    assert state["commands"]["id -u"]["stdout"].strip() == "0"
    request = {"admin": "no-such-admin", "admin_commands": [["id", "-u"]]}
    p = subprocess.run([sys.executable, "-I", probe], input=json.dumps(request), capture_output=True, text=True,
                       timeout=60, check=True)
    assert json.loads(p.stdout)["admin_commands"]["id -u"]["rc"] == 126


def test_probe_with_a_macos_admin_in_18_groups_still_answers(tmp_path: Path) -> None:
    """macOS lets a process carry 16 supplementary groups and CPython refuses a longer extra_groups list before it
    forks; a stock macOS admin is in 18 (uutils/coreutils#2416). Under the lab's copy of that limit (the one its
    Macs' Python carries), with getgrouplist answering 18 groups, the probe still prints its JSON: the admin's
    command runs with 16 groups (as root) or fails as that one command (not root); a command Python cannot even
    start (a NUL in its argv) is that command's failure, and the others are read."""
    import json
    import os
    import pwd
    import sys

    from macfleet.lab.macos import devtools

    limits = tmp_path / "limits.py"
    limits.write_text(devtools.LIMITS_SOURCE)
    me = pwd.getpwuid(os.getuid()).pw_name
    request = {"admin": me, "admin_commands": [["id", "-G"]], "commands": [["echo", "ok"], ["echo", "a\x00b"]]}
    driver = ("import os, runpy, sys\n"
              f"exec(open({str(limits)!r}).read())\n"
              "os.getgrouplist = lambda name, gid: [gid] + list(range(60000, 60017))\n"
              f"sys.argv = ['probe.py', {json.dumps(request)!r}]\n"
              f"runpy.run_path({str(ROLES / 'probe' / 'files' / 'probe.py')!r}, run_name='__main__')\n")
    p = subprocess.run([sys.executable, "-I", "-c", driver], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    state = json.loads(p.stdout)
    assert state["commands"]["echo ok"] == {"rc": 0, "stdout": "ok\n", "stderr": ""}
    assert state["commands"]["echo a\x00b"]["rc"] == 126
    admin = state["admin_commands"]["id -G"]
    assert "too many groups" not in admin["stderr"]
    if os.geteuid() == 0:
        assert admin["rc"] == 0 and len(admin["stdout"].split()) == 16, admin
    else:
        assert admin["rc"] == 126, admin  # not allowed to switch user: that command's failure


def _ipplan_filters() -> dict:
    import importlib.util

    path = ROLES / "ipplan" / "filter_plugins" / "ipplan_state.py"
    spec = importlib.util.spec_from_file_location("ipplan_state", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()


CAPTURES = ROOT / "tests" / "fixtures" / "captures"


def _read(kind: str, name: str, rc: int = 0) -> dict:
    return {"rc": rc, "stdout": (CAPTURES / kind / name).read_text(), "stderr": ""}


def test_ipplan_reads_real_captures() -> None:
    """The ipplan role's rules on real macOS outputs: a disabled service "(*) Name", bridge0's members, a manual
    address, a port's MTU."""
    f = _ipplan_filters()
    order = _read("service-order", "macos__networksetup_listnetworkserviceorder_exo_services_1.txt")
    assert f["ipplan_service_enabled"](order, "EXO Thunderbolt 1")
    assert not f["ipplan_service_enabled"](order, "EXO Thunderbolt 3")
    stock = _read("service-order", "macos__networksetup_listnetworkserviceorder_stock_1.txt")
    assert f["ipplan_service_enabled"](stock, "Thunderbolt Bridge")
    bridge0 = f["ipplan_bridge0"](_read("ifconfig", "macos__ifconfig_bridge0_active_169254_tb4_1.txt"))
    assert f["ipplan_bridge_member"](bridge0, "en2") and not f["ipplan_bridge_member"](bridge0, "en5")
    manual = _read("getinfo", "macos__networksetup_getinfo_manual_1.txt")
    assert f["ipplan_release_manual"](manual)
    ifconfig = _read("ifconfig", "macos__ifconfig_en2_tb_ip_tn3205_1.txt")
    port = {"device": "en2", "service": "EXO Thunderbolt 1", "address": "192.168.100.100", "netmask": "255.255.255.0"}
    assert f["ipplan_port_needs"](port, manual, order, ifconfig, 1500) == {
        "create": False, "enable": False, "address": False, "mtu": False}
    assert f["ipplan_port_needs"]({**port, "address": "10.213.0.1"}, manual, order, ifconfig, 9000) == {
        "create": False, "enable": False, "address": True, "mtu": True}
    missing = {"rc": 4, "stdout": "EXO Thunderbolt 3 is not a recognized network service.\n", "stderr": ""}
    assert f["ipplan_port_needs"]({**port, "service": "EXO Thunderbolt 3"}, missing, order, ifconfig, 1500) == {
        "create": True, "enable": False, "address": True, "mtu": False}


def test_ipplan_pending_only_when_something_is_to_do_or_unread() -> None:
    f = _ipplan_filters()
    order = _read("service-order", "macos__networksetup_listnetworkserviceorder_exo_services_1.txt")
    ifconfig = _read("ifconfig", "macos__ifconfig_en2_tb_ip_tn3205_1.txt")
    manual = _read("getinfo", "macos__networksetup_getinfo_manual_1.txt")
    dhcp = _read("getinfo", "macos__networksetup_getinfo_thunderbolt_bridge_noip_1.txt")
    port = {"device": "en2", "service": "EXO Thunderbolt 1", "address": "192.168.100.100", "netmask": "255.255.255.0"}
    commands = {"networksetup -listnetworkserviceorder": order, "ifconfig": ifconfig,
                "networksetup -getinfo EXO Thunderbolt 1": manual, "networksetup -getinfo EXO Thunderbolt 2": dhcp}

    def pending(commands: dict = commands, **over: object) -> bool:
        args = {"interfaces": [port], "mtu": 1500, "bridge_services": ["Thunderbolt Bridge"],
                "thunderbolt_devices": ["en2", "en3"], "release_services": [], **over}
        return f["ipplan_pending"](commands, "networksetup", "ifconfig", args["interfaces"], args["mtu"],
                                   args["bridge_services"], args["thunderbolt_devices"], args["release_services"])

    assert not pending()
    assert pending(bridge_services=["EXO Thunderbolt 2"])  # a bridge service still enabled
    assert pending(interfaces=[{**port, "address": "10.213.0.9"}])
    assert pending(mtu=9000)
    assert pending(release_services=[{"service": "EXO Thunderbolt 1", "device": "en2"}])  # manual: back to DHCP
    assert not pending(release_services=[{"service": "EXO Thunderbolt 2", "device": "en3"}])
    assert pending({**commands, "ifconfig": {"rc": 1, "stdout": "", "stderr": "boom"}})  # unread is not "in place"
    with_bridge = {**commands, "ifconfig": _read("ifconfig", "macos__ifconfig_bridge0_active_169254_tb4_1.txt")}
    assert pending(with_bridge, mtu=1500, interfaces=[])  # en2 and en3 are still bridge0 members


def test_exo_is_told_the_models_directory_rollout_fills() -> None:
    """exo reads its models directory from EXO_DEFAULT_MODELS_DIR (exo 15f1b61f4, src/exo/shared/constants.py;
    EXO_MODELS_DIR before): the daemon's environment carries macfleet_exo.models_dir, which exo_env cannot
    contradict."""
    job = plistlib.loads(render("exo", "exo.plist.j2", exo_user="admin", exo_home="/Users/admin",
                                exo_models_dir="/Volumes/Models/exo.noindex",
                                exo_env={"EXO_DEFAULT_MODELS_DIR": "/elsewhere", "EXO_X": "1"}).encode())
    env = job["EnvironmentVariables"]
    assert env["EXO_DEFAULT_MODELS_DIR"] == env["EXO_MODELS_DIR"] == "/Volumes/Models/exo.noindex"
    assert env["EXO_X"] == "1"


def test_bootstrap_follows_the_inventorys_exo_port_and_power_else_macfleets_defaults() -> None:
    """architecture.md §3 item 5: the packet filter's ports are derived from macfleet_exo.port (a non-default port
    is let in, not left blocked); exo's daemon is told the port whatever it is; item 6: with no macfleet_power,
    bootstrap and power.yml set the model's pmset defaults, displaysleep included."""
    from macfleet.inventory.model import ExoSettings, PowerSettings

    assert play_vars("pf_tcp_ports") == [ExoSettings().port]
    assert play_vars("pf_tcp_ports", macfleet_exo={"port": 52416}) == [52416]
    assert play_vars("exo_port", macfleet_exo={"models_dir": "/Volumes/M/x.noindex"}) == ExoSettings().port
    assert play_vars("pmset_settings") == PowerSettings().pmset
    assert play_vars("pmset_settings", macfleet_power={"pmset": {"sleep": 0}}) == {"sleep": 0}
    power = yaml.safe_load((ROOT / "playbooks" / "power.yml").read_text())[0]["vars"]
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["combine"] = lambda first, *more: {k: v for d in (first, *more) for k, v in d.items()}
    defaults = yaml.safe_load((ROOT / "playbooks" / "vars" / "defaults.yml").read_text())
    power_inventory = yaml.safe_load(env.from_string(power["power_inventory"]).render(**defaults))
    assert yaml.safe_load(env.from_string(power["pmset_settings"]).render(power_inventory=power_inventory)) == (
        PowerSettings().pmset)
    port = plistlib.loads(render("exo", "exo.plist.j2", exo_user="admin", exo_home="/Users/admin",
                                 exo_models_dir="/Users/admin/.exo/models").encode())["ProgramArguments"]
    assert port[1:3] == ["--api-port", str(ExoSettings().port)]


def test_sudoers_lets_the_admin_stop_and_start_exo_under_its_label() -> None:
    """architecture.md §3 item 5: the drop-in took exo's label as a literal, so a changed exo_label broke stop and
    start; bootstrap passes the exo role's label to the sudoers role."""
    text = sudoers(sudoers_exo_label="com.example.exo")
    assert "system/com.example.exo," in text and "/Library/LaunchDaemons/com.example.exo.plist" in text
    assert play_vars("sudoers_exo_label", exo_label="com.example.exo") == "com.example.exo"


def test_pf_anchor_lets_the_client_networks_reach_exos_api_only() -> None:
    """Issue 27 item 4: people reach exo's dashboard and API from the networks the inventory lists
    (macfleet_exo.clients, one source: the plays read it through bootstrap's vars), on exo's API port only: not
    on the release's peer ports, not on rpc-server's. None by default."""
    assert play_vars("pf_client_sources") == []
    clients = ["192.168.10.0/24", "2001:db8:5::/48"]
    assert play_vars("pf_client_sources", macfleet_exo={"clients": clients}) == clients
    text = render("pf", "macfleet.pf.j2", pf_sources=["10.213.0.0/16"], pf_interfaces=["en3"],
                  pf_client_sources=clients, pf_release_tcp_ports=[52414], pf_release_udp_ports=[52413])
    rules = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert rules[:2] == ["table <macfleet_exo_peers> const { 10.213.0.0/16 }",
                         "table <macfleet_exo_clients> const { 192.168.10.0/24, 2001:db8:5::/48 }"]
    assert [r for r in rules if "macfleet_exo_clients>" in r and r.startswith("pass")] == [
        "pass in quick proto tcp from <macfleet_exo_clients> to any port { 52415 }"]
    tcp_block = rules.index("block in quick proto tcp to any port { 52415, 52414 }")
    assert rules.index("pass in quick proto tcp from <macfleet_exo_clients> to any port { 52415 }") < tcp_block


def test_client_networks_are_checked_in_the_inventory() -> None:
    from pydantic import ValidationError

    from macfleet.inventory.model import ExoSettings

    assert ExoSettings(clients=["192.168.10.0/24", "10.1.2.3"]).clients == ["192.168.10.0/24", "10.1.2.3"]
    for bad, says in (("0.0.0.0/0", "is everyone"), ("::/0", "is everyone"), ("laptop", "an IPv4 or IPv6"),
                      ("192.168.10.5/24", "an IPv4 or IPv6"), ("10.0.0.0/8 ; pass all", "an IPv4 or IPv6"),
                      ("fe80::1%en0", "an IPv4 or IPv6")):
        with pytest.raises(ValidationError, match=says):
            ExoSettings(clients=[bad])
