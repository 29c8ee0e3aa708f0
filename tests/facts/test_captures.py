"""Every real capture in tests/fixtures/captures/<kind>/ is parsed, by the parser and by the CLI, and compared
with its <name>.expected.json; `facts parse auto` must name the folder's kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from macfleet.facts.registry import KINDS, detect_kind, parse

CAPTURES = Path(__file__).resolve().parent.parent / "fixtures" / "captures"
CASES = sorted(
    p for p in CAPTURES.glob("*/*") if p.is_file() and not p.name.endswith(".expected.json")
)


def _expected(p: Path) -> object:
    return json.loads((p.parent / (p.stem + ".expected.json")).read_text(encoding="utf-8"))


def _id(p: Path) -> str:
    return f"{p.parent.name}/{p.name}"


def test_every_kind_has_a_capture() -> None:
    missing = set(KINDS) - {p.parent.name for p in CASES} - {"nvram"}  # no nvram capture exists (research gap)
    assert not missing


def test_every_fixture_folder_is_a_kind() -> None:
    assert {p.parent.name for p in CASES} <= set(KINDS)


@pytest.mark.parametrize("path", CASES, ids=_id)
def test_parser(path: Path) -> None:
    facts = parse(path.parent.name, path.read_text(encoding="utf-8"))
    assert facts.model_dump(mode="json") == _expected(path)


@pytest.mark.parametrize("path", CASES, ids=_id)
def test_cli_json(cli, path: Path) -> None:
    result = cli("facts", "parse", path.parent.name, str(path), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == _expected(path)


@pytest.mark.parametrize("path", CASES, ids=_id)
def test_auto_names_the_kind(path: Path) -> None:
    assert detect_kind(path.read_text(encoding="utf-8")) == path.parent.name


@pytest.mark.parametrize("path", CASES[::7], ids=_id)
def test_cli_auto(cli, path: Path) -> None:
    result = cli("facts", "parse", "auto", str(path), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"kind": path.parent.name, "facts": _expected(path)}


@pytest.mark.parametrize("path", CASES[::11], ids=_id)
def test_cli_human(cli, path: Path) -> None:
    result = cli("facts", "parse", path.parent.name, str(path))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip()
