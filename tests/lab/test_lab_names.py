"""A lab name is checked before anything happens, and names one lab exactly.

`lab down` and `lab up` run as root and delete directories and namespaces: a name that is a path (`/tmp/x`,
`../x`, `.`, empty) or a link out of the state root must be refused with exit 2 and nothing touched; a lab `a`
must never take the namespaces or processes of a lab `a-2`, even when its own command is refused.
These run against a private state root (MACFLEET_LAB_STATE), so no other lab on the machine is at risk.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lab.conftest import LAB_PREFIX  # as the shared labs are named (a checkout's, a worker's)

pytestmark = pytest.mark.lab


def _macfleet(*args: str, state: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "MACFLEET_LAB_STATE": str(state)}
    return subprocess.run([sys.executable, "-m", "macfleet", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def planted(tmp_path) -> Path:
    """tmp/state (a private state root holding another lab's directory) and tmp/x beside it."""
    (tmp_path / "state" / "other").mkdir(parents=True)
    (tmp_path / "state" / "other" / "lab.json").write_text("{}")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "precious").write_text("keep me")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "precious").write_text("keep me")
    (tmp_path / "state" / "evil").symlink_to(tmp_path / "outside")
    return tmp_path


@pytest.mark.parametrize("name", ["{tmp}/x", "../x", "", ".", "..", "evil/..", "a b", "Lab", "-x", "lab-", "a" * 33,
                                  "a\x1b[31m", "a\n"])
def test_check_name_accepts_only_a_plain_name(name) -> None:
    from macfleet.errors import UsageError
    from macfleet.lab import state

    with pytest.raises(UsageError, match="bad lab name"):
        state.check_name(name)


@pytest.mark.parametrize(("command", "name"), [
    *[(c, n) for c in ("down", "up") for n in ("{tmp}/x", "../x", "", ".")],
    ("status", ".."), ("faults", ".."), ("fault", "../x"), ("power", "../x"),
])
def test_a_name_that_is_not_a_name_is_refused_and_nothing_is_touched(planted, command, name) -> None:
    name = name.format(tmp=planted)
    before = _tree(planted)
    extra = {"fault": ["sleep-on", "studio-1"], "power": ["studio-1", "off"]}.get(command, [])
    p = _macfleet("lab", command, "--name", name, *extra, state=planted / "state", cwd=planted)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "bad lab name" in p.stderr and "Traceback" not in p.stderr
    assert _tree(planted) == before


def test_a_name_that_links_out_of_the_state_root_is_refused(planted) -> None:
    before = _tree(planted)
    p = _macfleet("lab", "down", "--name", "evil", state=planted / "state", cwd=planted)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "outside the lab state directory" in p.stderr
    assert _tree(planted) == before


def _netns(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", *args], capture_output=True, text=True)


@pytest.fixture
def neighbour():
    """A namespace shaped like a node of lab `<prefix>hostile-2`, with a process in it; removed at the end."""
    ns = f"mfl-{LAB_PREFIX}hostile-2-studio-1"
    _netns("add", ns)
    proc = subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "600"])
    try:
        yield ns, proc
    finally:
        proc.kill()
        proc.wait()
        _netns("del", ns)


def test_names_match_exactly_and_a_refused_up_changes_nothing(tmp_path, neighbour) -> None:
    ns, proc = neighbour
    name = f"{LAB_PREFIX}hostile"
    state = tmp_path / "state"
    p = _macfleet("lab", "up", "--name", name, "--pods", "0x3", state=state, cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert ns in _netns("list").stdout and proc.poll() is None
    assert not state.exists() and not (tmp_path / "inventories").exists()
    p = _macfleet("lab", "down", "--name", name, state=state, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert ns in _netns("list").stdout and proc.poll() is None


def test_up_refuses_a_namespace_it_would_reuse(tmp_path) -> None:
    name = f"{LAB_PREFIX}squat"
    ns = f"mfl-{name}-studio-1"
    _netns("add", ns)
    try:
        p = _macfleet("lab", "up", "--name", name, "--nodes", "2", state=tmp_path / "state", cwd=tmp_path)
        assert p.returncode == 2, p.stdout + p.stderr
        assert ns in p.stderr and "already exists" in p.stderr
        assert ns in _netns("list").stdout
        assert not (tmp_path / "state" / name).exists()
    finally:
        _netns("del", ns)


def test_the_ssh_hint_of_lab_up_works_as_printed(lab_small) -> None:
    hint = next(ln for ln in lab_small.up_output.splitlines() if ln.startswith("try: "))[len("try: "):]
    argv = shlex.split(hint)
    assert argv[:3] == ["macfleet", "lab", "ssh"]
    p = subprocess.run([sys.executable, "-m", "macfleet", *argv[1:]], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ProductVersion" in p.stdout
