"""Building an exo release on a builder node: the source tree sent into the release's own directory, the
build command run there, the manifest computed there.

Where things are on the builder (`<root>` = the install root): the release is built in `<root>/releases/<name>`
(its final path: see judge/build.py for why), its output goes to `<root>/releases/.build-<name>.log` (kept when
the build fails, removed when it succeeds), and the release counts as landed once `<name>.manifest.json` sits
beside it. A directory without that manifest is a build that did not finish: it is removed before building
again. The build command runs as one `sh -c` word under /usr/bin/python3, which kills its whole process group
when the timeout passes or when the controller goes away (its ssh's stdin closes), so no build outlives the
command that started it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from macfleet.act.transfer import NODE_DIGEST, REMOTE_PYTHON, SshArgs, run_remote
from macfleet.constants import HOMEBREW_BIN
from macfleet.errors import RemoteCommandError, UnreachableError, UsageError
from macfleet.judge.build import EXCLUDED_SOURCE_DIRS
from macfleet.judge.rollout import Manifest, ManifestFile, ManifestLink, check_release_name, make_manifest

TAIL_BYTES = 4000
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
# What a non-interactive ssh session on a Mac lacks: Homebrew (node, npm), uv's and rustup's own directories.
BUILD_PATH = f"$HOME/.local/bin:$HOME/.cargo/bin:{HOMEBREW_BIN}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"


# ------------------------------------------------------------------------------------------------------
# The source, on the controller
# ------------------------------------------------------------------------------------------------------


def snapshot_source(src: Path, into: Path) -> Path:
    """A copy of the source tree without EXCLUDED_SOURCE_DIRS, so what is hashed is what is sent. A link inside
    the tree to a file is copied as that file; any other link, or one leading out of the tree, is refused."""
    src = src.resolve()
    into.mkdir(parents=True)
    for dirpath, dirnames, filenames in os.walk(src):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_SOURCE_DIRS)
        rel = here.relative_to(src)
        for d in list(dirnames):
            if (here / d).is_symlink():
                raise UsageError(f"{here / d}: a link to a directory in the source tree",
                                 hint="the source is sent as plain files: replace the link by the directory")
            (into / rel / d).mkdir()
        for name in sorted(f for f in filenames if f not in EXCLUDED_SOURCE_DIRS):
            p = here / name
            real = p.resolve()
            if p.is_symlink() and (not real.is_relative_to(src) or not real.is_file()):
                raise UsageError(f"{p}: a link leading out of the source tree or to no file")
            if not real.is_file():
                raise UsageError(f"{p}: not a regular file", hint="a source tree holds plain files only")
            shutil.copy2(real, into / rel / name)
    return into


# ------------------------------------------------------------------------------------------------------
# Programs run on the builder under /usr/bin/python3
# ------------------------------------------------------------------------------------------------------

# What the builder reads of the checkout before building (Python 3.9 on a Mac: no tomllib, so pyproject.toml is
# read by its table headers and keys, enough for the two facts below; a pyproject it cannot read has neither).
# - `[project.optional-dependencies]` has `mlx`: exo moved MLX into that extra at exo 4466cd532 (pyproject.toml);
#   `uv sync` installs no extra unless asked, so the build gets `--extra mlx` through $MACFLEET_UV_EXTRAS.
# - `[tool.uv.sources]` gives `mlx` a `git` source: uv builds MLX from source on the builder, which compiles its
#   Metal kernels with Xcode's `metal` (exo README: Xcode "provides the Metal ToolChain required for MLX
#   compilation"; in every exo since v1.0.71 at least, and at b5375f8, pyproject.toml's mlx source is a git fork).
#   Then the builder must have full Xcode selected (`xcode-select -p` under an .app, not the Command Line Tools,
#   which have no metal: MLX's install docs, "Metal not found") and a `metal` that runs (Xcode 26 ships the
#   Metal toolchain as a separate component: "cannot execute tool 'metal' due to missing Metal Toolchain; use:
#   xcodebuild -downloadComponent MetalToolchain", actions/runner-images#13094). If not, nothing is built and
#   the answer says what each check gave (judge/build.toolchain_refusal words it).
# In a release built on a builder: exo's peer ports as its source sets them, {"tcp": [...], "udp": [...],
# "source": ...}. The pf role reads it from the release `current` points at (playbooks/roles/pf).
PORTS_FILE = "macfleet-ports.json"

NODE_CHECKOUT = r"""
import re

def _toml_tables(text):
    # {table: {key: the text of its value, continuation lines included}}, for keys at the start of a line
    tables, table, key = {}, "", None
    for raw in text.splitlines():
        stripped = raw.strip()
        if raw.startswith("[") and stripped.endswith("]"):
            table, key = stripped.strip("[]").strip(), None
        elif raw[:1] not in (" ", "\t", "#", "", "]") and "=" in raw:
            key = raw.split("=", 1)[0].strip().strip('"')
            tables.setdefault(table, {})[key] = raw.split("=", 1)[1]
        elif key is not None:
            tables[table][key] += "\n" + raw
    return tables

def read_checkout(release):
    out = {"extras": [], "mlx_from_git": False}
    try:
        with open(os.path.join(release, "pyproject.toml"), encoding="utf-8") as f:
            tables = _toml_tables(f.read(1 << 20))
    except (OSError, ValueError):
        return out
    if "mlx" in tables.get("project.optional-dependencies", {}):
        out["extras"].append("mlx")
    out["mlx_from_git"] = re.search(r"\bgit\s*=", tables.get("tool.uv.sources", {}).get("mlx", "")) is not None
    return out

# exo's peer ports, from the command-line defaults in its src/exo/main.py: `--zenoh-port` (TCP, 52414) and
# `--discovery-port` (UDP, 52413) since exo 09f9ea313; `--libp2p-port` before (TCP, default 0: the OS picks a
# port, which no rule can name, so nothing is listed). The API port is macfleet's own setting (exo.port).
PORT_OPTIONS = {"zenoh-port": "tcp", "discovery-port": "udp", "libp2p-port": "tcp"}

def read_ports(release):
    try:
        with open(os.path.join(release, "src", "exo", "main.py"), encoding="utf-8") as f:
            text = f.read(1 << 20)
    except (OSError, ValueError):
        return None
    ports = {"tcp": [], "udp": []}
    for option, proto in PORT_OPTIONS.items():
        m = re.search(r"[\"']--" + option + r"[\"']", text)
        if m is None:
            continue
        call = re.split(r"add_argument\s*\(", text[m.end():m.end() + 600])[0]
        d = re.search(r"\bdefault\s*=\s*(\d+)", call)
        if d and 0 < int(d.group(1)) < 65536:
            ports[proto].append(int(d.group(1)))
    return ports

def toolchain(path_env):
    def run(argv):
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=dict(os.environ, PATH=path_env))
            return {"rc": p.returncode, "out": (p.stdout.strip() + "\n" + p.stderr.strip()).strip()[-500:]}
        except Exception as exc:  # not there, not runnable, too slow: that check's failure
            return {"rc": -1, "out": str(exc)[-500:]}
    checks = {"xcode-select -p": run(["xcode-select", "-p"])}
    selected = checks["xcode-select -p"]
    if selected["rc"] == 0 and ".app/Contents/Developer" in selected["out"]:
        checks["xcrun -f metal"] = run(["xcrun", "-f", "metal"])
        if checks["xcrun -f metal"]["rc"] == 0:
            checks["xcrun metal --version"] = run(["xcrun", "metal", "--version"])
    ok = selected["rc"] == 0 and ".app/Contents/Developer" in selected["out"] and all(
        c["rc"] == 0 for c in checks.values()) and len(checks) == 3
    return ok, checks
"""

# argv: RELEASE_DIR LOG TIMEOUT_S PATH; stdin: one JSON line {"command": …} (kept out of every argv), then
# nothing until the controller is gone. Reads the checkout (NODE_CHECKOUT): where it builds MLX without the
# toolchain, prints {"refused": {check: {rc, out}}, "checkout": …} and builds nothing. Else runs the command with
# `sh -c` in RELEASE_DIR (MACFLEET_UV_EXTRAS set to the `--extra` options the checkout calls for), its output in
# LOG, in a process group of its own, killed at the timeout or when stdin closes. Prints {"rc", "timed_out",
# "cancelled", "took_s", "tail", "checkout"}.
_BUILD_PROGRAM = r"""
import json, os, signal, subprocess, sys, threading, time
PORTS_FILE = "PORTS_FILE_NAME"
""".replace("PORTS_FILE_NAME", PORTS_FILE) + NODE_CHECKOUT + r"""
release, log, timeout, path = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
line = b""
while not line.endswith(b"\n"):
    chunk = os.read(0, 65536)
    if not chunk:
        sys.exit("no build command on stdin")
    line += chunk
command = json.loads(line)["command"]
env = dict(os.environ, PWD=release, MACFLEET_RELEASE_DIR=release, MACFLEET_RELEASE=os.path.basename(release))
env["PATH"] = path.replace("$HOME", os.path.expanduser("~"))
checkout = read_checkout(release)
checkout["ports"] = read_ports(release)
if checkout["ports"] is not None:  # the release says which peer ports it listens on (roles/pf reads it)
    with open(os.path.join(release, PORTS_FILE), "w") as f:
        json.dump(dict(checkout["ports"], source="src/exo/main.py"), f, sort_keys=True)
        f.write("\n")
env["MACFLEET_UV_EXTRAS"] = " ".join("--extra " + e for e in checkout["extras"])
if checkout["mlx_from_git"]:
    ok, checks = toolchain(env["PATH"])
    if not ok:
        print(json.dumps({"refused": checks, "checkout": checkout}))
        sys.stdout.flush()
        os._exit(0)
t0 = time.monotonic()
with open(log, "wb") as out:
    p = subprocess.Popen(["/bin/sh", "-c", command], cwd=release, env=env, stdin=subprocess.DEVNULL, stdout=out,
                         stderr=subprocess.STDOUT, start_new_session=True)
    cancelled = []
    def watch():
        while os.read(0, 65536):
            pass
        cancelled.append(True)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
    threading.Thread(target=watch, daemon=True).start()
    timed_out = False
    try:
        rc = p.wait(timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(p.pid, signal.SIGKILL)
        rc = p.wait()
with open(log, "rb") as f:
    f.seek(max(0, os.path.getsize(log) - TAIL))
    tail = f.read().decode("utf-8", "replace")
print(json.dumps({"rc": rc, "timed_out": timed_out, "cancelled": bool(cancelled),
                  "took_s": round(time.monotonic() - t0, 2), "tail": tail, "checkout": checkout}))
sys.stdout.flush()
os._exit(0)  # the watcher thread still waits on stdin: leave without waiting for it
""".replace("TAIL", str(TAIL_BYTES))

# argv: RELEASE_DIR MAX_FILES. Prints {"files": [...], "links": [...], "venv_homes": {pyvenv.cfg path: home}}
# or {"error": why}. Digests as every node program does (transfer.NODE_DIGEST).
_MANIFEST_PROGRAM = r"""
import hashlib, json, os, stat, sys
root, limit = sys.argv[1], int(sys.argv[2])
""" + NODE_DIGEST + r"""
files, links, homes = [], [], {}
def fail(why):
    print(json.dumps({"error": why}))
    sys.exit(0)
for dirpath, dirnames, filenames in os.walk(root):
    dirnames.sort()
    for name in sorted(filenames) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
        p = os.path.join(dirpath, name)
        rel = os.path.relpath(p, root)
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode):
            links.append({"path": rel, "target": os.readlink(p)})
        elif stat.S_ISREG(st.st_mode):
            files.append({"path": rel, "size": st.st_size, "digest": digest(p),
                          "executable": bool(st.st_mode & 0o111)})
            if name == "pyvenv.cfg" and st.st_size < 65536:
                for line in open(p, encoding="utf-8", errors="replace"):
                    k, _, v = line.partition("=")
                    if k.strip() == "home":
                        homes[rel] = v.strip()
        else:
            fail("%s: not a regular file or a link" % rel)
        if len(files) + len(links) > limit:
            fail("more than %d files" % limit)
print(json.dumps({"files": files, "links": links, "venv_homes": homes}))
"""

# stdin: a JSON list of absolute paths. Prints the JSON list of those that do not exist here.
_MISSING_PROGRAM = r"""
import json, os, sys
print(json.dumps([p for p in json.load(sys.stdin) if not os.path.exists(p)]))
"""

# argv: DIR. stdin: the manifest's links. Prints {path: why} for each link that is absent or reads otherwise.
_LINKS_PROGRAM = r"""
import json, os, sys
root, bad = sys.argv[1], {}
for link in json.load(sys.stdin):
    p = os.path.join(root, link["path"])
    if not os.path.islink(p):
        bad[link["path"]] = "absent" if not os.path.lexists(p) else "not a link"
    elif os.readlink(p) != link["target"]:
        bad[link["path"]] = "points at %s, expected %s" % (os.readlink(p), link["target"])
print(json.dumps(bad))
"""


def _last_json(node: str, what: str, out: str) -> object:
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RemoteCommandError(node, what, 0, f"unexpected answer: {out[-300:]!r}") from None


# ------------------------------------------------------------------------------------------------------
# The release directory on a node
# ------------------------------------------------------------------------------------------------------


def _paths(root: str, name: str) -> tuple[str, str, str]:
    check_release_name(name)
    releases = f"{root}/releases"
    return f"{releases}/{name}", f"{releases}/{name}.manifest.json", f"{releases}/.build-{name}.log"


def read_landed_manifest(args: SshArgs, root: str, name: str) -> Manifest | None:
    """The manifest of releases/NAME on this node, or None when it has not landed there (no manifest file)."""
    _, manifest, _ = _paths(root, name)
    q = shlex.quote(manifest)
    out = run_remote(args, f"if [ -f {q} ]; then head -c {MAX_MANIFEST_BYTES} {q}; else echo absent; fi",
                     timeout_s=60)
    if out.strip() == "absent":
        return None
    try:
        return Manifest.model_validate_json(out)
    except ValueError as exc:
        raise RemoteCommandError(args.node, f"read {manifest}", 0, f"not a manifest: {str(exc)[:200]}") from None


def clear_unfinished(args: SshArgs, root: str, name: str) -> None:
    """Remove releases/NAME unless it has landed (its manifest beside it): what a killed or failed build left."""
    final, manifest, _ = _paths(root, name)
    run_remote(args, f"[ -f {shlex.quote(manifest)} ] || rm -rf -- {shlex.quote(final)}", timeout_s=600)


def remove_build(args: SshArgs, root: str, name: str) -> None:
    """A failed build: its directory goes (the log stays, for the operator)."""
    final, manifest, _ = _paths(root, name)
    run_remote(args, shlex.join(["rm", "-rf", "--", final, manifest]), timeout_s=600)


@dataclass
class BuildResult:
    ok: bool
    rc: int | None
    timed_out: bool
    took_s: float
    tail: str
    log: str
    # the builder's toolchain checks when the checkout builds MLX and they failed: nothing was built
    refused: dict[str, dict] | None = None
    extras: tuple[str, ...] = ()  # the extras the build installed (`uv sync --extra …`)


def run_build(args: SshArgs, root: str, name: str, command: str, timeout_s: float) -> BuildResult:
    """Run the build command in releases/NAME on the builder (the source is already there)."""
    final, _, log = _paths(root, name)
    remote = shlex.join([REMOTE_PYTHON, "-c", _BUILD_PROGRAM, final, log, f"{timeout_s:g}", BUILD_PATH])
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        # stdin stays open while we wait: when this process dies, ssh's stdin closes and the build is killed.
        p = subprocess.Popen(args.argv(remote), stdin=subprocess.PIPE, stdout=out, stderr=err)
        try:
            p.stdin.write(json.dumps({"command": command}).encode() + b"\n")  # type: ignore[union-attr]
            p.stdin.flush()  # type: ignore[union-attr]
            rc = p.wait(timeout_s + 120)
        except subprocess.TimeoutExpired:
            p.stdin.close()  # type: ignore[union-attr]
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            raise RemoteCommandError(args.node, "build", -1, f"no answer within {timeout_s + 120:g} s") from None
        finally:
            if p.stdin and not p.stdin.closed:
                p.stdin.close()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if rc == 255:
        raise UnreachableError({args.node: stderr.strip()[-300:] or "ssh failed"})
    if rc != 0:
        raise RemoteCommandError(args.node, "build", rc, stderr)
    d = _last_json(args.node, "build", stdout)
    assert isinstance(d, dict)
    extras = tuple(str(e) for e in (d.get("checkout") or {}).get("extras", []))
    if isinstance(d.get("refused"), dict):
        return BuildResult(ok=False, rc=None, timed_out=False, took_s=0.0, tail="", log=log,
                           refused={str(k): dict(v) for k, v in d["refused"].items() if isinstance(v, dict)},
                           extras=extras)
    if d.get("rc") == 0:
        run_remote(args, shlex.join(["rm", "-f", "--", log]), timeout_s=30)
    return BuildResult(ok=d.get("rc") == 0 and not d.get("timed_out"), rc=d.get("rc"),
                       timed_out=bool(d.get("timed_out")), took_s=float(d.get("took_s") or 0),
                       tail=str(d.get("tail") or ""), log=log, extras=extras)


def remote_manifest(args: SshArgs, root: str, name: str, *, max_files: int) -> tuple[Manifest, dict[str, str]]:
    """The manifest of releases/NAME computed on the node itself, and its venvs' `home`s."""
    final, _, _ = _paths(root, name)
    out = run_remote(args, shlex.join([REMOTE_PYTHON, "-c", _MANIFEST_PROGRAM, final, str(max_files)]),
                     timeout_s=3600)
    d = _last_json(args.node, "manifest", out)
    if not isinstance(d, dict) or "error" in d:
        raise RemoteCommandError(args.node, f"manifest of {final}", 0, str(d.get("error") if isinstance(d, dict)
                                                                        else d)[:300])
    try:
        files = [ManifestFile(**f) for f in d["files"]]
        links = [ManifestLink(**x) for x in d["links"]]
        homes = {str(k): str(v)[:4096] for k, v in d["venv_homes"].items()}
        return make_manifest(files, links), homes
    except (KeyError, TypeError, ValueError) as exc:
        raise RemoteCommandError(args.node, f"manifest of {final}", 0, f"bad answer: {str(exc)[:200]}") from None


def write_landed_manifest(args: SshArgs, root: str, name: str, manifest: Manifest) -> None:
    """The release has landed on this node: its manifest goes beside it (atomically)."""
    _, path, _ = _paths(root, name)
    q = shlex.quote(path)
    run_remote(args, f"umask 022 && cat > {q}.tmp && mv {q}.tmp {q}", stdin=manifest.model_dump_json(),
               timeout_s=60)


def missing_paths(args: SshArgs, paths: list[str]) -> list[str]:
    out = run_remote(args, shlex.join([REMOTE_PYTHON, "-c", _MISSING_PROGRAM]), stdin=json.dumps(paths),
                     timeout_s=60)
    d = _last_json(args.node, "check paths", out)
    return [str(p) for p in d] if isinstance(d, list) else []


def bad_links(args: SshArgs, directory: str, manifest: Manifest) -> dict[str, str]:
    """Each of the manifest's links under `directory` that is absent or reads another target."""
    if not manifest.links:
        return {}
    out = run_remote(args, shlex.join([REMOTE_PYTHON, "-c", _LINKS_PROGRAM, directory]),
                     stdin=json.dumps([x.model_dump() for x in manifest.links]), timeout_s=300)
    d = _last_json(args.node, "check links", out)
    return {str(k): str(v) for k, v in d.items()} if isinstance(d, dict) else {}


# argv: ROOT NAME... Prints {name: the release's PORTS_FILE text, or null when it has none}.
_PORTS_PROGRAM = r"""
import json, os, sys
root, out = sys.argv[1], {}
for name in sys.argv[2:]:
    try:
        with open(os.path.join(root, "releases", name, "PORTS_FILE_NAME"), encoding="utf-8") as f:
            out[name] = f.read(65536)
    except OSError:
        out[name] = None
print(json.dumps(out))
""".replace("PORTS_FILE_NAME", PORTS_FILE)


def release_ports(args: SshArgs, root: str, names: list[str]) -> dict[str, str | None]:
    """The ports file (PORTS_FILE) of each release on this node, None for a release without one."""
    for n in names:
        check_release_name(n)
    out = run_remote(args, shlex.join([REMOTE_PYTHON, "-c", _PORTS_PROGRAM, root, *names]), timeout_s=30)
    d = _last_json(args.node, "read ports files", out)
    return {str(k): (str(v) if v is not None else None) for k, v in d.items()} if isinstance(d, dict) else {}

