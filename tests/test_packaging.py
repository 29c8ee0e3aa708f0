"""What a non-editable install carries besides the package: every playbook file and ansible.cfg."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_playbook_file_is_shipped() -> None:
    data_files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    shipped = {p.resolve() for patterns in data_files.values() for pattern in patterns for p in ROOT.glob(pattern)}
    wanted = {p.resolve() for p in (ROOT / "playbooks").rglob("*")
              if p.is_file() and p.suffix != ".md" and "__pycache__" not in p.parts}
    assert wanted - shipped == set(), "add these to [tool.setuptools.data-files] in pyproject.toml"
    assert (ROOT / "ansible.cfg").resolve() in shipped
    for target, patterns in data_files.items():
        for pattern in patterns:
            for p in ROOT.glob(pattern):
                # each file lands under share/macfleet/<its path in the checkout>
                assert target == str(Path("share/macfleet") / p.relative_to(ROOT).parent).rstrip("/."), (target, p)
