"""exo's version, read from what is installed (issue 31 item 2): exo's API does not say it, so doctor reads the
release `current` points at and the exo package's METADATA in that release's environment."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from macfleet.collect.commands import EXO_RELEASE_SCRIPT, exo_specs
from macfleet.collect.gather import Gathered
from macfleet.collect.ssh import Raw
from macfleet.errors import FactsParseError
from macfleet.facts.exo import parse_exo_release
from macfleet.flow.checks import node_facts
from macfleet.flow.reboot import VERIFY_EXO

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "exo_release" / "METADATA"


def _read(root: Path) -> str:
    p = subprocess.run(["sh", "-c", EXO_RELEASE_SCRIPT, "sh", str(root)], capture_output=True, text=True,
                       check=True, timeout=10)
    return p.stdout


def _release(root: Path, name: str, *, venv: str | None = ".venv") -> Path:
    rel = root / "releases" / name
    rel.mkdir(parents=True)
    if venv:
        info = rel / venv / "lib" / "python3.13" / "site-packages" / "exo-0.3.70.dist-info"
        info.mkdir(parents=True)
        shutil.copyfile(FIXTURE, info / "METADATA")
        other = rel / venv / "lib" / "python3.13" / "site-packages" / "exo_rs-0.1.0.dist-info"
        other.mkdir(parents=True)
        (other / "METADATA").write_text("Metadata-Version: 2.4\nName: exo_rs\nVersion: 0.1.0\n")
    os.symlink(f"releases/{name}", root / "current")
    return rel


def test_the_package_version_in_the_release_current_points_at(tmp_path: Path) -> None:
    _release(tmp_path, "0.3.70-0123456789ab")
    rel = parse_exo_release(_read(tmp_path))
    assert (rel.name, rel.packages, rel.version) == ("0.3.70-0123456789ab", ["0.3.70"], "0.3.70")


def test_a_release_without_an_environment_says_the_version_in_its_name(tmp_path: Path) -> None:
    _release(tmp_path, "1.0.71-0123456789ab", venv=None)
    assert parse_exo_release(_read(tmp_path)).version == "1.0.71"
    assert parse_exo_release(f"root {tmp_path}\ncurrent releases/1.0.71\n").version == "1.0.71"  # lab up's


def test_no_release_is_could_not_tell_with_the_reason(tmp_path: Path) -> None:
    rel = parse_exo_release(_read(tmp_path / "nothing-here"))
    assert rel.version is None and rel.current is None
    assert "no exo release installed by macfleet" in rel.why_unknown() and "nothing-here/current" in rel.why_unknown()


def test_two_exo_packages_are_not_a_version() -> None:
    rel = parse_exo_release("root /opt/exo\ncurrent releases/x-0123456789ab\npackage 0.3.70\npackage 0.3.69\n")
    assert rel.version is None and "more than one exo package" in rel.why_unknown()


@pytest.mark.parametrize("text", ["", "root /opt/exo\n", "HTTP/1.1 200 OK\n", "root /opt/exo\ncurrent x\nVersion 1\n"])
def test_anything_else_is_a_parse_error(text: str) -> None:
    with pytest.raises(FactsParseError):
        parse_exo_release(text)


def test_doctor_takes_the_version_from_the_release_not_from_a_header(tmp_path: Path) -> None:
    _release(tmp_path, "0.3.70-0123456789ab")
    http = ('HTTP/1.1 200 OK\r\ndate: Wed, 02 Dec 2026 08:00:00 GMT\r\nserver: hypercorn-h11\r\n'
            'content-type: application/json\r\n\r\n"' + "a" * 32 + '"')
    keys = {s.key for s in exo_specs(52415, "/opt/exo")}
    assert "exo-release" in keys
    outputs = {"exo-node-id": Raw(stdout=http, stderr="", rc=0, took_s=0.1),
               "exo-release": Raw(stdout=_read(tmp_path), stderr="", rc=0, took_s=0.1)}
    facts = node_facts(Gathered(outputs={"s1": outputs}), "s1")
    assert (facts.exo_api, facts.exo_version) == ("up", "0.3.70")
    none = node_facts(Gathered(outputs={"s1": {**outputs, "exo-release": Raw(
        stdout=_read(tmp_path / "absent"), stderr="", rc=0, took_s=0.1)}}), "s1")
    assert none.exo_version is None and "no exo release installed by macfleet" in none.why("exo-release")


def test_a_reboot_does_not_wait_for_a_version_it_cannot_know() -> None:
    assert "exo-version" not in VERIFY_EXO and "exo-peers" in VERIFY_EXO
