"""exo builds for the lab: a release directory holding the exo stand-in, and its launchd plist.

Build layout (`write_build(out_dir, version)`; usable as `macfleet rollout exo --source DIR`)::

    DIR/
      VERSION              the version, one line (e.g. "1.0.71"); nodes cluster only with the same version
      BUILD.json           {"name": "exo", "version", "broken", "entry": "bin/exo", "label", "format": 1}
      bin/exo              entry point, executable, `#!` the interpreter /usr/bin/python3 leads to (on a node that
                           path is the Command Line Tools stub); finds its release directory from its own
                           resolved path (so `/opt/exo/current/bin/exo` through a `current` symlink runs the
                           release the symlink points at) and runs lib/exo_standin.py
      lib/exo_standin.py   the server (a verbatim copy of macfleet/lab/exo/standin.py; stdlib only)
      lib/exo_instances.py its placement, chat and bench endpoints (a copy of macfleet/lab/exo/instances.py)

Nothing in the build depends on where it is installed. `bin/exo` takes exo's `--api-port` and a few lab
options (`--bind`, `--peer-port`, `--refresh`, `--version`); the state lives under `~/.exo` of the user it
runs as (node id `~/.exo/node_zid`, log `~/.exo/exo_log/exo.log`, lock `~/.exo/exo.pid`, fault overlay
`~/.exo/lab_faults.json`), models under exo's default directory (EXO_MODELS_DIR) or `$EXO_DEFAULT_MODELS_DIR`.

A `--broken` build starts, listens and answers `/node_id` and `/models`, but never becomes healthy: it never
joins peers (its `/state` shows only itself, with no connections), peers do not see it, and its runner stays
`RunnerConnecting` - what a health checker sees of a real exo whose runner never comes up.

`render_launchd_plist(program, home=...)` renders the job that runs it (label EXO_LABEL, RunAtLoad,
KeepAlive, stdout/stderr in `~/.exo/exo_log/launchd.std{out,err}.log` - that directory must exist before the
job starts, launchd does not create it); `launchd_plist(build_dir, user=, home=)` is the same for a build
directory; `plist_path(home)` says where a LaunchAgent goes. Command line:
`python -m macfleet.lab.exo.build --version V [--broken] --out DIR`.
"""

from __future__ import annotations

import argparse
import json
import os
import plistlib
import re
import shutil
import sys
from pathlib import Path

from macfleet.constants import EXO_LABEL, HOMEBREW_BIN

LABEL = EXO_LABEL
ENTRY = "bin/exo"
DEFAULT_VERSION = "1.0.71"  # what `lab up` installs; exo's last tag at the time of exo.md
DEFAULT_PATH = f"/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin:{HOMEBREW_BIN}"
_SOURCE = Path(__file__).with_name("standin.py")
_LIBRARY = {"exo_standin.py": _SOURCE, "exo_instances.py": Path(__file__).with_name("instances.py"),
            # the stand-in's discovery and runner (standin.py imports them as exo_<name> in a build)
            "exo_discovery.py": Path(__file__).with_name("discovery.py"),
            "exo_runner.py": Path(__file__).with_name("runner.py")}
_VERSION_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._+-]{0,63}$")

_ENTRY_POINT = """#!{python}
# exo (macfleet lab stand-in) - entry point of the build in ../ ; see ../BUILD.json
import os
import sys

_root = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
sys.path.insert(0, os.path.join(_root, "lib"))

import exo_standin  # noqa: E402

if __name__ == "__main__":
    sys.exit(exo_standin.main(sys.argv[1:], build_root=exo_standin.Path(_root)))
"""


# Sources (issue 31): the build layout (VERSION, BUILD.json, bin/exo, lib/) is the lab's own format, not exo's: a
# real exo release is exo's checkout with a uv environment (.venv, where package exo's dist-info METADATA holds
# its version, exo src/exo/__init__.py) built by its README's steps (dashboard `npm run build`, then `uv sync`).
# The product reads no file of this layout on a node (tests/test_lab_only.py); doctor reads `current`'s target
# name and that METADATA, which a lab build lacks, so the lab's version comes from the release's name.
def write_build(out_dir: Path, version: str, *, broken: bool = False) -> Path:
    """Write an exo build (layout in the module docstring) into `out_dir`; returns `out_dir`.

    `out_dir` must be absent or empty, so a build is never a mix of two versions."""
    if not _VERSION_RE.match(version):
        raise ValueError(f"bad exo version {version!r}: expected letters, digits and . _ + - (e.g. 1.0.71)")
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} is not empty")
    (out_dir / "bin").mkdir(parents=True, exist_ok=True)
    (out_dir / "lib").mkdir(exist_ok=True)
    for name, source in _LIBRARY.items():
        shutil.copyfile(source, out_dir / "lib" / name)
    entry = out_dir / ENTRY
    # the real interpreter: on a node /usr/bin/python3 is the Command Line Tools stub until bootstrap
    entry.write_text(_ENTRY_POINT.replace("{python}", os.path.realpath("/usr/bin/python3"), 1))
    entry.chmod(0o755)
    (out_dir / "VERSION").write_text(version + "\n")
    meta = {"name": "exo", "version": version, "broken": broken, "entry": ENTRY, "label": LABEL, "format": 1}
    (out_dir / "BUILD.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out_dir


SOURCE_BUILD_COMMAND = "sh ./build.sh"  # the `macfleet_exo.build.command` a lab inventory sets for a source

# The source tree's build script: the lab's stand-in for exo's real build (dashboard npm build, then `uv sync`),
# which the lab cannot run. Like a uv environment, what it writes holds absolute paths of the directory it runs
# in (the `#!` line, the library path), so a build moved after the fact does not start: only a build made at
# the release's final path runs. The interpreter link points outside the release, at the Command Line Tools'
# Python every bootstrapped Mac has at the same path (as a venv made on the system Python would).
_BUILD_SCRIPT = """#!/bin/sh
# exo (macfleet lab stand-in): the build, run in the directory the release lives in
set -eu
here="$PWD"
version="$(cat VERSION)"
echo "building the exo stand-in $version in $here"
mkdir -p .venv/bin bin
ln -sfn /Library/Developer/CommandLineTools/usr/bin/python3 .venv/bin/python
if [ "@FAIL@" = "true" ]; then
    echo "lab: this source's build fails on purpose (macfleet lab exo-build --source --fail-build)" >&2
    exit 3
fi
cat > .venv/bin/exo <<ENTRY
#!$here/.venv/bin/python
# exo (macfleet lab stand-in), built in $here
import sys
sys.path.insert(0, "$here/lib")
import exo_standin
sys.exit(exo_standin.main(sys.argv[1:], build_root=exo_standin.Path("$here")))
ENTRY
chmod 755 .venv/bin/exo
ln -sfn ../.venv/bin/exo bin/exo
printf '{"name": "exo", "version": "%s", "broken": @BROKEN@, "entry": "bin/exo", "label": "@LABEL@", "format": 1}\\n' \\
    "$version" > BUILD.json
echo "built: bin/exo -> .venv/bin/exo"
"""


# A pyproject.toml with what the builder reads of exo's (act/build.py): since exo 4466cd532 MLX is the optional
# extra `mlx`, and [tool.uv.sources] gives mlx a git source for darwin (a fork built from source, so Xcode's Metal
# toolchain is needed). The names are exo's; the URL is not (the lab fetches nothing).
_PYPROJECT_MLX = """[project]
name = "exo"
version = "{version}"

[project.optional-dependencies]
mlx = [
  "mlx",
]

[tool.uv.sources]
mlx = [
  {{ git = "https://example.invalid/mlx-fork.git", branch = "lab", marker = "sys_platform == 'darwin'" }},
]
"""


# exo's peer-port options as its src/exo/main.py declares them since 09f9ea313 (option, type, default: zenoh's TCP
# port 52414, the discovery UDP port 52413), in the argparse form the builder reads (act/build.py). The stand-in
# itself does not listen on them: the packet filter is what this source is for.
_MAIN_ZENOH = """# exo (macfleet lab stand-in): the peer-port options of exo's src/exo/main.py since 09f9ea313
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--api-port", type=int, dest="api_port", default=52415)
parser.add_argument("--zenoh-port", type=int, default=52414, dest="zenoh_port")
parser.add_argument("--discovery-port", type=int, default=52413, dest="discovery_port")
"""


def write_source(out_dir: Path, version: str, *, broken: bool = False, fail: bool = False,
                 builds_mlx: bool = False, zenoh: bool = False) -> Path:
    """Write an exo stand-in *source* tree into `out_dir` (absent or empty): VERSION, lib/exo_standin.py and
    build.sh, which `rollout exo --build-on NODE` runs on the builder with SOURCE_BUILD_COMMAND and which makes
    the build layout above. `fail`: the build script exits 3 after writing part of the tree. `builds_mlx`: also
    a pyproject.toml shaped as exo's since 4466cd532 (MLX an extra, built from a git source), so the builder
    needs Xcode's Metal toolchain, which no lab Mac has. `zenoh`: also src/exo/main.py declaring exo's zenoh and
    discovery ports, so the release built from it says it listens on them (macfleet-ports.json)."""
    if not _VERSION_RE.match(version):
        raise ValueError(f"bad exo version {version!r}: expected letters, digits and . _ + - (e.g. 1.0.71)")
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} is not empty")
    (out_dir / "lib").mkdir(parents=True, exist_ok=True)
    for name, source in _LIBRARY.items():
        shutil.copyfile(source, out_dir / "lib" / name)
    (out_dir / "VERSION").write_text(version + "\n")
    script = (_BUILD_SCRIPT.replace("@FAIL@", "true" if fail else "false")
              .replace("@BROKEN@", "true" if broken else "false").replace("@LABEL@", LABEL))
    (out_dir / "build.sh").write_text(script)
    (out_dir / "build.sh").chmod(0o755)
    if builds_mlx:
        (out_dir / "pyproject.toml").write_text(_PYPROJECT_MLX.format(version=version))
    if zenoh:
        (out_dir / "src" / "exo").mkdir(parents=True)
        (out_dir / "src" / "exo" / "main.py").write_text(_MAIN_ZENOH)
    return out_dir


def read_build(build_dir: Path) -> dict:
    """BUILD.json of a build directory (raises FileNotFoundError / ValueError when it is not one)."""
    meta = json.loads((Path(build_dir) / "BUILD.json").read_text())
    if meta.get("name") != "exo" or not (Path(build_dir) / meta.get("entry", ENTRY)).is_file():
        raise ValueError(f"{build_dir} is not an exo build")
    return meta


def plist_path(home: Path, *, label: str = LABEL, daemon: bool = False) -> Path:
    """Where the job's plist goes: `~/Library/LaunchAgents/<label>.plist`, or `/Library/LaunchDaemons/…`."""
    if daemon:
        return Path("/Library/LaunchDaemons") / f"{label}.plist"
    return Path(home) / "Library" / "LaunchAgents" / f"{label}.plist"


def render_launchd_plist(
    program: str | Path,
    *,
    home: str | Path,
    label: str = LABEL,
    user: str | None = None,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> bytes:
    """launchd job running exo in the foreground restarted whenever it exits.

    `program` is the absolute path of the entry point, normally `<install root>/current/bin/exo`; `home` the
    home directory of the user exo runs as (launchd does not expand `~`); `user` sets `UserName` (for a
    LaunchDaemon); `args` are appended to ProgramArguments; `env` adds to EnvironmentVariables."""
    home = Path(home)
    log_dir = home / ".exo" / "exo_log"
    environment = {"HOME": str(home), "PATH": DEFAULT_PATH, **(env or {})}
    job: dict = {
        "Label": label,
        "ProgramArguments": [str(program), *(args or [])],
        "RunAtLoad": True,
        "KeepAlive": True,
        "EnvironmentVariables": environment,
        "StandardOutPath": str(log_dir / "launchd.stdout.log"),
        "StandardErrorPath": str(log_dir / "launchd.stderr.log"),
        "ThrottleInterval": 5,
        "ProcessType": "Interactive",
    }
    if user:
        job["UserName"] = user
    return plistlib.dumps(job, fmt=plistlib.FMT_XML, sort_keys=False)


def launchd_plist(build_dir: str | Path, *, user: str | None = None, home: str | Path) -> bytes:
    """The plist for the build at `build_dir` as seen on the node (the hook `lab up` calls): runs
    `<build_dir>/bin/exo`; same keys as render_launchd_plist."""
    return render_launchd_plist(Path(build_dir) / ENTRY, home=home, user=user)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="macfleet lab exo-build", description="Write an exo stand-in build.")
    parser.add_argument("--version", required=True)
    parser.add_argument("--broken", action="store_true", help="starts but never becomes healthy")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--source", action="store_true", help="a source tree, built by its build.sh on a builder")
    parser.add_argument("--fail-build", action="store_true", help="(with --source) its build fails")
    args = parser.parse_args(argv)
    try:
        if args.source:
            out = write_source(args.out, args.version, broken=args.broken, fail=args.fail_build)
        else:
            out = write_build(args.out, args.version, broken=args.broken)
    except (ValueError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
