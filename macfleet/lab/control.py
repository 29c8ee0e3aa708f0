"""What `macfleet lab ...` does: up, down, status, power, recovery, ssh. Linux, root.

State directory `/run/macfleet-lab/<name>/` (see docs/lab.md):
  lab.json              the plan (spec.py): nodes, models, cables, addresses, rates, inventory path
  id_ed25519            the client key (a copy of the inventory's), for `lab ssh`
  userland/             the node-side stand-ins (a copy of macfleet/lab/macos) + run.py
  supervisor.pid/.log   the per-lab supervisor (reboots, boot delays, power requests)
  nodes/<node>/         persist.json, boot.json, lock, request, standins/, fs/, sshd/, init.log, sshd.log
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

from macfleet.constants import EXO_MODELS_DIR, PMSET_DEFAULTS
from macfleet.errors import LabError, UsageError
from macfleet.inventory.model import ProbeSettings

from . import faults, netns
from . import spec as specmod
from .macos import common as userland
from .macos.cli import COMMANDS
from .state import (
    NODE_PYTHON,
    STATE_NAMES,
    STATE_ROOT,
    alive,
    check_name,
    check_node,
    lab_dir,
    load,
    node_dir,
    power,  # noqa: F401  (the CLI, tests and bench reach it here)
    request_power,
    require_root_linux,
    ssh_argv,  # noqa: F401
    supervisor_alive,
    wait_power,
)

MOUNT_POINTS = ("/Users", "/Library", "/opt/homebrew", "/opt/exo", "/etc/pf.anchors")
CREATED_MARK = STATE_ROOT / ".created"
HOSTS_HEADER = "# Written by `macfleet lab up --name {name}`; `macfleet lab down --name {name}` removes it.\n"
REQUIRED_TOOLS = ("ip", "tc", "ssh", "ssh-keygen", "unshare", "mount", "sudo", "nft")


# ---------------------------------------------------------------------------------------------
# Preconditions and paths
# ---------------------------------------------------------------------------------------------


def _missing_tools() -> list[str]:
    missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None]
    if not os.path.exists("/usr/sbin/sshd"):
        missing.append("sshd (/usr/sbin/sshd)")
    if not os.path.exists(NODE_PYTHON):
        missing.append(NODE_PYTHON)
    return missing


# ---------------------------------------------------------------------------------------------
# Host pieces shared by labs: the admin user, mount points
# ---------------------------------------------------------------------------------------------


# The supplementary groups of a stock macOS admin account besides its primary group (staff), as `id` lists them on a
# GitHub macOS runner (uutils/coreutils#2416): 18 groups in all, more than the 16 macOS lets a process carry
# (macos/devtools.py NGROUPS_MAX). The lab's admin gets as many, as lab-owned host groups (`mfl-` + the Mac's name
# without `com.apple.`, within Linux's 32 characters; never a host group that grants anything), so getgrouplist()
# answers 18 on a node as on a Mac.
MAC_ADMIN_GROUPS = ("wheel", "everyone", "localaccounts", "_appserverusr", "admin", "_appserveradm", "_lpadmin",
                    "_webdeveloper", "com.apple.access_ssh", "com.apple.sharepoint.group.1", "_appstore",
                    "_lpoperator", "_developer", "_analyticsusers", "com.apple.access_ftp",
                    "com.apple.access_screensharing", "com.apple.access_remote_ae")


def _ensure_admin_groups(user: str, created: set[str]) -> None:
    import grp

    names = [f"mfl-{g.removeprefix('com.apple.')}" for g in MAC_ADMIN_GROUPS]
    for name in names:
        try:
            grp.getgrnam(name)
        except KeyError:
            subprocess.run(["groupadd", "-r", name], check=True, capture_output=True)
            created.add(f"group:{name}")
    subprocess.run(["usermod", "-a", "-G", ",".join(names), user], check=True, capture_output=True)


def _ensure_host_pieces(user: str) -> None:
    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    os.chmod(STATE_ROOT, 0o755)
    created = set(userland.read_json(CREATED_MARK, []) or [])
    for mp in MOUNT_POINTS:
        if not os.path.exists(mp):
            os.makedirs(mp, mode=0o755)
            created.add(mp)
    try:
        try:
            pwd.getpwnam(user)
        except KeyError:
            subprocess.run(["useradd", "-M", "-d", f"/Users/{user}", "-s", "/bin/bash", "-U", user], check=True,
                           capture_output=True)
            created.add(f"user:{user}")
        _ensure_admin_groups(user, created)
    finally:  # what was created is removed with the last lab, even when a later step failed
        userland.write_json(CREATED_MARK, sorted(created))
    subprocess.run(["usermod", "-p", "*", user], check=True, capture_output=True)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)


def _release_host_pieces() -> None:
    """Remove mount points and the user we created, once no lab is left."""
    others = [p for p in STATE_ROOT.iterdir() if p.is_dir()] if STATE_ROOT.exists() else []
    if others:
        return
    items = userland.read_json(CREATED_MARK, []) or []
    for item in sorted(items, key=lambda i: i.startswith("group:")):  # the user before its groups
        if item.startswith("user:"):
            subprocess.run(["userdel", item[5:]], capture_output=True)
        elif item.startswith("group:"):
            subprocess.run(["groupdel", item[6:]], capture_output=True)
        else:
            with contextlib.suppress(OSError):
                os.rmdir(item)
    with contextlib.suppress(OSError):
        CREATED_MARK.unlink()
    with contextlib.suppress(OSError):
        STATE_ROOT.rmdir()


@contextlib.contextmanager
def _host_lock():
    """Held while a lab takes or gives back what labs share on this machine (its management subnet's index, the
    admin user and groups, the mount points): two `lab up`s at once (two checkouts, a test run's workers) must
    not take one index, nor one `lab down` remove the user another lab is starting with. Beside STATE_ROOT, not in
    it: the last lab's `down` removes STATE_ROOT."""
    import fcntl

    STATE_ROOT.parent.mkdir(parents=True, exist_ok=True)
    with open(STATE_ROOT.parent / f".{STATE_ROOT.name}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _allocate_index() -> int:
    used = set()
    if STATE_ROOT.exists():
        for p in STATE_ROOT.iterdir():
            data = userland.read_json(p / "lab.json") if p.is_dir() else None
            if data:
                used.add(data["index"])
    links = set(netns.links_root())
    for i in range(1, 255):
        if i not in used and f"mfb{i}" not in links:
            return i
    raise LabError("no free management subnet in 198.18.0.0/16 (254 labs up?)")


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


def _install_userland(d: Path) -> Path:
    src = Path(__file__).parent / "macos"
    dst = d / "userland" / "macos"
    dst.mkdir(parents=True)
    for f in src.glob("*.py"):
        shutil.copy2(f, dst / f.name)
    run_py = d / "userland" / "run.py"
    run_py.write_text("import sys\n\nfrom macos.cli import main\n\nsys.exit(main())\n")
    subprocess.run([NODE_PYTHON, "-m", "compileall", "-q", str(dst)], capture_output=True)
    if shutil.which("iperf3"):  # Homebrew's iperf3 on a node is a copy of Debian's (the nodes' /usr/bin hides it)
        shutil.copy2(shutil.which("iperf3"), d / "userland" / "iperf3")
    for p in [d / "userland", *d.joinpath("userland").rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() or p.name == "iperf3" else 0o644)
    return run_py


def _keygen(path: Path, comment: str) -> subprocess.Popen:
    return subprocess.Popen(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# As macOS ships sshd: OpenSSH's defaults (MaxSessions 10 channels per connection, MaxStartups 10:30:100
# unauthenticated connections, TCP forwarding allowed, so a node can be a jump host) plus macOS's
# sshd_config.d/100-macos.conf (AcceptEnv LANG LC_*). Unlike macOS, only key logins are allowed.
SSHD_CONFIG = """\
# sshd of simulated Mac {node} (macfleet lab {lab})
Port 22
ListenAddress 0.0.0.0
HostKey {dir}/sshd/ssh_host_ed25519_key
PidFile none
AuthorizedKeysFile .ssh/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin no
AllowUsers {user}
StrictModes yes
UseDNS no
PrintMotd no
MaxStartups 10:30:100
MaxSessions 10
MaxAuthTries 6
LoginGraceTime 120
AllowTcpForwarding yes
AcceptEnv LANG LC_*
LogLevel ERROR
Subsystem sftp internal-sftp
"""


def _persist_initial(lab: dict, node: str, fresh: bool) -> dict:
    from . import prepared
    from .macos import network, prefs, system

    class _Shim:  # just enough of macos.common.Node for default_services()
        def __init__(self):
            self.ports = lab["models"][lab["nodes"][node]["model"]]["ports"]

    addresses = {int(r): tuple(v) for r, v in lab["addresses"][node].items()}
    pmset = dict(system.PMSET_FRESH)
    if not fresh:
        pmset.update({k: str(v) for k, v in PMSET_DEFAULTS.items()})  # what bootstrap sets
    return {
        "rdma": not fresh,
        "services": network.default_services(_Shim(), fresh=fresh, addresses=addresses),
        "pmset": pmset,
        "filevault": False,
        "names": {"ComputerName": node, "LocalHostName": node},
        "os": {"version": "26.5.1", "build": "25F80"},
        "mtu": {},
        "spotlight_off": [],  # bootstrap switches no volume's indexing off (playbooks/roles/spotlight)
        "auto_login_user": None,
        # Software Update: every automatic action on (lab/macos/prefs.py); a prepared node as bootstrap leaves it
        "prefs": prefs.UPDATE_PREFS_FRESH if fresh else prepared.update_prefs(),
    }


def _prepare_node(lab: dict, d: Path, node: str, run_py: Path, pubkey: str, uid: int, gid: int) -> None:
    nd = d / "nodes" / node
    for sub in ("standins", "sshd", "fs/Users", "fs/Library/LaunchDaemons", "fs/Library/LaunchAgents",
                "fs/Library/Preferences", "fs/homebrew/bin", "fs/sudoers.d", "fs/Users/Shared", "fs/exo",
                "fs/pf.anchors"):
        (nd / sub).mkdir(parents=True, exist_ok=True)
    for p in (nd, nd / "standins", nd / "fs", nd / "fs/Users", nd / "fs/Library", nd / "fs/homebrew", nd / "fs/exo",
              nd / "fs/pf.anchors"):
        os.chmod(p, 0o755)
    (nd / "lock").touch(mode=0o644)
    os.chmod(nd / "fs/Users/Shared", 0o1777)
    (nd / "fs/tmp").mkdir(exist_ok=True)
    os.chmod(nd / "fs/tmp", 0o1777)  # each Mac its own /tmp (the Command Line Tools' placeholder lives there)
    _write_standins(nd, run_py)
    user = lab["user"]
    for p in (nd / "fs/exo", nd / "fs/homebrew", nd / "fs/homebrew/bin"):
        os.chown(p, uid, gid)  # user-owned, as Homebrew's prefix is on a Mac
    home = nd / "fs/Users" / user
    for sub in (".ssh", "Library/LaunchAgents", "Library/Logs", ".exo"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    (home / ".ssh/authorized_keys").write_text(pubkey)
    for p in [home, *home.rglob("*")]:
        os.chown(p, uid, gid)
    os.chmod(home, 0o755)
    os.chmod(home / ".ssh", 0o700)
    os.chmod(home / ".ssh/authorized_keys", 0o600)
    _write_sudo(lab, nd, user)
    _write_homebrew(nd, uid, gid, formulae=not lab["fresh"])
    if not lab["fresh"]:
        _write_prepared(lab, nd, node, uid)
    (nd / "sshd/sshd_config").write_text(SSHD_CONFIG.format(node=node, lab=lab["name"], dir=nd, user=user))
    (nd / "run").mkdir(exist_ok=True)
    (nd / "run" / "lock").touch()
    userland.write_json(nd / "run" / "jobs.json", {})
    for p in (nd / "run", nd / "run" / "lock", nd / "run" / "jobs.json"):
        os.chown(p, uid, gid)
    userland.write_json(nd / "persist.json", _persist_initial(lab, node, lab["fresh"]))
    userland.write_json(nd / "boot.json", {"power": "off"})


def standin_wrapper(userland_dir: Path, nd: Path, cmd: str) -> str:
    """A stand-in command: a Python script the kernel hands to the lab's own interpreter (one shebang argument,
    `-SE`: no site, no PYTHON* variables), which calls the stand-ins' dispatcher for this node. A script rather
    than `/bin/sh` + exec spares each call a shell's start; NODE_PYTHON, not the node's /usr/bin/python3 (the
    Command Line Tools' stub on a fresh Mac)."""
    return (f"#!{NODE_PYTHON} -SE\n"
            f"import sys\n"
            f"sys.path[0] = {str(userland_dir)!r}\n"
            f"from macos.cli import main\n"
            f"sys.exit(main([{str(nd)!r}, {cmd!r}, *sys.argv[1:]]))\n")


def _write_standins(nd: Path, run_py: Path) -> None:
    """The macOS commands in front of /usr/bin; /usr/sbin gets links to them (one file per command, so sudo
    matches a /sbin/x rule and a /usr/bin/x rule alike); /usr/bin/python3 is the Command Line Tools stub."""
    from .macos import devtools

    (nd / "standins-sbin").mkdir(exist_ok=True)
    os.chmod(nd / "standins-sbin", 0o755)
    for cmd in (*COMMANDS, "ping"):
        if cmd == "brew":
            continue  # Homebrew's, in HOMEBREW_BIN
        w = nd / "standins" / cmd
        w.write_text(standin_wrapper(run_py.parent, nd, cmd))
        os.chmod(w, 0o755)
        (nd / "standins-sbin" / cmd).symlink_to(f"/usr/bin/{cmd}")
    stub = nd / "standins" / "python3"
    stub.write_text(devtools.python3_stub())
    os.chmod(stub, 0o755)
    # macOS has no iperf3 (Homebrew's comes with bootstrap): an overlay whiteout hides Debian's /usr/bin/iperf3
    if not os.path.lexists(nd / "standins" / "iperf3"):
        os.mknod(nd / "standins" / "iperf3", stat.S_IFCHR | 0o000, os.makedev(0, 0))


ADMIN_RULE = """\
# As macOS's /etc/sudoers: an administrator runs anything with his password.
{user} ALL = (ALL) ALL
Defaults:{user} lecture=never
"""


def _write_sudo(lab: dict, nd: Path, user: str) -> None:
    """sudo asks the admin's password (checked against the node's own record); a prepared node also has the scoped
    drop-in bootstrap installs."""
    from . import prepared

    os.chmod(nd / "fs/sudoers.d", 0o755)
    rule = nd / "fs/sudoers.d" / "lab-admin"
    rule.write_text(ADMIN_RULE.format(user=user))
    os.chmod(rule, 0o440)
    if not lab["fresh"]:
        drop_in = nd / "fs/sudoers.d" / prepared.SUDOERS_FILE
        drop_in.write_text(prepared.render("sudoers", "macfleet.sudoers.j2", sudoers_user=user))
        os.chmod(drop_in, 0o440)


# sudo's PAM stack on a node: the admin's password is checked against that Mac's own record (nodes/<node>/
# admin-password.hash) by the lab's checkpw, not against the host's /etc/shadow, which every lab shares (and
# which the host rewrites by rename, detaching any bind mount of it).
PAM_SUDO = """\
#%PAM-1.0
# macfleet lab {node}: the admin's password is this Mac's own
auth    [success=done default=ignore]  pam_exec.so quiet expose_authtok seteuid {checkpw} {hashfile}
auth    requisite                      pam_deny.so
@include common-account
session required pam_limits.so
@include common-session-noninteractive
"""
CHECKPW = """\
import hashlib, hmac, sys
token = sys.stdin.buffer.read().split(b"\\0")[0].rstrip(b"\\n")
algo, rounds, salt, digest = open(sys.argv[1]).read().split("$")
mine = hashlib.pbkdf2_hmac("sha256", token, bytes.fromhex(salt), int(rounds)).hex()
sys.exit(0 if hmac.compare_digest(mine, digest.strip()) else 1)
"""
PASSWORD_ROUNDS = 50_000


def _write_pam(d: Path, nd: Path, node: str, password: str) -> None:
    """The node's /etc/pam.d (a copy of the host's, sudo's stack replaced) and its password record."""
    import hashlib

    salt = os.urandom(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, PASSWORD_ROUNDS).hex()
    record = nd / "admin-password.hash"
    fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"pbkdf2_sha256${PASSWORD_ROUNDS}${salt.hex()}${digest}\n")
    checkpw = d / "userland" / "checkpw"
    if not checkpw.exists():
        checkpw.write_text(f"#!{NODE_PYTHON} -SE\n" + CHECKPW)
        os.chmod(checkpw, 0o755)
    pam = nd / "fs" / "pam.d"
    shutil.copytree("/etc/pam.d", pam, symlinks=True)
    (pam / "sudo").write_text(PAM_SUDO.format(node=node, checkpw=checkpw, hashfile=record))


def _new_admin_password(d: Path) -> str:
    """A password for this lab's admin (each Mac's own), kept in the state directory only (what the person who
    unboxed the Macs noted; `bootstrap --become-password-file` reads it there), never in the inventory."""
    import secrets

    password = secrets.token_urlsafe(12)
    path = d / "admin-password"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(password + "\n")
    return password


def _write_homebrew(nd: Path, uid: int, gid: int, *, formulae: bool) -> None:
    """Homebrew is there (the runbook has the operator install it); the formulae bootstrap installs (rsync,
    iperf3) only on a prepared node."""
    from .macos import devtools

    brew = nd / "fs/homebrew/bin/brew"
    brew.write_text(standin_wrapper(nd.parent.parent / "userland", nd, "brew"))
    os.chmod(brew, 0o755)
    os.lchown(brew, uid, gid)
    if formulae:
        prefix = nd / "fs/homebrew"
        for name in devtools.FORMULAE:
            if name == "iperf3" and not (nd.parent.parent / "userland" / devtools.IPERF3_COPY).exists():
                continue  # the host has no iperf3 to stand in for Homebrew's
            devtools.install_formula(name, str(prefix), str(nd.parent.parent / "userland"))
        for p in [*(prefix / "bin").iterdir(), *prefix.joinpath("Cellar").rglob("*"), prefix / "Cellar"]:
            os.lchown(p, uid, gid)


def _write_prepared(lab: dict, nd: Path, node: str, uid: int) -> None:
    """What bootstrap leaves (lab/prepared.py renders it from the same templates): the Command Line Tools, the
    wired-limit and pf LaunchDaemons, the anchor, exo's directories (the exo daemon comes with exo)."""
    import grp

    from . import prepared
    from .macos import devtools

    devtools.install_clt(NODE_PYTHON, root=str(nd / "fs"))  # with the Mac's group limit
    model = lab["models"][lab["nodes"][node]["model"]]
    devices = sorted(p["device"] for p in model["ports"] if str(p["receptacle"]) in lab["addresses"][node])
    home = f"/Users/{lab['user']}"
    files = prepared.files(user=lab["user"], home=home, memory_bytes=model["memory_bytes"],
                           controller=lab["controller_address"], interfaces=devices, exo_env=exo_env(lab))
    for path, (content, mode) in files.items():
        if path.endswith(f"{prepared.EXO_LABEL}.plist") or path.startswith("/etc/sudoers.d/"):
            continue  # the exo daemon comes with exo (_install_exo); sudoers in _write_sudo
        target = nd / "fs" / _fs_relative(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        os.chmod(target, mode)
    staff = grp.getgrnam("staff").gr_gid
    for sub in (".exo", ".exo/exo_log", EXO_MODELS_DIR.removeprefix("~/")):
        p = nd / "fs/Users" / lab["user"] / sub
        p.mkdir(parents=True, exist_ok=True)
        os.chown(p, uid, staff)
        os.chmod(p, 0o755)
    os.chown(nd / "fs/exo", uid, staff)


def _fs_relative(path: str) -> str:
    """A node path as its place under nodes/<node>/fs/ (the bind mounts of init.setup_mounts)."""
    for prefix, sub in (("/etc/pf.anchors/", "pf.anchors/"), ("/etc/sudoers.d/", "sudoers.d/"),
                        ("/Library/", "Library/"), ("/Users/", "Users/"), ("/opt/exo/", "exo/")):
        if path.startswith(prefix):
            return sub + path[len(prefix):]
    raise ValueError(path)


# What a Mac's pass runs at once: the inventory's default, which a lab inventory leaves out when it matches.
MAC_LANES: int = ProbeSettings.model_fields["lanes"].default


def exo_env(lab: dict) -> dict[str, str]:
    """exo's environment in the lab: each exo polls its node's commands less often in a big lab."""
    return {"EXO_LAB_REFRESH_S": f"{max(1.0, len(lab['nodes']) / 4):g}"}


def probe_lanes(nodes: int, cores: int) -> int:
    """Commands a pass runs at once on each of `nodes` simulated Macs sharing `cores`. A real Mac has the cores
    for the inventory's default (8); 32 simulated Macs running 8 each keep hundreds of processes waiting for 2
    cores, so that a 15 ms command outlasts its timeout. The pass's work is the same either way; only its queue
    is shorter. Never fewer than 2: a hung `ibv_devinfo` (the rdma-wedge fault) holds its lane, and the node's
    other commands must still be read."""
    return max(2, min(MAC_LANES, 16 * cores // max(1, nodes)))


def _write_inventory(lab: dict, inv: Path, key: Path, known_hosts: str) -> None:
    import yaml

    inv.mkdir(parents=True, exist_ok=True)
    children = {}
    for mesh in lab["meshes"]:
        hosts = {}
        for node in mesh["nodes"]:
            n = lab["nodes"][node]
            hosts[node] = {
                "ansible_host": n["address"],
                "ansible_user": lab["user"],
                "macfleet_model": lab["models"][n["model"]]["model_identifier"],
            }
        children[mesh["name"]] = {"hosts": hosts}
    text = HOSTS_HEADER.format(name=lab["name"]) + yaml.safe_dump({"macfleet": {"children": children}},
                                                                    sort_keys=False)
    (inv / "hosts.yml").write_text(text)
    gv = inv / "group_vars" / "all"
    gv.mkdir(parents=True, exist_ok=True)
    group_vars = {"macfleet_ssh": {"private_key_file": "id_ed25519", "known_hosts_file": "known_hosts"},
                  "macfleet_exo": {"env": exo_env(lab)}}
    lanes = probe_lanes(len(lab["nodes"]), os.cpu_count() or 1)
    if lanes != MAC_LANES:
        group_vars["macfleet_probes"] = {"lanes": lanes}
    (gv / "macfleet.yml").write_text("# Written by `macfleet lab up`.\n" + yaml.safe_dump(group_vars, sort_keys=False))
    (gv / "ansible.yml").write_text(
        "# Written by `macfleet lab up`: strict host keys, the lab's client key, Debian's python on the nodes.\n"
        'ansible_ssh_private_key_file: "{{ inventory_dir }}/id_ed25519"\n'
        # The path is quoted twice: for ssh's option parser, then for the shell-like split Ansible makes.
        "ansible_ssh_common_args: >-\n"
        "  -o {{ ('UserKnownHostsFile=\"' ~ inventory_dir ~ '/known_hosts\"') | quote }}\n"
        "  -o StrictHostKeyChecking=yes\n"
        "ansible_python_interpreter: /usr/bin/python3\n"
        "ansible_become_method: sudo\n"
    )
    shutil.copy2(key, inv / "id_ed25519")
    os.chmod(inv / "id_ed25519", 0o600)
    shutil.copy2(key.with_suffix(".pub"), inv / "id_ed25519.pub")
    # a fresh Mac's key is not known yet: `macfleet trust` records it
    (inv / "known_hosts").write_text("" if lab["fresh"] else known_hosts)
    # The admin's password stays in the state directory (admin-password, 0600), never here: Ansible reads every
    # file of an inventory directory as an inventory source, and a password there becomes a host name.
    (inv / "admin-password").unlink(missing_ok=True)  # where an older `lab up` put it


# ---------------------------------------------------------------------------------------------
# Boot and shutdown of one node (used by up and by the supervisor)
# ---------------------------------------------------------------------------------------------


def new_boot_state() -> dict:
    return {
        "power": "booting",
        "boot_id": str(uuid.uuid4()),
        "booted_at": time.time(),
        "domain_uuids": {str(r): str(uuid.uuid4()).upper() for r in range(1, 9)},
        "service_uuids": {"ip": str(uuid.uuid4()).upper(), "rdma": str(uuid.uuid4()).upper()},
        "wired_limit_mb": 0,
    }


# What a boot that went through the FileVault unlock screen keeps from its start: the kernel booted before the
# unlock, which only mounts the Data volume and starts what depends on it (apple_ssh_and_filevault(7)).
KEPT_ACROSS_UNLOCK = ("boot_id", "booted_at", "domain_uuids", "service_uuids")


def boot_node(lab: dict, node: str, *, unlocked: bool = False) -> subprocess.Popen:
    """Power on: fresh boot state (new domain UUIDs), links up, then the node's init (mounts, sshd, launchd).
    `unlocked`: the boot continues from the unlock screen (preboot_node), keeping its start."""
    d = lab_dir(lab["name"])
    nd = d / "nodes" / node
    n = lab["nodes"][node]

    def reset(data: dict) -> None:
        keep = {k: data[k] for k in ("faults", *(KEPT_ACROSS_UNLOCK if unlocked else ())) if k in data}
        data.clear()
        data.update(new_boot_state(), **keep)

    node_state = userland.Node(userland.Lab(d), node)
    node_state.update("boot", reset)
    node_state.update("jobs", lambda j: j.clear())
    faults.on_boot(lab, node)
    netns.links_up(lab, node)
    log = open(nd / "init.log", "a")  # noqa: SIM115
    run_py = d / "userland" / "run.py"
    return subprocess.Popen(
        ["ip", "netns", "exec", n["ns"], "unshare", "-m", "--propagation", "private",
         NODE_PYTHON, "-S", "-E", str(run_py), str(nd), "__init__"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True,
    )


def preboot_node(lab: dict, node: str) -> subprocess.Popen:
    """FileVault on and no authrestart: the node waits at its unlock screen (`locked`), where only the pre-boot
    sshd answers, on the management port, with a host key of its own (lab/preboot.py, apple_ssh_and_filevault(7))."""
    d = lab_dir(lab["name"])
    nd = d / "nodes" / node
    key = nd / "sshd" / "preboot_host_ed25519_key"
    # made once, kept across boots as a Mac keeps its own
    if not key.exists() and _keygen(key, f"root@{node} (unlock screen)").wait() != 0:
        raise LabError(f"ssh-keygen failed for {node}'s unlock-screen key")
    userland.Node(userland.Lab(d), node).update(
        "boot", lambda b: b.update({**new_boot_state(), "power": "locked", "locked_at": time.time(),
                                    **{k: b[k] for k in ("faults",) if k in b}}))
    netns.management_up(lab, node)
    log = open(nd / "preboot.log", "a")  # noqa: SIM115
    return subprocess.Popen(
        ["ip", "netns", "exec", lab["nodes"][node]["ns"], sys.executable, "-m", "macfleet.lab.preboot", str(nd),
         lab["user"]],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True,
    )


def kill_node_processes(ns: str) -> None:
    for sig in (signal.SIGKILL, signal.SIGKILL, signal.SIGKILL):
        pids = netns.netns_pids(ns)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.time() + 2
        while time.time() < deadline and any(alive(p) for p in pids):
            time.sleep(0.02)


def halt_node(lab: dict, node: str) -> None:
    """Power off as a Mac going down: every process ends (SSH drops), links go down, volatile state is lost."""
    d = lab_dir(lab["name"])
    node_state = userland.Node(userland.Lab(d), node)
    node_state.update("boot", lambda data: data.__setitem__("power", "shutting-down"))
    kill_node_processes(lab["nodes"][node]["ns"])
    netns.links_down(lab, node)
    node_state.update("jobs", lambda j: j.clear())
    node_state.update("boot", lambda data: data.__setitem__("power", "off"))


# ---------------------------------------------------------------------------------------------
# up / down
# ---------------------------------------------------------------------------------------------


def _ssh_ready(address: str) -> bool:
    try:
        with socket.create_connection((address, 22), timeout=0.5) as s:
            s.settimeout(1.0)
            return s.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def wait_ready(lab: dict, nodes: list[str], deadline_s: float) -> None:
    deadline = time.time() + deadline_s
    pending = set(nodes)
    while pending:
        for node in sorted(pending):
            boot = userland.read_json(node_dir(lab["name"], node) / "boot.json", {})
            if boot.get("power") == "on" and _ssh_ready(lab["nodes"][node]["address"]):
                pending.discard(node)
        if not pending:
            return
        if time.time() > deadline:
            raise LabError(f"nodes did not come up within {deadline_s:.0f}s: {', '.join(sorted(pending))}",
                           hint=f"see {lab_dir(lab['name'])}/nodes/<node>/init.log")
        time.sleep(0.1)


def up(
    name: str = "lab",
    *,
    nodes: int | None = None,
    pods: str | None = None,
    model: str = "mac-studio-m3-ultra",
    fresh: bool = False,
    exo: bool = True,
    tb_rate: str = specmod.DEFAULT_TB_RATE,
    mgmt_rate: str = specmod.DEFAULT_MGMT_RATE,
    boot_seconds: float = 3.0,
    inventories: Path = Path("inventories"),
    all_ports: bool = False,
    latency: float = 1.0,
) -> dict:
    require_root_linux()
    check_name(name)
    missing = _missing_tools()
    if missing:
        raise LabError("missing tools: " + ", ".join(missing), hint="run scripts/setup (Debian/Ubuntu, as root)")
    d = lab_dir(name)
    inv = (inventories / name).resolve()

    def make_plan(index: int) -> dict:
        return specmod.plan(name, index=index, nodes=nodes, pods=pods, model=model, fresh=fresh, tb_rate=tb_rate,
                            mgmt_rate=mgmt_rate, boot_seconds=boot_seconds, inventory_dir=str(inv),
                            exo=exo and not fresh, all_ports=all_ports, latency=latency)

    make_plan(1)  # every option checked before anything changes
    if (d / "lab.json").exists():
        if supervisor_alive(name):
            raise UsageError(f"lab {name!r} is already up", hint=f"`macfleet lab down --name {name}` first")
        down(name)  # stale pieces of a crashed lab of this very name
    with _host_lock():
        lab = make_plan(_allocate_index())
        taken = sorted({n["ns"] for n in lab["nodes"].values()} & set(netns.netns_list()))
        if taken:
            raise UsageError(f"network namespace {taken[0]} already exists and is not lab {name!r}'s",
                             hint=f"choose another name, or remove it with `ip netns del {taken[0]}` if it is stale")
        _ensure_host_pieces(lab["user"])
        d.mkdir(parents=True)
        os.chmod(d, 0o755)
        userland.write_json(d / "lab.json", lab)  # first, so `down` can always clean up after a crash
    try:
        _up(lab, d, inv)
    except BaseException:
        with contextlib.suppress(Exception):
            down(name)
        raise
    return {**lab, "took_s": up_seconds(name)}


def up_seconds(name: str) -> float:
    """How long the last `lab up` of NAME took, for reports and the bench."""
    return float((userland.read_json(lab_dir(name) / "timings.json", {}) or {}).get("up_s", 0.0))


def _up(lab: dict, d: Path, inv: Path) -> None:
    t0 = time.time()
    pw = pwd.getpwnam(lab["user"])
    run_py = _install_userland(d)
    (d / "nodes").mkdir()
    key = d / "id_ed25519"
    procs = [_keygen(key, f"macfleet-lab-{lab['name']}")]
    for node in lab["nodes"]:
        (d / "nodes" / node / "sshd").mkdir(parents=True)
        procs.append(_keygen(d / "nodes" / node / "sshd" / "ssh_host_ed25519_key", f"root@{node}"))
    for p in procs:
        if p.wait() != 0:
            raise LabError("ssh-keygen failed")
    pubkey = key.with_suffix(".pub").read_text()
    password = _new_admin_password(d)
    known = []
    for node, n in lab["nodes"].items():
        _prepare_node(lab, d, node, run_py, pubkey, pw.pw_uid, pw.pw_gid)
        _write_pam(d, d / "nodes" / node, node, password)
        hk = (d / "nodes" / node / "sshd" / "ssh_host_ed25519_key.pub").read_text().split()
        known.append(f"{n['address']} {hk[0]} {hk[1]}\n")
    netns.create(lab)
    (d / "known_hosts").write_text("".join(known))
    _write_inventory(lab, inv, key, "".join(known))
    if lab["exo"]:
        _install_exo(lab, d)
    for node in lab["nodes"]:
        boot_node(lab, node)
    _start_supervisor(lab["name"])
    wait_ready(lab, list(lab["nodes"]), 30 + 0.5 * len(lab["nodes"]))
    userland.write_json(d / "timings.json", {"up_s": round(time.time() - t0, 2)})


EXO_VERSION = "1.0.71"


def _install_exo(lab: dict, d: Path) -> None:
    """Install the exo stand-in (macfleet/lab/exo/) on every node and its LaunchAgent (RunAtLoad, KeepAlive).

    Per node: /opt/exo/releases/<version>/ (from `exo.build.write_build`), /opt/exo/current -> that release,
    the LaunchDaemon bootstrap installs (EXO_LABEL) running /opt/exo/current/bin/exo. Skipped (silently) when
    the exo stand-in is not importable; `--no-exo` / `--fresh` skip it on purpose."""
    try:
        from .exo import build as exo_build
    except ImportError:
        return
    from . import prepared
    pw = pwd.getpwnam(lab["user"])
    home = Path("/Users") / lab["user"]
    for node in lab["nodes"]:
        nd = d / "nodes" / node
        root = nd / "fs" / "exo"
        exo_build.write_build(root / "releases" / EXO_VERSION, EXO_VERSION)
        (root / "current").symlink_to(f"releases/{EXO_VERSION}")
        # the LaunchDaemon bootstrap installs (runs as the admin, starts with nobody logged in)
        plist = prepared.render("exo", "exo.plist.j2", exo_user=lab["user"], exo_home=str(home),
                                exo_env=exo_env(lab),
                                exo_models_dir=EXO_MODELS_DIR.replace("~", str(home), 1))
        target = nd / "fs" / _fs_relative(f"/Library/LaunchDaemons/{prepared.EXO_LABEL}.plist")
        target.write_text(plist)
        os.chmod(target, 0o644)
        logs = nd / "fs" / "Users" / lab["user"] / ".exo" / "exo_log"
        logs.mkdir(parents=True, exist_ok=True)
        for p in root.rglob("*"):
            os.lchown(p, pw.pw_uid, pw.pw_gid)


def down(name: str = "lab") -> None:
    """Idempotent: ends the supervisor and every node process, removes namespaces, links, state, inventory."""
    require_root_linux()
    d = lab_dir(name)
    lab = userland.read_json(d / "lab.json")
    _stop_supervisor(name)
    # Exactly this lab's namespaces, as its plan names them: never by prefix (lab `a` must not take `a-2`'s).
    ns_names = sorted({n["ns"] for n in lab["nodes"].values()}) if lab else []
    present = set(netns.netns_list())
    for ns in ns_names:
        if ns in present:
            kill_node_processes(ns)
    bridge = lab["bridge"] if lab else None
    veths = [n["host_veth"] for n in lab["nodes"].values()] if lab else []
    netns.destroy(ns_names, bridge, veths)
    if lab:
        inv = Path(lab["inventory_dir"])
        hosts = inv / "hosts.yml"
        if hosts.exists() and hosts.read_text().startswith(HOSTS_HEADER.format(name=name)):
            shutil.rmtree(inv, ignore_errors=True)
            with contextlib.suppress(OSError):
                inv.parent.rmdir()  # ./inventories, if we left it empty
    with _host_lock():
        shutil.rmtree(d, ignore_errors=True)
        _release_host_pieces()


# ---------------------------------------------------------------------------------------------
# Supervisor
# ---------------------------------------------------------------------------------------------


def _start_supervisor(name: str) -> None:
    d = lab_dir(name)
    log = open(d / "supervisor.log", "a")  # noqa: SIM115
    p = subprocess.Popen([sys.executable, "-m", "macfleet.lab.supervisor", name], stdin=subprocess.DEVNULL,
                         stdout=log, stderr=log, start_new_session=True, close_fds=True,
                         env={**os.environ, "MACFLEET_LAB_STATE": str(STATE_ROOT)})
    (d / "supervisor.pid").write_text(str(p.pid))


def _stop_supervisor(name: str) -> None:
    if not supervisor_alive(name):
        return
    pid = int((lab_dir(name) / "supervisor.pid").read_text())
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.time() + 3
    while alive(pid) and time.time() < deadline:
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------------------------------------
# status / power / recovery / ssh
# ---------------------------------------------------------------------------------------------

def status(name: str = "lab") -> list[dict]:
    lab = load(name)
    present = set(netns.netns_list())
    active = faults.active_by_node(name)
    out = []
    for node, n in lab["nodes"].items():
        boot = userland.read_json(node_dir(name, node) / "boot.json", {})
        state = STATE_NAMES.get(boot.get("power", "off"), boot.get("power", "unknown"))
        if n["ns"] not in present:
            state = "missing"
        out.append({"name": node, "mesh": n["mesh"], "state": state, "address": n["address"],
                    "faults": active.get(node, [])})
    return out


RECOVERY_COMMANDS = {"rdma_ctl", "csrutil", "nvram"}


def recovery(name: str, node: str, argv: list[str]) -> subprocess.CompletedProcess:
    """Run a command in the node's Recovery OS (only while it is off), then boot it, as an operator would."""
    require_root_linux()
    lab = load(name)
    check_node(lab, node)
    if not argv:
        raise UsageError("no command given", hint="e.g. `macfleet lab recovery studio-1 -- rdma_ctl enable`")
    cur = userland.read_json(node_dir(name, node) / "boot.json", {}).get("power", "off")
    if cur != "off":
        raise UsageError(f"{node} is {STATE_NAMES.get(cur, cur)}: Recovery is reached only from a shut-down Mac",
                         hint=f"`macfleet lab power {node} off --name {name}` first (hold the power button)")
    if argv[0] not in RECOVERY_COMMANDS:
        p = subprocess.CompletedProcess(argv, 127, "", f"-sh: {argv[0]}: command not found\n")
    else:
        run_py = lab_dir(name) / "userland" / "run.py"
        p = subprocess.run([NODE_PYTHON, "-S", "-E", str(run_py), str(node_dir(name, node)), *argv],
                           capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "MACFLEET_LAB_RECOVERY": "1"})
    if supervisor_alive(name):
        request_power(name, node, "on")
        wait_power(name, node, {"booting", "on"}, 30)
    return p
