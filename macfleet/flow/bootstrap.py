"""`macfleet bootstrap`: from Macs out of the box to nodes ready for the mesh.

One pass over SSH first (reachability with the known host key, whether Ansible may become root without a
password, RDMA, FileVault), then the IP plan judged and written as generated host_vars, then
`playbooks/bootstrap.yml` through the one ansible-runner wrapper, its events fed to a progress callback.
The become password, when one is needed, is asked for once (by the caller) and handed to ansible-runner in
memory: never argv, extravars, a file under the state directory, a log or an artifact.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from macfleet.act.ansible import PlaybookRun, ProgressEvent, run_playbook
from macfleet.act.hostvars import write_generated_hostvars
from macfleet.collect.commands import CommandSpec, specs_for
from macfleet.collect.gather import Gathered, gather
from macfleet.errors import EXIT_OK, EXIT_PROBLEMS, EXIT_UNREACHABLE, Refused, UnreachableError, UsageError
from macfleet.facts.rdma import RdmaCtlFacts
from macfleet.facts.registry import facts_from_outputs
from macfleet.facts.system import FdesetupFacts
from macfleet.flow.topology import NETWORK_KINDS, PreparedApply, inventory_for_run, prepare_apply
from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge.bootstrap import filevault_record, rdma_needs

# The playbook's roles, in the order they run: the columns of the progress table. The probe role (one read of
# each Mac for the roles after it) shows in the preflight column.
STEPS = ("preflight", "clt", "sudoers", "homebrew", "pmset", "gpu", "exo", "spotlight", "pf", "ipplan", "filevault")
READ_ROLES = ("probe",)
PYTHON = "/usr/bin/python3"  # ansible_python_interpreter on the Macs
# Whether sudo runs the playbook's probe (a script given to Python: the drop-in's widest line) without a
# password. It is run, not asked about: `sudo -l CMD` says yes to any command some rule allows, and every Mac's
# admin may run anything with a password. A drop-in from before the probe ran this way asks for it once.
# Its id has Ansible's form (32 lower-case letters), the only one the drop-in's become lines match.
BECOME_MARK = "BECOME-SUCCESS-macfleetbootstrapprobeforsudoers"
BECOME_PROBE = CommandSpec("sudo-become", ("sudo", "-n", "/bin/sh", "-c", f"echo {BECOME_MARK} ; {PYTHON} -I -c pass"),
                           timeout_s=10)
# The admin's home on each Mac: the roles' paths are made of it, and the playbook's first play, which finds the
# Macs with nothing to change in one read each, needs it before that read (bootstrap_homes).
HOME_PROBE = CommandSpec("admin-home", ("printenv", "HOME"), timeout_s=10)
HOME_PATH = re.compile(r"/[^\x00-\x1f\x7f]{0,1023}")
NEEDS_HUMAN = "needs a human: "
NOTE = "note: "
# The playbook's word that every role found a Mac as it should be; the Mac leaves the run there, so the steps
# after send no events for it.
SETTLED = "settled: "
SETTLED_STEPS = STEPS[STEPS.index("clt"):]
MAX_SECRET_BYTES = 4096


@dataclass
class NodeOutcome:
    changed: int = 0
    failed: bool = False
    needs_human: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)  # task names that changed (or would, under --check)


@dataclass
class BootstrapReport:
    nodes: dict[str, NodeOutcome]
    unreachable: dict[str, str]
    check: bool
    artifact_dir: Path | None = None

    @property
    def changed(self) -> int:
        return sum(o.changed for o in self.nodes.values())

    def json_payload(self) -> dict:
        return {
            "changed": self.changed,
            "nodes": {n: {"changed": o.changed, "failed": o.failed, "needs_human": list(o.needs_human)}
                      for n, o in self.nodes.items()},
        }

    @property
    def exit_code(self) -> int:
        if self.unreachable:
            return EXIT_UNREACHABLE
        if any(o.failed or o.needs_human for o in self.nodes.values()):
            return EXIT_PROBLEMS
        return EXIT_OK


def read_secret_file(path: Path) -> str:
    """The first line of a file only its owner can read (the owner being us), else a UsageError."""
    try:
        st = path.stat()
    except OSError as exc:
        raise UsageError(f"cannot read the password file {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"the password file {path} is not a regular file")
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise UsageError(f"refused the password file {path}: others can read it (mode {stat.S_IMODE(st.st_mode):04o},"
                         f" owner uid {st.st_uid})", hint=f"chown $USER {path} && chmod 600 {path}")
    with path.open("rb") as fh:
        data = fh.read(MAX_SECRET_BYTES + 1)
    if len(data) > MAX_SECRET_BYTES:
        raise UsageError(f"the password file {path} is larger than {MAX_SECRET_BYTES} bytes")
    secret = data.decode("utf-8", errors="strict").split("\n", 1)[0].rstrip("\r")
    if not secret:
        raise UsageError(f"the password file {path} is empty")
    return secret


def _facts(gathered: Gathered, node: str) -> tuple[RdmaCtlFacts | None, FdesetupFacts | None]:
    facts, _ = facts_from_outputs(gathered.outputs.get(node, {}), gathered.failed.get(node, {}),
                                  ("rdma-ctl", "fdesetup"))
    rdma, fde = facts["rdma-ctl"], facts["fdesetup"]
    return (rdma if isinstance(rdma, RdmaCtlFacts) else None, fde if isinstance(fde, FdesetupFacts) else None)


def _homes(gathered: Gathered, nodes: list[str]) -> dict[str, str]:
    """Each node's home as its own pass read it; a node without one (or with one that is no plain path) goes
    through the whole playbook."""
    homes = {}
    for n in nodes:
        raw = gathered.outputs.get(n, {}).get(HOME_PROBE.key)
        home = raw.stdout.strip() if raw is not None and raw.rc == 0 else ""
        if HOME_PATH.fullmatch(home):
            homes[n] = home
    return homes


def _prepare_ipplan(fleet: Fleet, meshes: list[Mesh], outcomes: dict[str, NodeOutcome],
                    gathered: Gathered) -> PreparedApply | None:
    """Judge the IP plan on the live cables (read in bootstrap's one pass); None when it cannot be applied now,
    with the reason added to every node (the rest of bootstrap still runs)."""
    try:
        prepared = prepare_apply(fleet, meshes, gathered)
    except (UnreachableError, Refused) as exc:
        why = exc.hint if isinstance(exc, Refused) and exc.hint else exc.message
        for o in outcomes.values():
            o.needs_human.append(f"the IP plan was not applied ({exc.message}). Fix: {why}; then run bootstrap again.")
        return None
    for mesh_name, pairs in prepared.uncabled.items():
        for n in fleet.mesh(mesh_name).node_names:
            outcomes[n].needs_human.append(f"{pairs} pair(s) of mesh {mesh_name} have no cable yet. Fix: cable them "
                                           "as `macfleet topology plan` shows, then run bootstrap again.")
    return prepared


def _record(outcome: NodeOutcome, e: ProgressEvent) -> None:
    if e.status == "changed":
        outcome.changed += 1
        outcome.changes.append(e.task)
    elif e.status == "failed":
        outcome.failed = True
        outcome.needs_human.append(f"{e.message or 'failed'} (step: {e.task.rstrip('.')})")
    elif e.status == "unreachable":
        outcome.failed = True
    if e.message and e.status in ("ok", "changed"):
        if e.message.startswith(NEEDS_HUMAN):
            outcome.needs_human.append(e.message.removeprefix(NEEDS_HUMAN))
        elif e.message.startswith(NOTE):
            outcome.notes.append(e.message.removeprefix(NOTE))


def bootstrap(
    fleet: Fleet,
    meshes: list[Mesh],
    *,
    check: bool,
    become_password: Callable[[list[str]], str | None],
    on_step: Callable[[str, str, str], None] | None = None,
    cancel: threading.Event | None = None,
    partial: tuple[str, ...] = (),
    diff: bool = False,
    on_diff: Callable[[str, str, str], None] | None = None,
) -> BootstrapReport:
    """Bootstrap every node of `meshes`. `become_password(nodes)` is asked only when sudo wants a password on
    those nodes; it returns the password, or None when none may be asked for (those nodes are then left out and
    reported). `on_step(node, step, status)` follows the playbook live. `partial` names the meshes `--limit` left
    only part of: the IP plan, made for a whole mesh, is not applied to them."""
    names = [n for m in meshes for n in m.node_names]
    outcomes = {n: NodeOutcome() for n in names}
    # one pass: sudo, RDMA, FileVault and what the IP plan is judged on
    gathered = gather(fleet, [n for m in meshes for n in m.nodes],
                      (BECOME_PROBE, HOME_PROBE, *specs_for(("rdma-ctl", "fdesetup", *NETWORK_KINDS))),
                      cancel=cancel)
    unreachable = dict(gathered.unreachable)
    for n, why in unreachable.items():
        outcomes[n].failed = True
        outcomes[n].needs_human.append(f"unreachable: {why}")
    reachable = [n for n in names if n not in unreachable]
    for n in reachable:
        rdma, fde = _facts(gathered, n)
        if (line := rdma_needs(n, rdma)) is not None:
            outcomes[n].needs_human.append(line)
        if not check:
            write_generated_hostvars(fleet, n, {"macfleet_filevault": filevault_record(fde)}, by="bootstrap")
    needs_password = [n for n in reachable
                      if (raw := gathered.outputs.get(n, {}).get(BECOME_PROBE.key)) is None
                      or BECOME_MARK not in raw.stdout]
    password = become_password(needs_password) if needs_password else None
    run_nodes = reachable
    if needs_password and password is None:
        run_nodes = [n for n in reachable if n not in needs_password]
        for n in needs_password:
            outcomes[n].failed = True
            outcomes[n].needs_human.append(
                "sudo asks for the admin password and none may be asked for here. Fix: run bootstrap at a terminal, "
                "or give --become-password-file FILE (readable only by you); bootstrap then installs macfleet's "
                "scoped sudoers drop-in, so later runs need no password.")
    prepared = _prepare_ipplan(fleet, meshes, outcomes, gathered) if not unreachable and not partial else None
    if partial:
        for n in reachable:
            outcomes[n].notes.append("the IP plan is applied to whole meshes: run bootstrap without --limit for it")
    elif unreachable:
        for n in reachable:
            outcomes[n].notes.append("the IP plan waits until every node of the mesh answers")
    if not run_nodes:
        return BootstrapReport(outcomes, unreachable, check)

    def on_event(e: ProgressEvent) -> None:
        if e.diff and on_diff is not None:  # --diff: what the task changed (or would) in files
            on_diff(e.host, e.task, e.diff)
        if e.host in outcomes:
            _record(outcomes[e.host], e)
            if on_step is not None:
                on_step(e.host, "preflight" if not e.role or e.role in READ_ROLES else e.role, e.status)
                if e.status == "ok" and e.message and e.message.startswith(SETTLED):
                    for step in SETTLED_STEPS:
                        on_step(e.host, step, "skipped" if step == "ipplan" and prepared is None else "ok")

    # the plan goes into generated host_vars (under --check, into a private copy of the inventory)
    with inventory_for_run(fleet, prepared, check) if prepared else nullcontext(fleet.root) as inventory:
        result = run_playbook(
            PlaybookRun(playbook="bootstrap", inventory=inventory, limit=tuple(run_nodes), check=check,
                        diff=check or diff, extravars={"bootstrap_ipplan": prepared is not None,
                                   "bootstrap_homes": _homes(gathered, run_nodes)}),
            on_event=on_event, cancel=cancel, raise_on_failure=False, become_password=password)
    if result.status == "canceled":
        raise KeyboardInterrupt
    for n, why in result.unreachable.items():
        unreachable[n] = why
        if n in outcomes:
            outcomes[n].failed = True
            outcomes[n].needs_human.append(f"unreachable: {why}")
    for n in run_nodes:
        stats = result.hosts.get(n)
        if stats is not None and stats.failed:
            outcomes[n].failed = True
    return BootstrapReport(outcomes, unreachable, check, result.artifact_dir)
