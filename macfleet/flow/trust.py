"""First contact with a Mac: fetch its SSH host key, show its fingerprint, and record it in the inventory's
known_hosts only when the operator confirmed it. A key that differs from the recorded one is refused with
both fingerprints, never replaced: that is what an impersonation looks like.

The key is read with a bare paramiko Transport (key exchange, then only the `none` method, which no server
accepts, to learn which methods it offers), as `ssh-keyscan` and `ssh -v` do; the fingerprint is OpenSSH's
(`SHA256:` + unpadded base64 of the key blob's SHA-256).

A FileVault Mac at its unlock screen (macOS 26) answers SSH with a key of its own and password authentication
only (apple_ssh_and_filevault(7): its keys and sshd configuration are on the locked Data volume). That key is
recorded apart, with `--unlock`, in the inventory's known_hosts + ".unlock" (collect.ssh.unlock_known_hosts):
confirmed as any first contact is, never replacing the normal key, never accepted for a normal login.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import socket
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from macfleet.collect.ssh import SshTarget, host_entry, unlock_known_hosts
from macfleet.errors import UsageError
from macfleet.inventory.model import Fleet

FINGERPRINT = re.compile(r"^SHA256:[A-Za-z0-9+/]{43}$")
# paramiko's preference order, newest first; when known_hosts holds a node's key, only its type is asked for.
KEY_TYPES = tuple(paramiko.Transport._preferred_keys)


def fingerprint(key: paramiko.PKey) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


@dataclass
class HostKeySeen:
    """One node's host key as seen now, against what known_hosts says."""

    node: str
    entry: str  # the known_hosts name: host or [host]:port
    status: str  # new | known | changed | unreachable | unlock-screen (its recorded unlock key)
    key_type: str | None = None
    fingerprint: str | None = None
    known_fingerprint: str | None = None  # what known_hosts holds, when it differs
    reason: str | None = None  # why unreachable
    key_base64: str | None = field(default=None, repr=False)
    methods: tuple[str, ...] | None = None  # the login methods offered (None: could not tell)

    @property
    def password_only(self) -> bool:
        """Offers no key login: what a FileVault Mac at its unlock screen does (apple_ssh_and_filevault(7))."""
        return self.methods is not None and "publickey" not in self.methods


@dataclass
class TrustReport:
    known_hosts: Path  # the file written: the unlock-screen keys' with --unlock
    nodes: list[HostKeySeen]
    recorded: list[str]  # nodes whose key was written now (with `check`: would be)
    refused: dict[str, str]  # node -> why its key was not recorded
    check: bool = False  # nothing was written: what would be
    to_confirm: list[str] = field(default_factory=list)  # with `check`: new keys that would be shown to confirm

    @property
    def unreachable(self) -> dict[str, str]:
        return {s.node: s.reason or "unreachable" for s in self.nodes if s.status == "unreachable"}

    def json_payload(self) -> dict:
        return {
            "known_hosts": str(self.known_hosts),
            "nodes": [
                {"name": s.node, "host": s.entry, "status": s.status, "key_type": s.key_type,
                 "fingerprint": s.fingerprint, "known_fingerprint": s.known_fingerprint,
                 "recorded": s.node in self.recorded, "refused": self.refused.get(s.node),
                 "reason": s.reason, "methods": list(s.methods) if s.methods is not None else None,
                 "to_confirm": s.node in self.to_confirm}
                for s in self.nodes
            ],
            "check": self.check,
        }


def parse_fingerprints(values: list[str], nodes: list[str]) -> dict[str, str]:
    """`NODE=SHA256:…` options → {node: fingerprint}; bad input is a UsageError naming the value."""
    out: dict[str, str] = {}
    for value in values:
        node, sep, fp = value.partition("=")
        if not sep or not FINGERPRINT.match(fp):
            raise UsageError(f"--fingerprint {value!r}: expected NODE=SHA256:<43 base64 characters>",
                             hint="read it at the Mac: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub")
        if node not in nodes:
            raise UsageError(f"--fingerprint {value!r}: no node {node!r} among " + ", ".join(nodes))
        out[node] = fp
    return out


def _known_keys(known_hosts: Path, entry: str) -> dict[str, paramiko.PKey]:
    if not known_hosts.is_file():
        return {}
    try:
        keys = paramiko.HostKeys(str(known_hosts)).lookup(entry)
    except (OSError, paramiko.SSHException) as exc:
        raise UsageError(f"cannot read {known_hosts}: {exc}") from None
    return dict(keys) if keys is not None else {}


def _fetch_key(target: SshTarget, key_types: tuple[str, ...]) -> tuple[paramiko.PKey, tuple[str, ...] | None]:
    """The host key, and the login methods the server offers (the answer to `none`; None if it gave none)."""
    sock = socket.create_connection((target.host, target.port), timeout=target.connect_timeout_s)
    transport = paramiko.Transport(sock)
    try:
        transport.get_security_options().key_types = key_types
        transport.banner_timeout = target.connect_timeout_s
        transport.start_client(timeout=target.connect_timeout_s)
        key = transport.get_remote_server_key()
        methods: tuple[str, ...] | None = None
        try:
            transport.auth_none(target.user or "root")
        except paramiko.BadAuthenticationType as exc:
            methods = tuple(exc.allowed_types)
        except (paramiko.SSHException, OSError, EOFError):
            pass
        return key, methods
    finally:
        transport.close()


def _same(a: paramiko.PKey | None, b: paramiko.PKey) -> bool:
    return a is not None and a.asbytes() == b.asbytes()


def see_host_key(target: SshTarget, known_hosts: Path, unlock: bool = False) -> HostKeySeen:
    """The node's key against known_hosts (with `unlock`: against the unlock-screen keys' file, the node's
    normal key being what it must NOT show)."""
    node_name = target.node
    entry = host_entry(target.host, target.port)
    normal = _known_keys(known_hosts, entry)
    unlock_keys = _known_keys(unlock_known_hosts((known_hosts,)), entry)  # type: ignore[arg-type]
    known = unlock_keys if unlock else normal
    # known_hosts names an RSA key `ssh-rsa`; the exchange offers it as rsa-sha2-*
    preferred = tuple(t for t in KEY_TYPES if t in known or (t.startswith("rsa-sha2") and "ssh-rsa" in known))
    try:
        key, methods = _fetch_key(target, preferred or KEY_TYPES)
    except (OSError, paramiko.SSHException, EOFError) as exc:
        return HostKeySeen(node_name, entry, "unreachable", reason=f"cannot read the host key of {entry}: {exc}")
    fp = fingerprint(key)
    seen = HostKeySeen(node_name, entry, "new", key.get_name(), fp, key_base64=key.get_base64(), methods=methods)
    if not unlock and _same(unlock_keys.get(key.get_name()), key):
        seen.status = "unlock-screen"
        seen.reason = (f"{node_name} is waiting at the FileVault unlock screen (it shows its recorded unlock-screen "
                       f"key): unlock it with `macfleet unlock {node_name}`, then its own key can be read")
        return seen
    if unlock and _same(normal.get(key.get_name()), key):
        seen.status = "known"
        seen.reason = f"{node_name} shows its normal host key: it is not at its unlock screen now"
        return seen
    if not known:
        return seen
    recorded = known.get(key.get_name())
    if recorded is not None and recorded.asbytes() == key.asbytes():
        seen.status = "known"
        return seen
    seen.status = "changed"
    other = recorded or next(iter(known.values()))
    seen.known_fingerprint = fingerprint(other)
    return seen


def _append(known_hosts: Path, lines: list[str]) -> None:
    """Add lines to known_hosts atomically (a copy, then rename), keeping what was there."""
    known_hosts.parent.mkdir(parents=True, exist_ok=True)
    old = known_hosts.read_text() if known_hosts.is_file() else ""
    if old and not old.endswith("\n"):
        old += "\n"
    fd, tmp = tempfile.mkstemp(dir=known_hosts.parent, prefix=".known_hosts-")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(old + "".join(f"{line}\n" for line in lines))
        os.chmod(tmp, 0o644)
        os.replace(tmp, known_hosts)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def trust_nodes(
    fleet: Fleet,
    nodes: list[str],
    *,
    fingerprints: dict[str, str],
    accept_all: bool,
    confirm: Callable[[HostKeySeen], bool] | None,
    cancel: threading.Event | None = None,
    unlock: bool = False,
    check: bool = False,
) -> TrustReport:
    """See every node's key in parallel, then decide node by node (in inventory order) what to record:
    a key matching its --fingerprint, a key the operator confirms, or (accept_all) every new key. A changed key
    is never recorded; without a way to confirm, a new key is refused. `unlock`: the nodes wait at their FileVault
    unlock screen, and the key recorded is that screen's, in the unlock-screen keys' file; a node offering key
    logins there is not at an unlock screen, and is refused. `check`: decide, write nothing, ask nothing (a new
    key that would be shown for confirmation is in `to_confirm`)."""
    targets = {n: SshTarget.for_node(fleet, fleet.node(n)) for n in nodes}
    through = sorted(n for n, t in targets.items() if t.jumps or t.proxy_command)
    if through:
        raise UsageError("trust reads host keys directly; these nodes are reached through a jump host: "
                         + ", ".join(through), hint="record their keys with ssh-keyscan run on the jump host, "
                         "after checking each fingerprint at the Mac")
    # the file macfleet and Ansible check first (the inventory's UserKnownHostsFile)
    paths = {t.known_hosts[0] if t.known_hosts else None for t in targets.values()}
    if None in paths or len(paths) != 1:
        raise UsageError("trust needs one known_hosts file in the inventory for these nodes",
                         hint="set macfleet_ssh.known_hosts_file: known_hosts in group_vars/all")
    known_hosts = paths.pop()
    assert known_hosts is not None
    with ThreadPoolExecutor(max_workers=min(32, max(1, len(nodes)))) as pool:
        seen = list(pool.map(lambda n: see_host_key(targets[n], known_hosts, unlock), nodes))
    written = unlock_known_hosts((known_hosts,)) if unlock else known_hosts
    assert written is not None
    recorded: list[str] = []
    refused: dict[str, str] = {}
    to_confirm: list[str] = []
    lines: list[str] = []
    for s in seen:
        if cancel is not None and cancel.is_set():
            raise KeyboardInterrupt
        if s.status in ("known", "unreachable", "unlock-screen"):
            continue
        if s.status == "changed":
            refused[s.node] = (f"the host key changed: {written.name} has {s.known_fingerprint}, the node shows "
                               f"{s.fingerprint}; if the Mac was reinstalled, check the new key at the Mac and remove "
                               f"the old line for {s.entry} from {written} by hand"
                               + ("" if unlock or not s.password_only else
                                  "; it offers password logins only, as a FileVault Mac at its unlock screen does: "
                                  f"if its console shows that screen, record the key with `macfleet trust --unlock "
                                  f"{s.node}`"))
            continue
        if unlock and not s.password_only:
            refused[s.node] = ("it offers " + (", ".join(s.methods) if s.methods else "no login method it named")
                               + ": a FileVault Mac at its unlock screen offers password logins only "
                               "(apple_ssh_and_filevault(7)); not recorded as an unlock-screen key")
            continue
        if not unlock and s.password_only:
            refused[s.node] = ("it offers password logins only, as a FileVault Mac at its unlock screen does "
                               "(apple_ssh_and_filevault(7)): unlock it (`macfleet unlock`, or at its console) and "
                               f"trust its own key then, or record this one as its unlock-screen key with "
                               f"`macfleet trust --unlock {s.node}`")
            continue
        wanted = fingerprints.get(s.node)
        if wanted is not None:
            ok = wanted == s.fingerprint
            if not ok:
                refused[s.node] = f"the node shows {s.fingerprint}, not the {wanted} given with --fingerprint"
        elif accept_all:
            ok = True
        elif check:
            ok = False
            to_confirm.append(s.node)
        elif confirm is not None:
            ok = confirm(s)
            if not ok:
                refused[s.node] = "not confirmed"
        else:
            ok = False
            refused[s.node] = "not confirmed (no terminal to ask on: give --fingerprint NODE=SHA256:… or --yes)"
        if ok:
            lines.append(f"{s.entry} {s.key_type} {s.key_base64}")
            recorded.append(s.node)
    if lines and not check:
        _append(written, lines)
    return TrustReport(known_hosts=written, nodes=seen, recorded=recorded, refused=refused, check=check,
                       to_confirm=to_confirm)
