"""A parser accepts only text of its own shape: proven over every real capture and every other kind's parser."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from macfleet.errors import FactsParseError
from macfleet.facts.registry import KIND_NAMES, detect_kind, parse
from tests.conftest import CAPTURES, ROOT

CAPTURE_FILES = sorted(
    p for p in CAPTURES.glob("*/*") if p.is_file() and not p.name.endswith(".expected.json")
)

# Captures that genuinely hold another kind's output too, so that kind's parser is right to accept them:
# a transcript of two commands, and a sysctl line followed by `system_profiler SPHardwareDataType | grep` lines.
AMBIGUOUS = {
    ("hardware", "macos__sysctl_memsize_plus_sphardware_grep_studio_m3ultra_1.txt"),
    ("ibv-devices", "mlx__omlx-issue-3037_rdma_ctl_status_ibv_devices_empty_tb4.txt"),
}


def _text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_a_parser_refuses_every_other_kinds_real_capture(kind: str) -> None:
    accepted = []
    for path in CAPTURE_FILES:
        if path.parent.name == kind or (kind, path.name) in AMBIGUOUS:
            continue
        try:
            parse(kind, _text(path))
        except FactsParseError:
            continue
        accepted.append(f"{path.parent.name}/{path.name}")
    assert accepted == []


def test_the_ambiguous_pairs_are_still_ambiguous() -> None:
    """If one of these stops being accepted, take it off the list (it is no longer an exception)."""
    for kind, name in AMBIGUOUS:
        (path,) = CAPTURES.glob(f"*/{name}")
        parse(kind, _text(path))


@pytest.mark.parametrize("path", CAPTURE_FILES, ids=lambda p: p.name)
def test_auto_is_never_fooled(path: Path) -> None:
    assert detect_kind(_text(path)) == path.parent.name


BINARY = [
    b"\x00" * 4096,
    bytes(range(256)) * 8,
    b"hw.memsize: 1\n\x00\x01\x02",
    b"rdma-enable\t1\n\x1b[31m",
    "enabled\n".encode("utf-16"),
    b"enabled\n" + bytes(range(128, 256)) * 4,  # no NUL, but hundreds of bytes that are not UTF-8
]


@pytest.mark.parametrize("kind", KIND_NAMES)
@pytest.mark.parametrize("data", BINARY, ids=range(len(BINARY)))
def test_binary_data_is_refused_by_every_parser(kind: str, data: bytes) -> None:
    with pytest.raises(FactsParseError):
        parse(kind, data.decode("utf-8", errors="replace"))


def _run(*argv: str, close_stdin: bool = False) -> subprocess.CompletedProcess:
    """The CLI in a child with 1 GB of address space: an unbounded read fails the test, not the machine."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        if close_stdin:
            os.close(0)

    return subprocess.run([sys.executable, "-m", "macfleet", *argv], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=60, cwd=ROOT, preexec_fn=limit)


@pytest.mark.parametrize("kind", ["sysctl", "auto"])
def test_dev_zero_is_a_clean_error(kind: str) -> None:
    result = _run("facts", "parse", kind, "/dev/zero", "--json")
    assert result.returncode == 2, result.stderr
    assert "larger than 8 MiB" in json.loads(result.stdout)["error"]["message"]


def test_a_closed_stdin_is_a_clean_error() -> None:
    result = _run("facts", "parse", "sysctl", "-", close_stdin=True)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "standard input" in result.stderr
