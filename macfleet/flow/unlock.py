"""`macfleet unlock`: unlock FileVault Macs waiting at their unlock screen over SSH (macOS 26), then wait for each
to come back with its normal host key.

Per node: look at the key it shows (act.unlock.look: the recorded unlock-screen key, its normal key, or neither:
refused as an intrusion), send the password to those at the unlock screen (act.unlock.send_password), then wait
for them over their normal, strictly checked SSH (act.reboot.wait_for_nodes: the brief drop of
apple_ssh_and_filevault(7), then a login that answers). `check`: the look only; nothing is sent.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from macfleet.act import reboot as act_reboot
from macfleet.act import unlock as act
from macfleet.collect.kept import NodeSessions
from macfleet.collect.ssh import SshTarget
from macfleet.errors import EXIT_OK, EXIT_PROBLEMS, EXIT_UNREACHABLE, UsageError, most_severe_exit
from macfleet.flow.bootstrap import read_secret_file
from macfleet.inventory.model import Fleet


@dataclass
class NodeUnlock:
    node: str
    seen: str  # what look() said: unlock-screen | normal | unknown-key | unreachable
    result: str  # would unlock | nothing to do | refused | unreachable | unlocked | not back | password refused
    detail: str
    fingerprint: str | None = None
    took_s: float | None = None

    @property
    def exit_code(self) -> int:
        if self.result in ("unreachable", "not back"):
            return EXIT_UNREACHABLE
        return EXIT_PROBLEMS if self.result in ("refused", "password refused") else EXIT_OK


@dataclass
class UnlockReport:
    check: bool
    nodes: list[NodeUnlock] = field(default_factory=list)
    timeout_s: float = 0.0

    @property
    def exit_code(self) -> int:
        return most_severe_exit([n.exit_code for n in self.nodes])

    def payload(self) -> dict:
        return {"check": self.check, "timeout_s": self.timeout_s,
                "nodes": [{"name": n.node, "seen": n.seen, "result": n.result, "detail": n.detail,
                           "fingerprint": n.fingerprint, "took_s": n.took_s} for n in self.nodes]}


def password_file(fleet: Fleet, nodes: list[str], given: Path | None) -> Path:
    """--password-file, else the FileVault credential of the nodes' mesh (macfleet_reboot), else bad input."""
    if given is not None:
        return given
    meshes = {fleet.node(n).mesh for n in nodes}
    files = {m.settings.reboot.filevault_credential_file for m in fleet.meshes if m.name in meshes}
    if len(files) == 1 and None not in files:
        return fleet.path(files.pop())  # type: ignore[return-value]
    raise UsageError("no password to unlock with: give --password-file FILE (the password of a FileVault-enabled "
                     "user, first line of a file only you can read)",
                     hint="or name it once in the inventory: macfleet_reboot.filevault_credential_file")


def targets_for(fleet: Fleet, nodes: list[str]) -> dict[str, SshTarget]:
    targets = {n: SshTarget.for_node(fleet, fleet.node(n)) for n in nodes}
    through = sorted(n for n, t in targets.items() if t.jumps or t.proxy_command)
    if through:
        raise UsageError("unlock connects directly; these nodes are reached through a jump host: " + ", ".join(through),
                         hint="unlock them from the jump host: ssh -o UserKnownHostsFile=KNOWN_HOSTS.unlock "
                              "-o StrictHostKeyChecking=yes -o PubkeyAuthentication=no USER@NODE")
    for t in targets.values():
        if t.unlock_known_hosts is None:
            raise UsageError(f"{t.node}: no known_hosts file in the inventory, so no unlock-screen key can be recorded "
                             "for it", hint="set macfleet_ssh.known_hosts_file: known_hosts in group_vars/all")
        t.check_local_files()
    return targets


def unlock_nodes(fleet: Fleet, nodes: list[str], secret_file: Path, *, check: bool, timeout_s: float,
                 progress: act_reboot.Progress) -> UnlockReport:
    """Look at every node, unlock those at the unlock screen (unless `check`), wait for them to be back."""
    password = read_secret_file(secret_file)  # bad input before anything is sent, in a preview too
    targets = targets_for(fleet, nodes)
    report = UnlockReport(check=check, timeout_s=timeout_s)
    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
        seen = dict(zip(nodes, pool.map(lambda n: act.look(targets[n]), nodes), strict=True))
    rows: dict[str, NodeUnlock] = {}
    for n, s in seen.items():
        result = {"unlock-screen": "would unlock", "normal": "nothing to do", "unknown-key": "refused",
                  "unreachable": "unreachable"}[s.state]
        rows[n] = NodeUnlock(n, s.state, result, s.detail, s.fingerprint)
    locked = [n for n in nodes if rows[n].seen == "unlock-screen"]
    if not check and locked:
        with ThreadPoolExecutor(max_workers=len(locked)) as pool:
            sent = dict(zip(locked, pool.map(lambda n: act.send_password(targets[n], password), locked), strict=True))
        for n, (ok, detail) in sent.items():
            progress(n, "unlocking" if ok else "failed", detail)
            if not ok:
                rows[n].result = "password refused" if "refused the password" in detail else "refused"
                rows[n].detail = detail
        waiting = [n for n in locked if sent[n][0]]
        if waiting:
            sessions = NodeSessions(fleet, waiting)
            try:
                waits = act_reboot.wait_for_nodes(sessions, waiting, {}, timeout_s, progress)
            finally:
                sessions.close()
            for n in waiting:
                w = waits[n]
                rows[n].result = "unlocked" if w.back else "not back"
                rows[n].detail = (f"{sent[n][1]}; back with its normal host key" if w.back else
                                  f"{sent[n][1]}; not back with its normal host key within {timeout_s:g} s "
                                  f"(last seen: {w.last_seen})")
                rows[n].took_s = w.took_s
    report.nodes = [rows[n] for n in nodes]
    return report
