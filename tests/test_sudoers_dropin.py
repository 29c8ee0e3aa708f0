"""The sudoers drop-in's become lines match the command Ansible's sudo plugin builds and no shell command put
where its id goes; its header says plainly what each line permits (issue 25, item 12)."""

from __future__ import annotations

import fnmatch
import re
import secrets
import string

import pytest

from macfleet.flow.bootstrap import BECOME_MARK, BECOME_PROBE
from tests.test_bootstrap_playbook import ROOT, sudoers

# shared/research/reviews-2026-12/hostile.md row 18: `*` in `BECOME-SUCCESS-[a-z]*` matched `;`, and this made a
# setuid-root shell (issue 25 quotes it without the space before the last `;`: both are here).
REVIEW_EXPLOIT = "echo BECOME-SUCCESS-a; cp /bin/sh /tmp/x; chmod 4755 /tmp/x ; /usr/bin/python3"


def _entries(text: str) -> list[tuple[str, str]]:
    text = text.replace("\\\n", "")  # sudoers continues a line with a backslash
    alias = re.search(r"^Cmnd_Alias MACFLEET_ANSIBLE = (.*)$", text, re.M)
    assert alias is not None
    return [tuple(entry.strip().split(" ", 1)) for entry in alias.group(1).split(", ")]


def _allowed(entries: list[tuple[str, str]], argv: list[str]) -> bool:
    """sudo's rule: the command's path, then its arguments joined by spaces against the pattern (fnmatch, where
    `*` matches anything, spaces and `;` included)."""
    return any(argv[0] == cmd and fnmatch.fnmatchcase(" ".join(argv[1:]), args) for cmd, args in entries)


def _ansible_id() -> str:
    return "".join(secrets.choice(string.ascii_lowercase) for _ in range(32))


@pytest.mark.parametrize("shell_line", [
    REVIEW_EXPLOIT,
    REVIEW_EXPLOIT.replace(" ; /usr", "; /usr"),
    f"echo BECOME-SUCCESS-{'a' * 32}; cp /bin/sh /tmp/x; chmod 4755 /tmp/x; /usr/bin/python3",
    f"echo BECOME-SUCCESS-{'a' * 32} ; cp /bin/sh /tmp/x ; /usr/bin/python3",
    f"echo BECOME-SUCCESS-{'a' * 33} ; /usr/bin/python3",
    f"echo BECOME-SUCCESS-{'a' * 31} ; /usr/bin/python3",
    f"echo BECOME-SUCCESS-{'a' * 31}; ; /usr/bin/python3",
    f"echo BECOME-SUCCESS-{'A' * 32} ; /usr/bin/python3",
    f"echo BECOME-SUCCESS-{'a' * 32} ; /usr/bin/python3 ; sh",
    f"echo BECOME-SUCCESS-{'a' * 31}$(sh) ; /usr/bin/python3",
], ids=["review", "issue", "id-then-commands", "spaced", "long-id", "short-id", "id-semicolon", "upper", "tail",
        "subst"])
def test_no_shell_command_fits_where_the_id_goes(shell_line: str) -> None:
    assert not _allowed(_entries(sudoers()), ["/bin/sh", "-c", shell_line])


def test_what_ansible_and_macfleet_run_still_fits() -> None:
    entries = _entries(sudoers())
    for _ in range(20):
        assert _allowed(entries, ["/bin/sh", "-c", f"echo BECOME-SUCCESS-{_ansible_id()} ; /usr/bin/python3"])
    assert _allowed(entries, list(BECOME_PROBE.argv[2:]))
    assert re.fullmatch(r"BECOME-SUCCESS-[a-z]{32}", BECOME_MARK), "Ansible's form: the drop-in matches no other"
    playbook = (ROOT / "playbooks" / "bootstrap.yml").read_text()
    assert re.findall(r"BECOME-SUCCESS-[A-Za-z0-9]+", playbook) == [BECOME_MARK]  # the first play's probe


def test_the_header_says_what_the_become_lines_permit() -> None:
    text = sudoers()
    assert "nothing else" not in text
    header = text.split("Cmnd_Alias", 1)[0]
    assert "ANY PYTHON PROGRAM AS ROOT" in header and "sudoers_allow_ansible: false" in header
    comment = text.split("Cmnd_Alias MACFLEET_ANSIBLE", 1)[0].rsplit("\n\n", 1)[1]
    assert "any command as root" in comment  # the probe's line, whose `*` takes anything after `-c`
    without = sudoers(sudoers_allow_ansible=False)
    assert "MACFLEET_ANSIBLE" not in without and "PYTHON" not in without
    for block in (b for b in text.split("\n\n") if "Cmnd_Alias" in b):  # every alias carries its own comment
        assert block.lstrip().startswith("#"), block
