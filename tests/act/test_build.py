"""act/build.py without a node: the source snapshot, and the programs it runs on the builder, run here with the
local Python (they are the same text a Mac's /usr/bin/python3 gets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from macfleet.act import build
from macfleet.act.transfer import local_manifest
from macfleet.errors import UsageError
from macfleet.judge.rollout import Manifest


def _tree(root: Path) -> Path:
    (root / "src" / "exo").mkdir(parents=True)
    (root / "src" / "exo" / "main.py").write_text("print('exo')\n")
    (root / "pyproject.toml").write_text('[project]\nname = "exo"\nversion = "0.3.70"\n')
    for junk in (".git/HEAD", ".venv/bin/python", "dashboard/node_modules/x/index.js", "src/exo/__pycache__/m.pyc"):
        (root / junk).parent.mkdir(parents=True, exist_ok=True)
        (root / junk).write_text("junk")
    (root / "dashboard" / "package.json").write_text("{}")
    return root


def test_snapshot_leaves_out_vcs_and_what_the_build_makes_again(tmp_path: Path) -> None:
    snap = build.snapshot_source(_tree(tmp_path / "src"), tmp_path / "snap")
    files = sorted(p.relative_to(snap).as_posix() for p in snap.rglob("*") if p.is_file())
    assert files == ["dashboard/package.json", "pyproject.toml", "src/exo/main.py"]


def test_snapshot_copies_an_inside_link_as_its_file_and_refuses_one_leading_out(tmp_path: Path) -> None:
    src = _tree(tmp_path / "src")
    (src / "README").symlink_to("pyproject.toml")
    snap = build.snapshot_source(src, tmp_path / "snap")
    assert not (snap / "README").is_symlink() and (snap / "README").read_text().startswith("[project]")
    (tmp_path / "secret").write_text("s")
    (src / "leak").symlink_to(tmp_path / "secret")
    with pytest.raises(UsageError, match="leading out of the source tree"):
        build.snapshot_source(src, tmp_path / "snap2")


def _run(program: str, *argv: str, stdin: str = "") -> dict:
    p = subprocess.run([sys.executable, "-c", program, *argv], input=stdin, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_the_manifest_computed_on_the_node_matches_the_controllers(tmp_path: Path) -> None:
    rel = tmp_path / "rel"
    (rel / "lib").mkdir(parents=True)
    (rel / "lib" / "a.py").write_bytes(os.urandom(5000))
    (rel / "run").write_text("#!/bin/sh\n")
    (rel / "run").chmod(0o755)
    want = local_manifest(rel)
    (rel / ".venv" / "bin").mkdir(parents=True)
    (rel / ".venv" / "bin" / "python").symlink_to("/usr/bin/python3")
    (rel / ".venv" / "pyvenv.cfg").write_text("home = /opt/py/bin\nversion = 3.13\n")
    (rel / "bin").symlink_to(".venv/bin")  # a link to a directory: recorded, not followed
    d = _run(build._MANIFEST_PROGRAM, str(rel), "100")
    got = {f["path"]: f for f in d["files"]}
    for f in want.files:
        assert got[f.path]["digest"] == f.digest and got[f.path]["size"] == f.size
        assert got[f.path]["executable"] == f.executable
    assert sorted((x["path"], x["target"]) for x in d["links"]) == [(".venv/bin/python", "/usr/bin/python3"),
                                                                    ("bin", ".venv/bin")]
    assert d["venv_homes"] == {".venv/pyvenv.cfg": "/opt/py/bin"}
    assert _run(build._MANIFEST_PROGRAM, str(rel), "2") == {"error": "more than 2 files"}


def test_the_links_check_names_what_differs(tmp_path: Path) -> None:
    (tmp_path / "ok").symlink_to("t")
    (tmp_path / "other").symlink_to("u")
    links = [{"path": "ok", "target": "t"}, {"path": "other", "target": "t"}, {"path": "gone", "target": "t"}]
    assert _run(build._LINKS_PROGRAM, str(tmp_path), stdin=json.dumps(links)) == {
        "other": "points at u, expected t", "gone": "absent"}


def test_the_missing_paths_check(tmp_path: Path) -> None:
    assert _run(build._MISSING_PROGRAM, stdin=json.dumps([str(tmp_path), str(tmp_path / "no")])) == \
        [str(tmp_path / "no")]


def _build(tmp_path: Path, command: str, timeout_s: float) -> subprocess.Popen:
    """The build program as run_build starts it: the command on stdin (never in an argv), stdin left open."""
    rel = tmp_path / "rel"
    rel.mkdir(exist_ok=True)
    p = subprocess.Popen([sys.executable, "-c", build._BUILD_PROGRAM, str(rel), str(tmp_path / "build.log"),
                          str(timeout_s), build.BUILD_PATH], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    p.stdin.write(json.dumps({"command": command}) + "\n")
    p.stdin.flush()
    return p


def test_the_build_runs_in_the_release_directory_and_keeps_its_tail(tmp_path: Path) -> None:
    p = _build(tmp_path, 'echo "in $PWD as $MACFLEET_RELEASE"; pwd -P; echo oops >&2; exit 3', 30)
    out = p.stdout.read()  # stdin stays open as ssh's does while the controller waits
    p.wait(30)
    p.stdin.close()
    d = json.loads(out.strip().splitlines()[-1])
    rel = str(tmp_path / "rel")
    assert d["rc"] == 3 and not d["timed_out"] and not d["cancelled"]
    assert d["tail"] == f"in {rel} as rel\n{os.path.realpath(rel)}\noops\n"
    assert (tmp_path / "build.log").read_text() == d["tail"]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").is_file() and Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_a_build_past_its_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    p = _build(tmp_path, f"sleep 30 & echo $! > {pidfile}; wait", 1)
    out = p.stdout.read()  # stdin stays open: only the timeout ends it
    p.wait(30)
    p.stdin.close()
    d = json.loads(out.strip().splitlines()[-1])
    assert d["timed_out"] and d["rc"] == -9 and not d["cancelled"]
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while not _gone(child):  # the whole process group was killed, the backgrounded child too
        assert time.monotonic() < deadline, "the build's child outlived its timeout"
        time.sleep(0.05)


def test_a_build_whose_controller_goes_away_is_killed(tmp_path: Path) -> None:
    p = _build(tmp_path, "sleep 30", 60)
    time.sleep(0.5)
    t0 = time.monotonic()
    p.stdin.close()  # what ssh does when the controller's end of its stdin closes
    out = p.stdout.read()
    p.wait(30)
    d = json.loads(out.strip().splitlines()[-1])
    assert d["cancelled"] and d["rc"] == -9 and time.monotonic() - t0 < 20


def test_a_landed_manifest_round_trips() -> None:
    m = Manifest(files=())
    assert Manifest.model_validate_json(m.model_dump_json()) == m
