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

from macfleet.act.transfer import REMOTE_PYTHON, SshTarget, run_remote
from macfleet.constants import HOMEBREW_BIN
from macfleet.errors import RemoteCommandError, UnreachableError, UsageError
from macfleet.judge.build import EXCLUDED_SOURCE_DIRS
from macfleet.judge.rollout import Manifest, ManifestFile, ManifestLink, check_release_name, make_manifest
from macfleet.node import program, release_files

MAX_MANIFEST_BYTES = 64 * 1024 * 1024
# exo's peer ports in a release built on a builder (flow/rollout hands its path to roles/pf)
PORTS_FILE = release_files.PORTS_FILE
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
# Programs run on the builder under /usr/bin/python3 (files in macfleet/node, sent as they are)
# ------------------------------------------------------------------------------------------------------

_BUILD_PROGRAM = program("build_run")  # argv: RELEASE_DIR LOG TIMEOUT_S PATH; {"command": …} on stdin
_MANIFEST_PROGRAM = program("build_manifest")  # argv: RELEASE_DIR MAX_FILES
_MISSING_PROGRAM = program("build_missing")  # stdin: a JSON list of paths
_LINKS_PROGRAM = program("build_links")  # argv: DIR; stdin: the manifest's links
_PORTS_PROGRAM = program("build_ports")  # argv: ROOT NAME...


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


def read_landed_manifest(args: SshTarget, root: str, name: str) -> Manifest | None:
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


def clear_unfinished(args: SshTarget, root: str, name: str) -> None:
    """Remove releases/NAME unless it has landed (its manifest beside it): what a killed or failed build left."""
    final, manifest, _ = _paths(root, name)
    run_remote(args, f"[ -f {shlex.quote(manifest)} ] || rm -rf -- {shlex.quote(final)}", timeout_s=600)


def remove_build(args: SshTarget, root: str, name: str) -> None:
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


def run_build(args: SshTarget, root: str, name: str, command: str, timeout_s: float) -> BuildResult:
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


def remote_manifest(args: SshTarget, root: str, name: str, *, max_files: int) -> tuple[Manifest, dict[str, str]]:
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


def write_landed_manifest(args: SshTarget, root: str, name: str, manifest: Manifest) -> None:
    """The release has landed on this node: its manifest goes beside it (atomically)."""
    _, path, _ = _paths(root, name)
    q = shlex.quote(path)
    run_remote(args, f"umask 022 && cat > {q}.tmp && mv {q}.tmp {q}", stdin=manifest.model_dump_json(),
               timeout_s=60)


def missing_paths(args: SshTarget, paths: list[str]) -> list[str]:
    out = run_remote(args, shlex.join([REMOTE_PYTHON, "-c", _MISSING_PROGRAM]), stdin=json.dumps(paths),
                     timeout_s=60)
    d = _last_json(args.node, "check paths", out)
    return [str(p) for p in d] if isinstance(d, list) else []


def bad_links(args: SshTarget, directory: str, manifest: Manifest) -> dict[str, str]:
    """Each of the manifest's links under `directory` that is absent or reads another target."""
    if not manifest.links:
        return {}
    out = run_remote(args, shlex.join([REMOTE_PYTHON, "-c", _LINKS_PROGRAM, directory]),
                     stdin=json.dumps([x.model_dump() for x in manifest.links]), timeout_s=300)
    d = _last_json(args.node, "check links", out)
    return {str(k): str(v) for k, v in d.items()} if isinstance(d, dict) else {}


def release_ports(args: SshTarget, root: str, names: list[str]) -> dict[str, str | None]:
    """The ports file (PORTS_FILE) of each release on this node, None for a release without one."""
    for n in names:
        check_release_name(n)
    out = run_remote(args, shlex.join([REMOTE_PYTHON, "-c", _PORTS_PROGRAM, root, *names]), timeout_s=30)
    d = _last_json(args.node, "read ports files", out)
    return {str(k): (str(v) if v is not None else None) for k, v in d.items()} if isinstance(d, dict) else {}

