"""The one error hierarchy. Library code raises these; only `cli/app.py` turns them into exit codes.

Exit codes (docs/cli.md): 0 ok, 1 problems found or operation failed, 2 bad usage or input,
3 nodes unreachable. Precedence when several apply: 2 > 3 > 1 > 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_CANCELLED = 130

# When several outcomes apply, the first of these wins (docs/cli.md).
_PRECEDENCE = (EXIT_USAGE, EXIT_UNREACHABLE, EXIT_PROBLEMS, EXIT_OK)


def most_severe_exit(codes: list[int] | tuple[int, ...]) -> int:
    """One exit code for several outcomes: bad input > unreachable > problems > ok."""
    present = set(codes)
    return next((c for c in _PRECEDENCE if c in present), EXIT_OK)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input file: where, what was found, what was expected."""

    file: str
    key_path: str
    found: str
    expected: str
    line: int | None = None

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        key = f" {self.key_path}" if self.key_path else ""
        return f"{where}{key}: found {self.found}, expected {self.expected}"


class MacfleetError(Exception):
    """Root of every error macfleet raises on purpose."""

    exit_code: ClassVar[int] = EXIT_PROBLEMS
    code: ClassVar[str] = "error"

    def __init__(self, message: str, *, hint: str | None = None, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details or {}

    def lines(self) -> list[str]:
        """Human lines, one per problem; the first is the message."""
        return [self.message]


class UsageError(MacfleetError):
    exit_code = EXIT_USAGE
    code = "usage"


class InventoryError(MacfleetError):
    exit_code = EXIT_USAGE
    code = "inventory_invalid"

    def __init__(self, problems: list[Problem], *, hint: str | None = None):
        self.problems = list(problems)
        n = len(self.problems)
        super().__init__(
            f"inventory has {n} problem{'s' if n != 1 else ''}",
            hint=hint,
            details={"problems": [p.__dict__ for p in self.problems]},
        )

    def lines(self) -> list[str]:
        return [self.message, *(str(p) for p in self.problems)]


class FactsParseError(MacfleetError, ValueError):
    """A command's output is not what that command prints."""

    exit_code = EXIT_USAGE
    code = "facts_parse"

    def __init__(self, command: str, expected: str, *, line: int | None = None, found: str | None = None):
        self.command = command
        self.line = line
        self.expected = expected
        self.found = found
        where = f", line {line}" if line is not None else ""
        got = f": found {found!r}" if found is not None else ""
        super().__init__(
            f"unexpected output of `{command}`{where}{got}; expected {expected}",
            details={"command": command, "line": line, "expected": expected, "found": found},
        )


class UnreachableError(MacfleetError):
    exit_code = EXIT_UNREACHABLE
    code = "unreachable"

    def __init__(self, nodes: dict[str, str], *, hint: str | None = None):
        self.nodes = dict(nodes)
        names = ", ".join(sorted(self.nodes))
        super().__init__(f"unreachable: {names}", hint=hint, details={"nodes": self.nodes})

    def lines(self) -> list[str]:
        return [self.message, *(f"{n}: {why}" for n, why in sorted(self.nodes.items()))]


class RemoteCommandError(MacfleetError):
    code = "remote_command_failed"

    def __init__(self, node: str, argv: str, rc: int, stderr_tail: str):
        self.node, self.argv, self.rc, self.stderr_tail = node, argv, rc, stderr_tail
        super().__init__(
            f"{node}: `{argv}` exited {rc}: {stderr_tail.strip()[-300:]}",
            details={"node": node, "argv": argv, "rc": rc, "stderr_tail": stderr_tail[-2000:]},
        )


class PlaybookFailed(MacfleetError):
    code = "playbook_failed"


class LockHeld(MacfleetError):
    code = "lock_held"


class Refused(MacfleetError):
    code = "refused"


class RolloutFailed(MacfleetError):
    """A rollout that did not reach health and was rolled back (or could not be)."""

    code = "rollout_failed"


class Cancelled(MacfleetError):
    """Ctrl-C in the middle of a change: the message says what had been done and what had not."""

    exit_code = EXIT_CANCELLED
    code = "cancelled"


class ExoApiError(MacfleetError):
    """exo's API refused a request or gave no answer (its own message is in the text)."""

    code = "exo_api"

    def __init__(self, message: str, *, node: str, status: int | None = None, hint: str | None = None,
                 exo_says: str | None = None):
        self.node, self.status, self.exo_says = node, status, exo_says  # exo_says: exo's own error message
        super().__init__(message, hint=hint, details={"node": node, "status": status, "exo_says": exo_says})


class LabError(MacfleetError):
    """The lab could not do what was asked (a failed `ip`, a node that did not come up...)."""

    code = "lab_error"


ERROR_CODES = frozenset(
    cls.code
    for cls in (
        MacfleetError,
        UsageError,
        InventoryError,
        FactsParseError,
        UnreachableError,
        RemoteCommandError,
        PlaybookFailed,
        LockHeld,
        Refused,
        RolloutFailed,
        Cancelled,
        LabError,
        ExoApiError,
    )
)


# What a FileVault Mac waiting at its unlock screen is said to be doing, wherever it is reported (the reachability
# of collect, doctor's `reachable`, the reboot's wait, watch): one wording, so each reader can recognise it.
# apple_ssh_and_filevault(7) (macOS 26): with Remote Login on, such a Mac answers SSH with password
# authentication only, and a password login there unlocks its Data volume.
AT_UNLOCK_SCREEN = "waiting at the FileVault unlock screen"
