"""Building an exo release from a source tree on a builder node, pure: the release's name before it is built,
which of a built release's links and interpreters point outside it, and the plan `rollout exo --check` shows.

Why the name comes from the source, not from what is built: a Python virtual environment is not relocatable
(uv writes absolute paths into its `bin/` scripts' `#!` lines and pyvenv.cfg `home`, and an editable install's
`.pth` names the source directory), so the build must run in the directory the release will have on every node,
`<install_root>/releases/<name>`, and that name must be known before the build starts. It is `<version>-<12 hex>`
of a digest over the source's manifest and the build command: the same source built the same way gets the same
name, so a rerun finds the release already built and reuses it.
"""

from __future__ import annotations

import hashlib
import posixpath

from pydantic import BaseModel, ConfigDict, Field

from macfleet.judge.rollout import VERSION_RE, Manifest

# Left out of the source sent to the builder: version control, and what the build makes again (a virtual
# environment and node packages built on another machine are not the builder's, and they are big).
EXCLUDED_SOURCE_DIRS = frozenset({".git", ".venv", "node_modules", "__pycache__"})


def build_release_name(version: str, source: Manifest, command: str) -> str:
    """`<version>-<hash>`, the hash over the source's content and the build command (module docstring)."""
    if not VERSION_RE.match(version):
        raise ValueError(f"bad exo version {version!r}: expected letters, digits and . _ + - (e.g. 1.0.71)")
    h = hashlib.blake2b(digest_size=32)
    h.update(b"macfleet exo build 1\0")
    h.update(source.digest().encode())
    h.update(b"\0")
    h.update(command.encode())
    return f"{version}-{h.hexdigest()[:12]}"


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def outside_references(manifest: Manifest, release_dir: str, venv_homes: dict[str, str]) -> dict[str, str]:
    """What a built release needs from outside itself: {path in the release: absolute path it points to}, for
    links whose target resolves outside `release_dir` and virtual environments (pyvenv.cfg, path → its `home`)
    whose interpreter lives outside it. Each must exist at that path on every node, or the release runs only on
    the builder (e.g. a venv on the builder's own `~/.local/share/uv/python`)."""
    out: dict[str, str] = {}
    for link in manifest.links:
        here = posixpath.dirname(posixpath.join(release_dir, link.path))
        target = posixpath.normpath(posixpath.join(here, link.target))
        if not _inside(target, release_dir):
            out[link.path] = target
    for cfg, home in sorted(venv_homes.items()):
        home = posixpath.normpath(home)
        if not posixpath.isabs(home):
            out[cfg] = f"(relative home {home!r})"
        elif not _inside(home, release_dir):
            out[cfg] = home
    return out


def explain_missing(missing: dict[str, list[str]], refs: dict[str, str], release: str) -> str:
    """One sentence naming what a release points at outside itself and the nodes that lack it."""
    parts = []
    for path, nodes in sorted(missing.items()):
        parts.append(f"{path} -> {refs.get(path, '?')} is missing on {', '.join(sorted(nodes))}")
    return (f"{release} is not self-contained: " + "; ".join(parts[:5]) + (" …" if len(parts) > 5 else "")
            + ". Install what the build needs inside the release (a uv-managed Python: UV_PYTHON_INSTALL_DIR "
              "under the release directory), or at the same path on every node")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BuildStep(_Model):
    node: str  # the builder
    directory: str  # where the build runs: the release's own directory
    command: str
    timeout_s: float


class RolloutPlan(_Model):
    """What `rollout exo --check` would do; nothing was changed anywhere."""

    result: str = "check"
    release: str
    source_files: int
    build: BuildStep | None  # None: the source is already built, or the release exists on a node
    reuse_from: str | None = None  # a node that already holds the release: it is the seed, nothing is built
    stage_on: list[str] = Field(default_factory=list)  # nodes that would receive it
    switch_from: str | None = None  # the release every node runs now (None: they differ or none)
    already: bool = False  # every node already runs it


# How to give a builder what exo's MLX build needs (exo README, "Xcode ... provides the Metal ToolChain required
# for MLX compilation"; MLX's install docs, "Metal not found"; Xcode 26's separate Metal toolchain component,
# actions/runner-images#13094). docs/runbooks/rollout-exo.md says the same at more length.
XCODE_STEPS = ("install Xcode (App Store, or developer.apple.com/download), then on the builder: `sudo xcode-select "
               "--switch /Applications/Xcode.app/Contents/Developer`, `sudo xcodebuild -license accept`, "
               "`xcodebuild -downloadComponent MetalToolchain`; `xcrun metal --version` must then print a version "
               "(docs/runbooks/rollout-exo.md, \"The builder\")")


def toolchain_refusal(node: str, release: str, checks: dict[str, dict]) -> str:
    """Why the build of `release` on `node` was not started: the checkout compiles MLX, which needs full Xcode's
    Metal toolchain, and the first of the builder's checks that failed (its command, exit status, output)."""
    first = next(((cmd, c) for cmd, c in checks.items() if c.get("rc") != 0), None)
    if first is None:  # xcode-select answered, but with the Command Line Tools (or no Xcode app) selected
        cmd, c = "xcode-select -p", checks.get("xcode-select -p", {})
        what = f"the active developer directory is {str(c.get('out') or '?').strip()[:200]}, not an Xcode app's"
    else:
        cmd, c = first
        out = " ".join(str(c.get("out") or "no output").split())[:300]
        what = f"`{cmd}` exited {c.get('rc')}: {out}"
    return (f"{node} cannot build {release}: the checkout builds MLX from source (pyproject.toml's "
            f"[tool.uv.sources] mlx is a git source), which compiles Metal kernels with full Xcode's Metal "
            f"toolchain, and {what}. Nothing was built or switched. To fix: {XCODE_STEPS}")

