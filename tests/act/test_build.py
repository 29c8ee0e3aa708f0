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
    p = _build(tmp_path, "echo started; sleep 30", 60)
    log = tmp_path / "build.log"
    deadline = time.monotonic() + 20
    while not (log.is_file() and "started" in log.read_text()):  # the build runs: now its controller goes
        assert time.monotonic() < deadline, "the build did not start"
        time.sleep(0.05)
    t0 = time.monotonic()
    p.stdin.close()  # what ssh does when the controller's end of its stdin closes
    out = p.stdout.read()
    p.wait(30)
    d = json.loads(out.strip().splitlines()[-1])
    assert d["cancelled"] and d["rc"] == -9 and time.monotonic() - t0 < 20


def test_a_landed_manifest_round_trips() -> None:
    m = Manifest(files=())
    assert Manifest.model_validate_json(m.model_dump_json()) == m


# The parts of exo's pyproject.toml the builder reads (facts of exo's source, not its text): at exo 4466cd532
# and b5375f8, MLX is an optional extra `mlx` and [tool.uv.sources] gives mlx a list of sources, the darwin one a
# git fork; at v1.0.71 there are optional extras but no `mlx` one, and mlx's source is one inline git table.
EXTRA_AND_GIT = """[project]
name = "exo"
version = "0.3.70"
dependencies = [
  "aiofiles>=24.1.0",
]

[project.optional-dependencies]
build = ["nanobind"]
mlx = [
  "mlx==0.32.0",
  "mlx-lm",
]

[tool.uv.sources]
exo-pyo3-bindings = { workspace = true }
mlx = [
  { git = "https://example.invalid/mlx-fork.git", branch = "b", marker = "sys_platform == 'darwin'" },
  { url = "https://example.invalid/mlx.whl", marker = "sys_platform == 'linux'" },
]
mlx-lm = { git = "https://example.invalid/mlx-lm", branch = "b" }
"""
NO_EXTRA_GIT = """[project]
name = "exo"
version = "0.3.70"

[project.optional-dependencies]
cuda = ["mlx-cuda"]

[tool.uv.sources]
mlx = { git = "https://example.invalid/mlx-fork.git", branch = "b", marker = "sys_platform == 'darwin'" }
"""
WHEELS_ONLY = """[project]
name = "exo"
version = "0.3.0"
dependencies = ["mlx>=0.29.3"]
"""


def _tools(tmp_path: Path, developer_dir: str, metal: str | None) -> str:
    """A PATH whose xcode-select and xcrun answer as a Mac's do (their words: MLX's install docs, "Metal not
    found"; actions/runner-images#13094), ahead of the build's own PATH."""
    bin_dir = tmp_path / "tools"
    bin_dir.mkdir(parents=True)
    (bin_dir / "xcode-select").write_text(f"#!/bin/sh\necho {developer_dir}\n")
    if metal is None:
        xcrun = ('#!/bin/sh\necho \'xcrun: error: unable to find utility "metal", not a developer tool or in PATH\''
                 " >&2\nexit 72\n")
    else:
        found = f"{developer_dir}/Toolchains/XcodeDefault.xctoolchain/usr/bin/metal"
        xcrun = f'#!/bin/sh\nif [ "$1" = -f ]; then echo {found}; exit 0; fi\n{metal}\n'
    (bin_dir / "xcrun").write_text(xcrun)
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return f"{bin_dir}:{build.BUILD_PATH}"


def _build_checkout(tmp_path: Path, pyproject: str | None, path: str) -> dict:
    rel = tmp_path / "rel"
    rel.mkdir(parents=True, exist_ok=True)
    if pyproject is not None:
        (rel / "pyproject.toml").write_text(pyproject)
    p = subprocess.Popen([sys.executable, "-c", build._BUILD_PROGRAM, str(rel), str(tmp_path / "build.log"), "30",
                          path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    p.stdin.write(json.dumps({"command": 'echo "extras=[$MACFLEET_UV_EXTRAS]"'}) + "\n")
    p.stdin.flush()
    out = p.stdout.read()  # stdin stays open as ssh's does while the controller waits
    assert p.wait(30) == 0
    p.stdin.close()
    return json.loads(out.strip().splitlines()[-1])


XCODE = "/Applications/Xcode.app/Contents/Developer"


@pytest.mark.parametrize(("pyproject", "extras"), [(EXTRA_AND_GIT, "--extra mlx"), (NO_EXTRA_GIT, ""),
                                                   (WHEELS_ONLY, ""), (None, "")],
                         ids=["extra-and-git", "git-no-extra", "wheels", "no-pyproject"])
def test_the_mlx_extra_is_asked_for_where_the_checkout_has_it(tmp_path: Path, pyproject: str | None,
                                                              extras: str) -> None:
    d = _build_checkout(tmp_path, pyproject, _tools(tmp_path, XCODE, "echo 'Apple metal version 32023.620'"))
    assert d["rc"] == 0 and d["tail"] == f"extras=[{extras}]\n", d
    assert d["checkout"]["extras"] == (["mlx"] if extras else [])


@pytest.mark.parametrize(("developer_dir", "metal", "says"), ids=["clt-only", "no-metal-component"], argvalues=[
    ("/Library/Developer/CommandLineTools", None, "CommandLineTools"),  # the Command Line Tools only
    (XCODE, "echo \"error: cannot execute tool 'metal' due to missing Metal Toolchain; use: xcodebuild "
            "-downloadComponent MetalToolchain\" >&2; exit 1", "missing Metal Toolchain"),  # Xcode 26, no component
])
def test_a_builder_without_xcodes_metal_toolchain_builds_nothing(tmp_path: Path, developer_dir: str,
                                                                 metal: str | None, says: str) -> None:
    from macfleet.judge.build import toolchain_refusal

    d = _build_checkout(tmp_path, EXTRA_AND_GIT, _tools(tmp_path, developer_dir, metal))
    assert "rc" not in d and not (tmp_path / "build.log").exists()
    why = toolchain_refusal("studio-2", "0.3.70-0123456789ab", d["refused"])
    assert says in why and "xcode-select --switch /Applications/Xcode.app/Contents/Developer" in why
    assert "xcodebuild -downloadComponent MetalToolchain" in why and "Nothing was built" in why
    # a checkout that takes MLX as a wheel needs none of it
    assert _build_checkout(tmp_path / "w", WHEELS_ONLY, _tools(tmp_path / "w", developer_dir, metal))["rc"] == 0


# exo's peer-port options as its src/exo/main.py declares them (facts: option, type, default): since 09f9ea313
# `--zenoh-port` 52414 (TCP) and `--discovery-port` 52413 (UDP); at v1.0.71 `--libp2p-port` 0 (OS-assigned).
ZENOH_MAIN = """parser.add_argument("--api-port", type=int, dest="api_port", default=52415)
parser.add_argument(
    "--zenoh-port",
    type=int,
    default=52414,
    dest="zenoh_port",
    help="the TCP port (for a test)",
)
parser.add_argument("--discovery-port", type=int, default=52413, dest="discovery_port", help="(UDP)")
"""
LIBP2P_MAIN = """parser.add_argument("--api-port", type=int, dest="api_port", default=52415)
parser.add_argument(
    "--libp2p-port",
    type=int,
    default=0,
    dest="libp2p_port",
    help="a TCP port (0 = the OS picks one)",
)
"""


@pytest.mark.parametrize(("main", "ports"), [(ZENOH_MAIN, {"tcp": [52414], "udp": [52413]}),
                                             (LIBP2P_MAIN, {"tcp": [], "udp": []}), (None, None)],
                         ids=["zenoh", "libp2p", "no-source"])
def test_the_release_says_which_peer_ports_its_exo_listens_on(tmp_path: Path, main: str | None,
                                                              ports: dict | None) -> None:
    rel = tmp_path / "rel"
    if main is not None:
        (rel / "src" / "exo").mkdir(parents=True)
        (rel / "src" / "exo" / "main.py").write_text(main)
    d = _build_checkout(tmp_path, WHEELS_ONLY, build.BUILD_PATH)
    assert d["rc"] == 0 and d["checkout"]["ports"] == ports
    written = rel / build.PORTS_FILE
    if ports is None:
        assert not written.exists()
    else:
        assert json.loads(written.read_text()) == {**ports, "source": "src/exo/main.py"}
