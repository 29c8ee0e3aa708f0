"""The product reads nothing only the lab provides: no header, field, file, option or exit code that a stand-in
adds and real Macs or real exo lack (issue 31 item 3). Each stand-in declares those names (`LAB_ONLY` in
macfleet/lab/exo/standin.py and macfleet/lab/lab_only.py); this scans every file of the product for them."""

from __future__ import annotations

from pathlib import Path

import pytest

from macfleet.lab.lab_only import GUESSED_EXIT_CODES, LAB_ONLY

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "macfleet" / "lab"


def _product_files() -> list[Path]:
    files = [p for p in (ROOT / "macfleet").rglob("*") if p.is_file() and LAB not in p.parents
             and "__pycache__" not in p.parts]
    files += [p for p in (ROOT / "playbooks").rglob("*") if p.is_file()]
    return sorted(files)


def _product_lines(*, mentioning: str = "") -> list[tuple[str, str]]:
    """("path:line", text) of every text line of the product, in the files that mention `mentioning`."""
    out = []
    for path in _product_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if mentioning in text:
            out += [(f"{path.relative_to(ROOT)}:{i}", line) for i, line in enumerate(text.splitlines(), 1)]
    return out


def test_the_lab_declares_its_additions() -> None:
    assert "X-Exo-Version" in LAB_ONLY and "/_lab/gossip" in LAB_ONLY
    assert all(name.strip() == name and len(name) >= 6 for name in LAB_ONLY)  # distinctive enough to scan for


@pytest.mark.parametrize("name", sorted(LAB_ONLY))
def test_the_product_never_reads_a_lab_only_name(name: str) -> None:
    hits = [f"{where}: {line.strip()[:120]}" for where, line in _product_lines() if name.lower() in line.lower()]
    assert not hits, f"the product uses {name!r}, which only the lab provides:\n" + "\n".join(hits)


@pytest.mark.parametrize(("command", "code"), sorted(GUESSED_EXIT_CODES.items()))
def test_the_product_never_branches_on_an_exit_code_only_the_lab_gives(command: str, code: int) -> None:
    """A guessed exit status (xcrun's 72, networksetup's 14, ibv_devinfo's 255 with no device) may reach the
    product as a failure, but no file that runs the command compares a status with that number."""
    import re

    compare = re.compile(rf"(returncode|\brc\b|exit|status)\W.{{0,12}}\b{code}\b", re.IGNORECASE)
    hits = [f"{where}: {line.strip()[:120]}" for where, line in _product_lines(mentioning=command)
            if compare.search(line.split("#")[0])]  # code, not a comment's example
    assert not hits, f"the product compares an exit status with {code}, which only the lab's {command} gives:\n" + \
        "\n".join(hits)
