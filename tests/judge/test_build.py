"""Building a release on a node, the pure parts: its name before the build, and what a built release needs from
outside itself."""

from __future__ import annotations

import hashlib
import json

import pytest

from macfleet.judge.build import build_release_name, explain_missing, outside_references
from macfleet.judge.rollout import Manifest, ManifestFile, ManifestLink, make_manifest

FINAL = "/opt/exo/releases/0.3.70-0123456789ab"


def _manifest(*files: tuple[str, str], links: dict[str, str] | None = None) -> Manifest:
    return make_manifest([ManifestFile(path=p, size=len(d), digest=hashlib.blake2b(d.encode()).hexdigest())
                          for p, d in files],
                         [ManifestLink(path=p, target=t) for p, t in (links or {}).items()])


SOURCE = _manifest(("pyproject.toml", "[project]"), ("src/exo/main.py", "print()"))


def test_the_name_is_known_before_the_build_and_stable() -> None:
    name = build_release_name("0.3.70", SOURCE, "uv sync --frozen")
    assert name.startswith("0.3.70-") and len(name.split("-")[-1]) == 12
    assert build_release_name("0.3.70", SOURCE, "uv sync --frozen") == name  # a rerun finds the same release


def test_the_name_changes_with_the_source_or_the_command() -> None:
    name = build_release_name("0.3.70", SOURCE, "uv sync --frozen")
    other = _manifest(("pyproject.toml", "[project]"), ("src/exo/main.py", "print(1)"))
    assert build_release_name("0.3.70", other, "uv sync --frozen") != name
    assert build_release_name("0.3.70", SOURCE, "uv sync --frozen --no-dev") != name


@pytest.mark.parametrize("version", ["", "../x", "1.0 beta", "-1"])
def test_a_bad_version_is_refused(version: str) -> None:
    with pytest.raises(ValueError, match="bad exo version"):
        build_release_name(version, SOURCE, "true")


def test_links_inside_the_release_need_nothing_outside() -> None:
    m = _manifest(("bin/x", "x"), links={"bin/exo": "../.venv/bin/exo",
                                         ".venv/bin/python": f"{FINAL}/.python/cpython-3.13/bin/python3.13",
                                         ".python/cpython-3.13/bin/python3": "python3.13"})
    homes = {".venv/pyvenv.cfg": f"{FINAL}/.python/cpython-3.13/bin"}
    assert outside_references(m, FINAL, homes) == {}


def test_links_and_venv_homes_outside_the_release_are_named() -> None:
    m = _manifest(links={".venv/bin/python": "/Users/admin/.local/share/uv/python/cpython-3.13/bin/python3.13",
                         "bin/escape": "../../../../../usr/bin/python3",
                         "bin/exo": "../.venv/bin/exo"})
    homes = {".venv/pyvenv.cfg": "/Users/admin/.local/share/uv/python/cpython-3.13/bin", "b/pyvenv.cfg": "rel"}
    refs = outside_references(m, FINAL, homes)
    assert refs == {".venv/bin/python": "/Users/admin/.local/share/uv/python/cpython-3.13/bin/python3.13",
                    "bin/escape": "/usr/bin/python3",
                    ".venv/pyvenv.cfg": "/Users/admin/.local/share/uv/python/cpython-3.13/bin",
                    "b/pyvenv.cfg": "(relative home 'rel')"}
    # a sibling directory sharing the release's name as a prefix is outside it
    assert outside_references(_manifest(links={"a": f"{FINAL}x/y"}), FINAL, {}) == {"a": f"{FINAL}x/y"}


def test_explain_missing_names_paths_targets_and_nodes() -> None:
    msg = explain_missing({".venv/bin/python": ["s3", "s2"]}, {".venv/bin/python": "/Users/a/py"}, "1.0-abc")
    assert "1.0-abc is not self-contained: .venv/bin/python -> /Users/a/py is missing on s2, s3" in msg
    assert "UV_PYTHON_INSTALL_DIR" in msg


def test_the_manifest_digest_of_plain_files_is_unchanged_by_links_support() -> None:
    # release names of builds made before links existed must not move
    canon = json.dumps([[f.path, f.size, f.digest, f.executable] for f in SOURCE.files], separators=(",", ":"))
    assert SOURCE.digest() == hashlib.blake2b(canon.encode(), digest_size=32).hexdigest()
    with_link = _manifest(("pyproject.toml", "[project]"), ("src/exo/main.py", "print()"), links={"l": "x"})
    assert with_link.digest() != SOURCE.digest()


@pytest.mark.parametrize("target", ["", "a\nb", "x\x00y", "a" * 5000])
def test_an_unsafe_link_target_is_refused(target: str) -> None:
    with pytest.raises(ValueError, match="unsafe link target"):
        _manifest(links={"bin/x": target})


def test_a_path_listed_as_file_and_link_is_refused() -> None:
    with pytest.raises(ValueError, match="listed twice"):
        _manifest(("bin/x", "x"), links={"bin/x": "y"})
