"""Doctor's read of two LaunchDaemons: macfleet's own exo job (its environment: where exo looks for models) and
exo's app's network daemon `io.exo.networksetup` (installed, loaded, disabled, how often it ran).

One command reads both (collect/commands.py `exo_daemons_spec`); its output is sections, each opened by a line
`--- NAME`:

    --- exo-plist            the exo job's plist (XML, as bootstrap writes it), or "(unreadable: WHY)"
    --- networksetup-plist   "present" or "absent": /Library/LaunchDaemons/io.exo.networksetup.plist
    --- networksetup-job     `launchctl print system/io.exo.networksetup`, then "exit N"
    --- disabled             `launchctl print-disabled system`, then "exit N"

What is read from launchctl: its exit status (0: the job is loaded; 113: "Could not find service", what
launchctl answers for a job that is not loaded: DeterminateSystems/nix-installer#960,
TOSS-Soft/toss-agent-runtime#40), and the `state = `, `runs = ` and `last exit code = ` lines of `print`
(release.py reads the same `state = running`); from `print-disabled` the line `"LABEL" => disabled` (macOS 13
and later) or `=> true` (earlier). launchctl(1): a disabled service "cannot be loaded in the specified domain
until it is once again enabled. This state persists across boots". No capture of either output from a Mac is in
the repository yet: docs/lab.md lists the lab's stand-in shapes as guesses.
"""

from __future__ import annotations

import plistlib
import re

from macfleet.errors import FactsParseError
from macfleet.facts._common import Facts
from macfleet.facts.kinds import EXO_JOB_PLIST, NETWORKSETUP_LABEL, NETWORKSETUP_PLIST

__all__ = ["EXO_JOB_PLIST", "NETWORKSETUP_LABEL", "NETWORKSETUP_PLIST", "ExoDaemonsFacts", "parse_exo_daemons"]

LAUNCHCTL_NOT_FOUND = 113
SECTIONS = ("exo-plist", "networksetup-plist", "networksetup-job", "disabled")


class ExoJobFacts(Facts):
    environment: dict[str, str]


class NetworkSetupFacts(Facts):
    plist_present: bool
    loaded: bool
    state: str | None = None  # "running", "not running"
    runs: int | None = None
    last_exit: str | None = None
    disabled: bool | None = None  # None: print-disabled does not name it (launchd's default: enabled)
    disabled_read: bool = True  # False: print-disabled failed, so `disabled` says nothing


class ExoDaemonsFacts(Facts):
    exo_job: ExoJobFacts | None = None  # None: the plist could not be read (exo_job_problem says why)
    exo_job_problem: str | None = None
    networksetup: NetworkSetupFacts


def _sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        m = re.fullmatch(r"--- ([a-z-]+)", line.strip())
        if m and m.group(1) in SECTIONS:
            current = out.setdefault(m.group(1), [])
        elif current is not None:
            current.append(line)
    missing = [s for s in SECTIONS if s not in out]
    if missing:
        raise FactsParseError("exo daemons", f"the sections {', '.join(SECTIONS)}", found=f"no {missing[0]}")
    return out


def _exit(lines: list[str], what: str) -> tuple[int, list[str]]:
    body = [x for x in lines if x.strip()]
    m = re.fullmatch(r"exit (\d+)", body[-1].strip()) if body else None
    if m is None:
        raise FactsParseError("exo daemons", f"{what} ending with its exit status", found=(body or [""])[-1][:80])
    return int(m.group(1)), body[:-1]


def _exo_job(lines: list[str]) -> tuple[ExoJobFacts | None, str | None]:
    text = "\n".join(lines).strip()
    if text.startswith("(unreadable"):
        return None, text.strip("()")[:200]
    try:
        job = plistlib.loads(text.encode())
    except Exception as exc:  # plistlib raises several types for a bad document
        return None, f"not a plist: {str(exc)[:120]}"
    env = job.get("EnvironmentVariables") if isinstance(job, dict) else None
    if not isinstance(env, dict):
        return ExoJobFacts(environment={}), None
    return ExoJobFacts(environment={str(k): str(v) for k, v in env.items()}), None


def parse_exo_daemons(text: str) -> ExoDaemonsFacts:
    s = _sections(text)
    job, why = _exo_job(s["exo-plist"])
    present = [x.strip() for x in s["networksetup-plist"] if x.strip()]
    if present not in (["present"], ["absent"]):
        raise FactsParseError("exo daemons", "present or absent", found=" ".join(present)[:80])
    rc, body = _exit(s["networksetup-job"], "launchctl print")
    if rc not in (0, LAUNCHCTL_NOT_FOUND):
        raise FactsParseError("exo daemons", "launchctl print exiting 0 or 113", found=f"exit {rc}")
    fields: dict[str, str] = {}
    for line in body:
        m = re.fullmatch(r"\s*(state|runs|last exit code) = (.*)", line)
        if m and m.group(1) not in fields:
            fields[m.group(1)] = m.group(2).strip()
    drc, dbody = _exit(s["disabled"], "launchctl print-disabled")
    disabled = None
    if drc == 0:
        for line in dbody:
            m = re.fullmatch(rf'\s*"{re.escape(NETWORKSETUP_LABEL)}" => (\w+)', line)
            if m:
                disabled = m.group(1) in ("disabled", "true")
    runs = fields.get("runs")
    setup = NetworkSetupFacts(plist_present=present == ["present"], loaded=rc == 0, state=fields.get("state"),
                              runs=int(runs) if runs and runs.isdigit() else None,
                              last_exit=fields.get("last exit code"), disabled=disabled, disabled_read=drc == 0)
    return ExoDaemonsFacts(exo_job=job, exo_job_problem=why, networksetup=setup)
