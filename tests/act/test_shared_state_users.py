"""One cluster state per inventory, whoever runs the command (issue 28 item 1): two real Unix users, an
operator and the healer's user, who share a group, run `python -m macfleet` against the same inventory. Each
is refused by the lock the other holds; the operator's `watch --reset` clears the state the healer wrote; what
is created is setgid, group-shared and never world-writable; an unsafe directory is refused (exit 2).

Needs root (it creates the users and the group, and removes them after) and util-linux's runuser and unshare.
When the interpreter lives under a home no other user may enter (pyenv under /root), each user's process
runs in a private mount namespace where that home is enterable: nothing of the machine is changed."""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_INVENTORY

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not (shutil.which("runuser") and shutil.which("unshare")),
                                reason="needs root, runuser and unshare (it creates two users)")

REPO = Path(__file__).resolve().parents[2]
_RUN = f"mfst{os.getpid()}"  # several suites may run at once on one machine: names of this run only
GROUP = f"{_RUN}-ops"
OPERATOR, HEALER = f"{_RUN}-op", f"{_RUN}-heal"
# the interpreter's home made enterable inside the process's own mount namespace ($1: a spare mount point)
ENTERABLE = ('mount --bind "$HOMEDIR" "$1" && mount -t tmpfs -o mode=0755 none "$HOMEDIR" && mkdir -p "$SUB" '
             '&& mount --bind "$1/${SUB#$HOMEDIR/}" "$SUB" && shift && exec "$@"')
HOLD = """import sys, time
from macfleet.act.lock import ClusterLock, lock_path
with ClusterLock(lock_path(sys.argv[1])).hold(sys.argv[2], "holding for the test"):
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.fixture(scope="module")
def users():
    subprocess.run(["groupadd", "--system", GROUP], check=True)
    try:
        for u in (OPERATOR, HEALER):
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "-G", GROUP, u],
                           check=True)
        yield
    finally:
        for u in (OPERATOR, HEALER):
            subprocess.run(["userdel", u], check=False, capture_output=True)
        subprocess.run(["groupdel", GROUP], check=False, capture_output=True)


@pytest.fixture
def world(users):
    """A place every user may enter: the inventory (nodes that refuse SSH at once), each user's own state,
    and the cluster state root as an administrator creates it (`install -d -m 2770 -g GROUP`)."""
    base = Path(tempfile.mkdtemp(prefix="mfst-"))
    try:
        base.chmod(0o755)
        inv = base / "inv"
        shutil.copytree(EXAMPLE_INVENTORY, inv)
        (inv / "hosts.yml").write_text("macfleet:\n  children:\n    mesh1:\n      hosts:\n" + "".join(
            f"        studio-{i}:\n          ansible_host: 127.0.0.{i}\n          ansible_port: 1\n"
            f"          macfleet_model: \"Mac15,14\"\n" for i in (1, 2)))
        (inv / "group_vars" / "all" / "watch.yml").write_text(
            "macfleet_remediation:\n  checks: [reachable]\n  debounce: 1\n  ladder: {}\n")
        subprocess.run(["chmod", "-R", "a+rX", str(inv)], check=True)
        root = base / "state"
        root.mkdir()
        os.chown(root, 0, grp.getgrnam(GROUP).gr_gid)
        root.chmod(0o2770)
        for u in (OPERATOR, HEALER):
            (base / u).mkdir()
            shutil.chown(base / u, u, u)
        yield base
    finally:
        shutil.rmtree(base)


def run_as(user: str, world: Path, *argv: str, stdin=None) -> subprocess.Popen:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "HOME": str(world / user),
           "MACFLEET_STATE_DIR": str(world / user), "MACFLEET_CLUSTER_STATE_DIR": str(world / "state"),
           "MACFLEET_CONFIG": str(world / user / "none.toml"), "LC_ALL": "C.UTF-8"}
    cmd = ["runuser", "-u", user, "--", sys.executable, *argv]
    home = Path(sys.prefix).resolve().parents[-2]  # e.g. /root for /root/.pyenv/versions/3.11.7
    if home != Path("/") and not os.stat(home).st_mode & stat.S_IXOTH:
        spare = world / f"mnt-{user}-{len(argv)}"
        spare.mkdir(exist_ok=True)
        env |= {"HOMEDIR": str(home), "SUB": str(Path(sys.prefix).resolve().parents[-3])}
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", ENTERABLE, "sh", str(spare), *cmd]
    return subprocess.Popen(cmd, env=env, cwd=world, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def macfleet(user: str, world: Path, *args: str) -> subprocess.CompletedProcess:
    p = run_as(user, world, "-m", "macfleet", *args, "-i", str(world / "inv"))
    out, err = p.communicate(timeout=120)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def test_the_operator_and_the_healer_share_one_lock_one_state_and_safe_modes(world: Path) -> None:
    healer_probe = macfleet(HEALER, world, "watch", "--once")
    assert healer_probe.returncode == 3, healer_probe.stderr  # every node unreachable (docs/cli.md)
    [shared] = list((world / "state").iterdir())
    assert {p.name for p in shared.iterdir()} >= {"watch-state.json", "audit.jsonl"}
    gid = grp.getgrnam(GROUP).gr_gid
    st = shared.stat()
    assert stat.S_IMODE(st.st_mode) == 0o2770 and st.st_gid == gid  # setgid: its files take the group
    for f in shared.iterdir():
        fst = f.stat()
        assert stat.S_IMODE(fst.st_mode) == 0o660 and fst.st_gid == gid, f

    for holder, other in ((OPERATOR, HEALER), (HEALER, OPERATOR)):
        hold = run_as(holder, world, "-c", HOLD, str(world / "inv"), f"reboot by {holder}", stdin=subprocess.PIPE)
        try:
            assert hold.stdout.readline() == "held\n", hold.stderr.read()
            refused = macfleet(other, world, "reboot", "--reason", "test", "--json")
            assert refused.returncode == 1, refused.stdout + refused.stderr
            out = json.loads(refused.stdout)  # reboot's own refusal, as for every reason it refuses (docs/cli.md)
            assert out["result"] == "refused" and f"locked by reboot by {holder}" in out["refusal"], out
        finally:
            hold.communicate(input="", timeout=60)
        assert hold.returncode == 0, hold.stderr

    state = json.loads((shared / "watch-state.json").read_text())
    assert "mesh1" in state["meshes"]  # written by the healer's user
    reset = macfleet(OPERATOR, world, "watch", "--reset")
    assert reset.returncode == 0, reset.stderr
    assert json.loads((shared / "watch-state.json").read_text())["meshes"] == {}  # what the healer reads
    again = macfleet(HEALER, world, "watch", "--once")  # the healer replaces the operator's file
    assert "mesh1" in json.loads((shared / "watch-state.json").read_text())["meshes"], again.stderr

    shared.chmod(0o2777)
    unsafe = macfleet(OPERATOR, world, "reboot", "--reason", "test")
    assert unsafe.returncode == 2 and "world-writable" in unsafe.stderr, unsafe.stderr
    shared.chmod(0o700)
    os.chown(shared, pwd.getpwnam(HEALER).pw_uid, gid)
    private = macfleet(OPERATOR, world, "reboot", "--reason", "test")
    assert private.returncode == 2 and "not shared with a group of yours" in private.stderr, private.stderr
