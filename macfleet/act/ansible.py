"""The one wrapper around ansible-runner: a typed PlaybookRun in, a typed PlaybookResult out.

It owns what ansible-runner leaves to its caller: cancellation through our own callback (ansible-runner
would otherwise take over SIGINT), live progress from events rather than polling, bounded artifacts, and
no secret on disk: ansible-playbook gets only the environment a run needs (ansible-runner would hand it,
and write into artifacts/<run>/command, every variable of the macfleet process). Ansible's SSH master
connections (ControlPersist) live in a directory of the run's own and are closed when the run ends.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from macfleet.errors import Cancelled, PlaybookFailed, UnreachableError, UsageError
from macfleet.paths import state_dir


def _shipped_root() -> Path:
    """A checkout (editable install) has playbooks/ beside the package; a wheel puts them in
    <prefix>/share/macfleet (pyproject's data-files)."""
    checkout = Path(__file__).resolve().parent.parent.parent
    if (checkout / "playbooks").is_dir():
        return checkout
    return Path(sys.prefix) / "share" / "macfleet"


SHIPPED_ROOT = _shipped_root()
PLAYBOOKS_DIR = Path(os.environ.get("MACFLEET_PLAYBOOKS", SHIPPED_ROOT / "playbooks"))
ANSIBLE_CFG = SHIPPED_ROOT / "ansible.cfg"
PLAYBOOK_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
KEEP_ARTIFACTS = 20
DEBUG_ACTIONS = ("ansible.builtin.debug", "debug")
# ansible-playbook's --ask-become-pass prompt; ansible-runner answers it from memory (never env/passwords).
BECOME_PROMPT = r"^BECOME password.*:\s*?$"
# What ansible-playbook may inherit from the macfleet process; everything else (AWS_SECRET_ACCESS_KEY,
# ANSIBLE_BECOME_PASS, tokens…) stays out of its environment and out of the artifacts. Ansible's settings
# come from our ansible.cfg, not from ANSIBLE_* variables in the caller's shell.
INHERITED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "SSH_AUTH_SOCK")
# What ansible-runner itself adds to the environment for its callback, event files and fact cache.
RUNNER_ENV = ("ANSIBLE_CALLBACK_PLUGINS", "ANSIBLE_STDOUT_CALLBACK", "ANSIBLE_RETRY_FILES_ENABLED",
              "ANSIBLE_CACHE_PLUGIN", "ANSIBLE_CACHE_PLUGIN_CONNECTION", "AWX_ISOLATED_DATA_DIR")


class _Settings:
    """Process-wide choices the command line makes once (`macfleet -vv ...`): the -v level handed to
    ansible-playbook on every run."""

    verbosity = 0


settings = _Settings()


@dataclass(frozen=True)
class PlaybookRun:
    playbook: str  # name under playbooks/, without .yml: "network", "bootstrap"...
    inventory: Path
    limit: tuple[str, ...] | None = None
    extravars: dict[str, Any] = field(default_factory=dict)
    check: bool = False
    diff: bool = False
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not PLAYBOOK_NAME.match(self.playbook):
            raise UsageError(f"playbook name {self.playbook!r} is not a plain name")

    @property
    def path(self) -> Path:
        return PLAYBOOKS_DIR / f"{self.playbook}.yml"

    @property
    def cmdline(self) -> str:
        flags = []
        if self.check:
            flags.append("--check")
        if self.diff:
            flags.append("--diff")
        return " ".join(flags)


@dataclass(frozen=True)
class ProgressEvent:
    host: str
    task: str
    status: str  # ok | changed | failed | unreachable | skipped
    changed: bool
    message: str | None = None  # a failure's message, or what a debug task said
    role: str | None = None  # the role the task belongs to (a bootstrap step)
    diff: str | None = None  # what the task changed (or would) inside files, with --diff: a unified diff


@dataclass
class HostStats:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0


@dataclass(frozen=True)
class FailedTask:
    host: str
    task: str
    message: str


@dataclass
class PlaybookResult:
    playbook: str
    status: str  # successful | failed | canceled | timeout
    rc: int
    hosts: dict[str, HostStats]
    failed_tasks: list[FailedTask]
    changes: dict[str, list[str]]  # host -> names of tasks that changed something (or would, under --check)
    unreachable: dict[str, str]
    artifact_dir: Path | None

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts.values())



def _message(res: dict[str, Any]) -> str:
    failed_items = [r for r in res.get("results") or () if isinstance(r, dict) and r.get("failed")]
    if failed_items:  # a loop: "One or more items failed" says nothing; the first failed item does
        return _message(failed_items[0])
    for key in ("msg", "stderr", "reason"):
        value = res.get(key)
        if value:
            return str(value).strip()[-500:]
    return "failed"


MAX_DIFF_CHARS = 20_000  # one task's diff as shown: a file's whole content is not a diff worth reading


def diff_text(res: dict[str, Any]) -> str | None:
    """A task result's `diff` (ansible-playbook --diff) as a unified diff, as Ansible's default callback shows it:
    before/after texts diffed with their headers, or the module's `prepared` text; bounded."""
    diffs = res.get("diff")
    out: list[str] = []
    for d in diffs if isinstance(diffs, list) else [diffs]:
        if not isinstance(d, dict):
            continue
        before, after = d.get("before"), d.get("after")
        if d.get("prepared"):
            out.append(str(d["prepared"]).rstrip("\n") + "\n")
        elif isinstance(before, str) and isinstance(after, str) and before != after:
            out += difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        str(d.get("before_header") or "before"), str(d.get("after_header") or "after"))
        elif before != after and (before or after):  # a file's state or mode: the two values
            out.append(f"- {before}\n+ {after}\n")
    text = "".join(out)
    return (text[:MAX_DIFF_CHARS] + ("\n… (cut)\n" if len(text) > MAX_DIFF_CHARS else "")) or None


def run_playbook(
    run: PlaybookRun,
    *,
    on_event: Callable[[ProgressEvent], None] | None = None,
    cancel: threading.Event | None = None,
    raise_on_failure: bool = True,
    become_password: str | None = None,
) -> PlaybookResult:
    """Run one playbook to the end (or until `cancel` is set) and describe what happened.

    `become_password` answers ansible-playbook's --ask-become-pass prompt through ansible-runner's
    `passwords` (held in memory: never argv, extravars, env files or artifacts)."""
    if not run.path.is_file():
        raise UsageError(f"no playbook {run.path}")
    if not run.inventory.is_dir():
        raise UsageError(f"no inventory directory at {run.inventory}")
    cancel = cancel or threading.Event()
    changes: dict[str, list[str]] = {}
    failed_tasks: list[FailedTask] = []
    unreachable: dict[str, str] = {}

    def event_handler(event: dict[str, Any]) -> bool:
        data = event.get("event_data") or {}
        host, task = data.get("host"), (data.get("task") or "").strip()
        res = data.get("res") or {}
        kind = event.get("event", "")
        status = None
        if kind == "runner_on_ok":
            status = "changed" if res.get("changed") else "ok"
            if res.get("changed"):
                changes.setdefault(host, []).append(task)
        elif kind == "runner_on_failed":
            status = "failed"
            if not data.get("ignore_errors"):
                failed_tasks.append(FailedTask(host, task, _message(res)))
        elif kind == "runner_on_unreachable":
            status = "unreachable"
            unreachable[host] = _message(res)
        elif kind == "runner_on_skipped":
            status = "skipped"
        if status and host and on_event is not None:
            said = res.get("msg") if data.get("task_action") in DEBUG_ACTIONS and status != "skipped" else None
            message = _message(res) if status == "failed" else (str(said) if said else None)
            on_event(ProgressEvent(host, task, status, status == "changed", message, data.get("role") or None,
                                   diff_text(res) if run.diff else None))
        return True  # keep every event in the artifacts: the run's audit trail, and where `stats` come from

    private = state_dir() / "runs"
    private.mkdir(parents=True, exist_ok=True)
    ident = f"{run.playbook}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}"
    # A short directory of this run's own for the SSH master sockets (a socket path has ~100 bytes at most).
    control_dir = Path(tempfile.mkdtemp(prefix="mf-cp-"))
    envvars = {
        "ANSIBLE_CONFIG": str(ANSIBLE_CFG),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_HOST_KEY_CHECKING": "True",  # ansible-runner sets it False when absent
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control_dir),
        "PATH": run_path(os.environ.get("PATH", "")),
    }
    try:
        with _own_signal_handlers():
            runner = _run(run, private, ident, envvars, event_handler, cancel, become_password)
    finally:
        close_ssh_masters(control_dir)
    return _result(run, runner, failed_tasks, changes, unreachable, raise_on_failure)


def run_path(inherited: str) -> str:
    """ansible-playbook is found beside the Python running macfleet first: a venv or pipx install need not be on
    the caller's PATH (`~/.venvs/macfleet/bin/macfleet doctor` still runs that venv's Ansible)."""
    ours = str(Path(sys.executable).parent)
    rest = [p for p in inherited.split(os.pathsep) if p and p != ours]
    return os.pathsep.join([ours, *rest])


def close_ssh_masters(control_dir: Path) -> None:
    """End every SSH master connection Ansible left in `control_dir` (`ssh -O exit`), then remove it: no
    connection outlives the macfleet run that opened it, so a known_hosts changed afterwards is checked."""
    for socket_path in sorted(control_dir.glob("*")) if control_dir.is_dir() else []:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):  # a master already gone: nothing to close
            subprocess.run(["ssh", "-o", f"ControlPath={socket_path}", "-O", "exit", "macfleet-control"],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
    # A master still starting when a run was cancelled has no socket yet to be told to exit: its command
    # line names our private directory, so end it by that.
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(["pkill", "-TERM", "-f", re.escape(f"{control_dir}/")],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
    shutil.rmtree(control_dir, ignore_errors=True)


@contextmanager
def _own_signal_handlers() -> Iterator[None]:
    """ansible-runner installs SIGINT/SIGTERM handlers in the main thread and never restores them;
    put ours back afterwards, so Ctrl-C stays a KeyboardInterrupt for the rest of the process."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _run(
    run: PlaybookRun,
    private: Path,
    ident: str,
    envvars: dict[str, str],
    event_handler: Callable[[dict[str, Any]], bool],
    cancel: threading.Event,
    become_password: str | None = None,
) -> Any:
    from ansible_runner.interface import init_runner  # heavy; only commands that change nodes pay for it

    cmdline = " ".join(x for x in (run.cmdline, "--ask-become-pass" if become_password is not None else "") if x)
    runner = init_runner(
        private_data_dir=str(private),
        project_dir=str(PLAYBOOKS_DIR),
        playbook=run.path.name,
        inventory=str(run.inventory.resolve()),
        limit=",".join(run.limit) if run.limit else None,
        extravars=dict(run.extravars) or None,
        tags=",".join(run.tags) if run.tags else None,
        cmdline=cmdline or None,
        verbosity=settings.verbosity or None,
        passwords={BECOME_PROMPT: become_password} if become_password is not None else None,
        envvars=envvars,
        ident=ident,
        quiet=True,
        suppress_env_files=True,
        rotate_artifacts=KEEP_ARTIFACTS,
        event_handler=event_handler,
        cancel_callback=cancel.is_set,
    )
    runner.config.env = scrubbed_env(runner.config.env, envvars)
    runner.run()
    return runner


def scrubbed_env(env: dict[str, str], ours: dict[str, str]) -> dict[str, str]:
    """Only what a run needs: ours, ansible-runner's own, and a few plain process variables."""
    keep = {*ours, *RUNNER_ENV, *INHERITED_ENV}
    return {k: v for k, v in env.items() if k in keep or k.startswith("LC_")}


def _result(
    run: PlaybookRun,
    runner: Any,
    failed_tasks: list[FailedTask],
    changes: dict[str, list[str]],
    unreachable: dict[str, str],
    raise_on_failure: bool,
) -> PlaybookResult:
    stats = runner.stats or {}
    hosts: dict[str, HostStats] = {}
    for field_name, key in (
        ("ok", "ok"),
        ("changed", "changed"),
        ("failed", "failures"),
        ("unreachable", "dark"),
        ("skipped", "skipped"),
    ):
        for host, count in (stats.get(key) or {}).items():
            setattr(hosts.setdefault(host, HostStats()), field_name, count)
    artifact_dir = Path(runner.config.artifact_dir) if getattr(runner, "config", None) else None
    result = PlaybookResult(
        playbook=run.playbook,
        status=runner.status,
        rc=runner.rc,
        hosts=hosts,
        failed_tasks=failed_tasks,
        changes=changes,
        unreachable=unreachable,
        artifact_dir=artifact_dir,
    )
    if raise_on_failure:
        raise_for(result)
    return result


def raise_for(result: PlaybookResult) -> None:
    """Unreachable hosts outrank task failures (exit 3 over 1), as everywhere in macfleet."""
    if result.unreachable:
        raise UnreachableError(result.unreachable, hint=f"ansible artifacts: {result.artifact_dir}")
    if result.status == "canceled":
        raise Cancelled(cancel_summary(result))
    if result.failed_tasks or result.status != "successful":
        first = result.failed_tasks[0] if result.failed_tasks else None
        where = f": {first.host}: {first.task}: {first.message}" if first else f" ({result.status}, rc {result.rc})"
        raise PlaybookFailed(
            f"playbook {result.playbook} failed{where}",
            hint=f"ansible artifacts: {result.artifact_dir}",
            details={
                "failed_tasks": [t.__dict__ for t in result.failed_tasks],
                "hosts": {h: s.__dict__ for h, s in result.hosts.items()},
            },
        )


def cancel_summary(result: PlaybookResult) -> str:
    """One line: what a cancelled run had done, and that the rest was not."""
    changed = sorted((h, len(tasks)) for h, tasks in result.changes.items() if tasks)
    done = ", ".join(f"{n} task(s) changed {h}" for h, n in changed) or "nothing had been changed"
    return f"playbook {result.playbook} cancelled: {done}; the tasks after that were not run"
