"""One paramiko SSH connection per node, strict host-key checking, commands as channels on it.

A node is reached the way Ansible's ssh reaches it for the same inventory: the host's user, port and key
(`ansible_user`, `ansible_port`, `ansible_ssh_private_key_file`), the options given in
`ansible_ssh_common_args` / `ansible_ssh_extra_args` (`-o ProxyJump=`, `-J`, `-o UserKnownHostsFile=`,
`-i`, `-l`, `-p`, `-F`), then the ssh config file (`-F FILE`, else ~/.ssh/config) through
paramiko.SSHConfig. As in OpenSSH, the first value given wins, and a jump host is configured from the
config file only (OpenSSH does not pass command-line options on to it).

This module moves bytes and nothing else: it never parses what it reads.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import importlib
import math
import os
import shlex
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from macfleet.collect.batch import LANES, NO_TMPDIR_EXIT, FrameReader, batch_script, new_mark, remote_command
from macfleet.collect.commands import CommandSpec
from macfleet.errors import AT_UNLOCK_SCREEN, UsageError
from macfleet.inventory.model import Fleet, Node


def _import_paramiko() -> Any:
    """paramiko, without the `invoke` it imports at start-up (as much CPU as paramiko itself) only to run an ssh
    config's `Match exec`: `_read_config` brings invoke in when a config file asks for that."""
    if "paramiko" in sys.modules or "invoke" in sys.modules:
        return importlib.import_module("paramiko")
    sys.modules["invoke"] = None  # type: ignore[assignment]  # `import invoke` raises ImportError; paramiko allows it
    try:
        return importlib.import_module("paramiko")
    finally:
        if sys.modules.get("invoke", 0) is None:
            del sys.modules["invoke"]


paramiko = _import_paramiko()

# What ssh reads when no -F is given. A module setting, so tests can point it at a file of their own.
USER_SSH_CONFIG = Path("~/.ssh/config")
MAX_ARGS_CHARS = 4096


@dataclass(frozen=True)
class Raw:
    """What one command printed, verbatim."""

    stdout: str
    stderr: str
    rc: int
    took_s: float
    ended_at: float | None = None  # the controller's clock (epoch s) when the answer was in: clock-skew reads it


# How long to wait for the end of a command's output once its exit status has come and nothing more comes.
EOF_GRACE_S = 1.0


class CommandTimeout(Exception):
    def __init__(self, spec: CommandSpec, timeout_s: float):
        super().__init__(f"`{spec.command_line}` gave no answer within {timeout_s:g} s")


class CommandCancelled(Exception):
    def __init__(self, spec: CommandSpec):
        super().__init__(f"`{spec.command_line}` was cancelled before it answered")


class RemoteExit(Exception):
    """A streamed command ended with another exit status than 0."""

    def __init__(self, rc: int, stderr: str):
        super().__init__(f"exit {rc}: {stderr.strip()[-200:] or 'no output on stderr'}")
        self.rc = rc
        self.stderr = stderr


class Unreachable(Exception):
    """The node could not be reached or refused us; the message says which and why."""


class AtUnlockScreen(Unreachable):
    """The node showed the host key recorded as its FileVault unlock-screen key (`macfleet trust --unlock`): it is
    up but its Data volume is locked, so only a password login answers there (apple_ssh_and_filevault(7))."""

    def __init__(self, node: str, key_fingerprint: str):
        super().__init__(f"{node} is {AT_UNLOCK_SCREEN} (it shows its recorded unlock-screen key {key_fingerprint}; "
                         f"SSH there takes only the password that unlocks it): "
                         f"`macfleet unlock {node} --password-file FILE`")
        self.node, self.key_fingerprint = node, key_fingerprint


# ---------------------------------------------------------------------------------------------
# Where and how to log in
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hop:
    """One jump host on the way to a node."""

    host: str  # the name ssh connects to (and looks up in known_hosts)
    port: int
    user: str | None
    key_files: tuple[Path, ...] = ()
    known_hosts: tuple[Path, ...] = ()  # empty: the user's ~/.ssh/known_hosts


@dataclass(frozen=True)
class SshTarget:
    node: str
    host: str
    port: int
    user: str | None
    key_files: tuple[Path, ...]
    known_hosts: tuple[Path, ...]  # empty: the user's ~/.ssh/known_hosts
    connect_timeout_s: float
    jumps: tuple[Hop, ...] = ()
    proxy_command: str | None = None

    @classmethod
    def for_node(cls, fleet: Fleet, node: Node) -> SshTarget:
        """Resolve the node's login as Ansible's ssh would; UsageError for what cannot be followed."""
        ssh = next(m.settings.ssh for m in fleet.meshes if m.name == node.mesh)
        args = SshArgs.parse(node, fleet.root)
        config = _read_config(args.config_file, node.name)
        cfg = config.lookup(node.address) if config is not None else {}
        user = node.user or args.user or cfg.get("user")
        port = node.port or args.port or _int(cfg.get("port"), node.name) or 22
        keys = [fleet.root / Path(_render(node.key_file, node, fleet.root)).expanduser()] if node.key_file else []
        keys += args.key_files
        if not keys and ssh.private_key_file:
            keys.append(fleet.path(ssh.private_key_file))  # type: ignore[arg-type]
        keys += _config_keys(cfg)
        if args.known_hosts:
            known = args.known_hosts
        elif cfg.get("userknownhostsfile"):
            known = _config_files(cfg["userknownhostsfile"])
        else:
            known = [fleet.path(ssh.known_hosts_file)] if ssh.known_hosts_file else []
        jump_text = args.proxy_jump or cfg.get("proxyjump")
        command = None if jump_text else (args.proxy_command or cfg.get("proxycommand"))
        jumps = _hops(jump_text, config, node.name) if jump_text and jump_text.lower() != "none" else ()
        return cls(
            node=node.name,
            host=cfg.get("hostname", node.address),
            port=port,
            user=user,
            key_files=tuple(dict.fromkeys(keys)),
            known_hosts=tuple(p for p in known if p is not None),
            connect_timeout_s=ssh.connect_timeout_s,
            jumps=jumps,
            proxy_command=None if command is None or command.lower() == "none" else command,
        )

    @property
    def unlock_known_hosts(self) -> Path | None:
        return unlock_known_hosts(self.known_hosts)

    def check_local_files(self) -> None:
        """Refuse, as bad input, what OpenSSH would refuse before dialling: a missing or unreadable key, one
        protected by a passphrase (we never prompt), one readable by others, a known_hosts file that is not text."""
        for key in (*self.key_files, *(k for hop in self.jumps for k in hop.key_files)):
            _check_private_key(key, self.node)
        for path in self.known_hosts:
            _check_known_hosts(path, self.node)

    # The same login for OpenSSH subprocesses (transfers, rsync): every option comes from this target, none from an
    # ssh config file (`-F /dev/null`: the config was read once, above, by the same rules for every SSH use).

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def openssh_options(self) -> tuple[str, ...]:
        """`ssh` options that log in as this target does: its port, keys, strict known_hosts, and its jump hosts
        (each hop an `ssh -W` as ProxyCommand, with the hop's own keys and known_hosts, checked as strictly)."""
        opts = ["-F", "/dev/null", *OPENSSH_OPTS, "-o", f"ConnectTimeout={math.ceil(self.connect_timeout_s)}",
                *_login_options(self.key_files, self.known_hosts), "-p", str(self.port)]
        if self.jumps:
            opts += ["-o", "ProxyCommand=" + _jump_command(self.jumps, self.host, self.port, self)]
        elif self.proxy_command:
            opts += ["-o", f"ProxyCommand={self.proxy_command}"]
        return tuple(opts)

    def argv(self, command: str, *, forward_agent: bool = False) -> list[str]:
        """`ssh` running one command line on the node; the agent forwarded only when asked (-A, else -a)."""
        return ["ssh", *self.openssh_options(), *(["-A"] if forward_agent else ["-a"]), self.destination, command]

    @property
    def rsync_shell(self) -> str:
        """rsync's `-e`: the ssh this target logs in with (rsync adds the destination)."""
        return shlex.join(["ssh", *self.openssh_options()])


# The OpenSSH client options of every subprocess ssh: never a prompt, never an unknown host key accepted, a dead
# link noticed within 15 s. AES-GCM first: hardware AES on Apple silicon (and x86 controllers) makes it the
# cheapest cipher per byte (OpenSSH's default prefers ChaCha20-Poly1305); "^" puts it first without dropping the
# defaults.
OPENSSH_OPTS = ("-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ServerAliveInterval=5",
                "-o", "ServerAliveCountMax=3", "-o", "Ciphers=^aes128-gcm@openssh.com")


def _ssh_config_word(path: Path) -> str:
    """A path as one word of an ssh option value (ssh splits values at spaces; double quotes keep them)."""
    text = str(path)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"' if any(c in text for c in ' "\\\'') else text


def _login_options(key_files: tuple[Path, ...], known_hosts: tuple[Path, ...]) -> list[str]:
    """Keys (only those, when given, as paramiko is told: look_for_keys off; the agent is left on, since a
    transfer forwards its own private agent) and known_hosts (none given: the user's own, as paramiko's)."""
    opts: list[str] = []
    if key_files:
        opts += ["-o", "IdentitiesOnly=yes"]
        for key in key_files:
            opts += ["-i", str(key)]
    if known_hosts:
        opts += ["-o", "UserKnownHostsFile=" + " ".join(_ssh_config_word(p) for p in known_hosts)]
    return opts


def _jump_command(hops: tuple[Hop, ...], host: str, port: int, target: SshTarget) -> str:
    """The ProxyCommand that reaches host:port through `hops` (the last one dials it; each earlier hop is reached
    the same way, nested): the hop's keys, else the node's; the hop's known_hosts and the node's, as `Jumps`
    logs in with paramiko. `%` doubled: ssh expands `%` sequences in a ProxyCommand."""
    hop = hops[-1]
    argv = ["ssh", "-F", "/dev/null", *OPENSSH_OPTS, "-o", f"ConnectTimeout={math.ceil(target.connect_timeout_s)}",
            *_login_options(hop.key_files or target.key_files, hop.known_hosts + target.known_hosts),
            "-p", str(hop.port)]
    if len(hops) > 1:
        argv += ["-o", "ProxyCommand=" + _jump_command(hops[:-1], hop.host, hop.port, target)]
    if hop.user:
        argv += ["-l", hop.user]
    argv += ["-W", f"[{host}]:{port}" if ":" in host else f"{host}:{port}", hop.host]
    return shlex.join(argv).replace("%", "%%")


@dataclass
class SshArgs:
    """The options of ansible_ssh_common_args + ansible_ssh_extra_args that decide where and how to log in."""

    user: str | None = None
    port: int | None = None
    key_files: list[Path] = field(default_factory=list)
    known_hosts: list[Path] = field(default_factory=list)
    proxy_jump: str | None = None
    proxy_command: str | None = None
    config_file: Path | None = None

    @classmethod
    def parse(cls, node: Node, root: Path) -> SshArgs:
        text = " ".join(a for a in (node.ssh_common_args, node.ssh_extra_args) if a)
        out = cls()
        if not text:
            return out
        words = _words(_render(text, node, root), node.name)
        i = 0
        while i < len(words):
            word = words[i]
            flag, inline = (word[:2], word[2:]) if word.startswith("-") and len(word) > 1 else (word, "")
            if flag in ("-o", "-J", "-F", "-i", "-l", "-p"):
                value = inline or (words[i + 1] if i + 1 < len(words) else "")
                i += 1 if inline else 2
                out._take(flag, value, node.name)
            else:
                i += 1
        return out

    def _take(self, flag: str, value: str, node: str) -> None:
        if flag == "-o":
            key, _, val = value.replace("=", " ", 1).partition(" ")
            self._option(key.strip().lower(), val.strip(), node)
        elif flag == "-J":
            self.proxy_jump = self.proxy_jump or value
        elif flag == "-F":
            self.config_file = self.config_file or Path(value).expanduser()
        elif flag == "-i":
            self.key_files.append(Path(value).expanduser())
        elif flag == "-l":
            self.user = self.user or value
        elif flag == "-p":
            self.port = self.port or _int(value, node)

    def _option(self, key: str, value: str, node: str) -> None:
        # ssh's own word splitting for option values: double quotes keep spaces (ssh_config(5)).
        values = _words(value, node) if value else []
        first = values[0] if values else ""
        if key == "proxyjump":
            self.proxy_jump = self.proxy_jump or first
        elif key == "proxycommand":
            self.proxy_command = self.proxy_command or value
        elif key == "userknownhostsfile" and not self.known_hosts:
            self.known_hosts = [Path(v).expanduser() for v in values]
        elif key == "identityfile":
            self.key_files.append(Path(first).expanduser())
        elif key == "user":
            self.user = self.user or first
        elif key == "port":
            self.port = self.port or _int(first, node)


def _render(text: str, node: Node, root: Path) -> str:
    """Template the few variables a connection argument may use, as Ansible does; anything else is refused."""
    if len(text) > MAX_ARGS_CHARS:
        raise UsageError(f"{node.name}: an ssh connection variable is longer than {MAX_ARGS_CHARS} characters")
    if "{{" not in text and "{%" not in text:
        return text
    import jinja2

    try:
        return _template(text).render(
            inventory_dir=str(root), inventory_hostname=node.name, ansible_host=node.address,
            ansible_user=node.user, ansible_port=node.port,
        )
    except jinja2.TemplateError as exc:
        raise UsageError(
            f"{node.name}: cannot follow the ssh connection variable {text!r}: {exc}",
            hint="macfleet templates only inventory_dir, inventory_hostname, ansible_host/user/port and `| quote`",
        ) from None


@functools.lru_cache(maxsize=64)
def _template(text: str) -> Any:
    """Compiled once per text: every node of a mesh usually shares the same group-level arguments."""
    import jinja2
    from jinja2.sandbox import SandboxedEnvironment

    env = SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False)
    env.filters["quote"] = lambda v: shlex.quote(str(v))
    return env.from_string(text)


def _words(text: str, node: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"{node}: cannot split the ssh arguments {text!r}: {exc}",
                         hint="quote paths with `{{ path | quote }}`") from None


def _int(value: str | int | None, node: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        port = int(value)
    except ValueError:
        raise UsageError(f"{node}: ssh port {value!r} is not a number") from None
    if not 1 <= port <= 65535:
        raise UsageError(f"{node}: ssh port {port} is not in 1-65535")
    return port


def _read_config(path: Path | None, node: str) -> paramiko.SSHConfig | None:
    explicit = path is not None
    path = (path or USER_SSH_CONFIG).expanduser()
    if not path.is_file():
        if explicit:
            raise UsageError(f"{node}: ssh config file {path} (from -F) does not exist")
        return None
    try:
        text = path.read_bytes().decode("utf-8")
        config = paramiko.SSHConfig.from_text(text)
    except (OSError, UnicodeDecodeError, paramiko.ConfigParseError, ValueError) as exc:
        raise UsageError(f"{node}: cannot read ssh config file {path}: {exc}") from None
    if "exec" in text.lower() and paramiko.config.invoke is None:
        _bring_invoke()
    return config


def _bring_invoke() -> None:
    """What paramiko runs a `Match exec` with, imported now that a config file may ask for one (when invoke is
    not installed, paramiko says so at the match, as it always did)."""
    with contextlib.suppress(ImportError):
        paramiko.config.invoke = importlib.import_module("invoke")


def _config_keys(cfg: dict) -> list[Path]:
    """IdentityFile lines of the ssh config file; like ssh, skip those that do not exist (a `Host *` default)."""
    return [p for k in cfg.get("identityfile", []) if (p := Path(k).expanduser()).exists()]


def _config_files(value: str) -> list[Path]:
    """paramiko.SSHConfig gives UserKnownHostsFile with its quotes already removed: one path with spaces, or
    several paths separated by spaces."""
    if not value.strip():
        return []
    whole = Path(value.strip()).expanduser()
    return [whole] if whole.exists() or " " not in value.strip() else [Path(v).expanduser() for v in value.split()]


def _hops(text: str, config: paramiko.SSHConfig | None, node: str) -> tuple[Hop, ...]:
    """`[user@]host[:port][,…]` (or ssh://user@host:port), each hop completed from the ssh config file."""
    hops = []
    for part in text.split(","):
        spec = part.strip().removeprefix("ssh://")
        user, _, hostport = spec.rpartition("@")
        host, port = hostport, None
        if hostport.startswith("["):
            host, _, rest = hostport[1:].partition("]")
            port = rest.removeprefix(":") or None
        elif hostport.count(":") == 1:
            host, port = hostport.split(":")
        if not host:
            raise UsageError(f"{node}: cannot read the jump host {part!r}", hint="expected [user@]host[:port]")
        cfg = config.lookup(host) if config is not None else {}
        hops.append(Hop(
            host=cfg.get("hostname", host),
            port=_int(port, node) or _int(cfg.get("port"), node) or 22,
            user=user or cfg.get("user"),
            key_files=tuple(_config_keys(cfg)),
            known_hosts=tuple(_config_files(cfg.get("userknownhostsfile", ""))),
        ))
    return tuple(hops)


def _check_private_key(path: Path, node: str) -> None:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise UsageError(f"{node}: private key {path} does not exist",
                         hint="set ansible_ssh_private_key_file (or macfleet_ssh.private_key_file) to a key") from None
    except OSError as exc:
        raise UsageError(f"{node}: cannot read private key {path}: {exc.strerror or exc}") from None
    # OpenSSH's rule (sshkey_perm_ok): a key we own must not be readable or writable by group or others.
    if st.st_uid == os.getuid() and st.st_mode & 0o077:
        raise UsageError(
            f"{node}: private key {path} is accessible by others (mode {st.st_mode & 0o777:04o}); "
            "OpenSSH refuses such a key, and so does macfleet",
            hint=f"chmod 600 {shlex.quote(str(path))}",
        )
    try:
        paramiko.PKey.from_path(path)
    except (paramiko.PasswordRequiredException, TypeError):  # cryptography says TypeError for a missing password
        raise UsageError(
            f"{node}: private key {path} is protected by a passphrase, and macfleet never prompts for one",
            hint="add it to ssh-agent (ssh-add) and leave the key file unset, so the agent signs for it",
        ) from None
    except (paramiko.SSHException, ValueError, OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{node}: {path} is not a private key macfleet can read: {exc}") from None


def _check_known_hosts(path: Path, node: str) -> None:
    if not path.is_file():
        raise UsageError(
            f"known_hosts file {path} does not exist",
            hint="host keys are checked strictly: add each Mac's key first (ssh-keygen -lf, verified on the Mac)",
        )
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UsageError(
            f"known_hosts file {path}, line {line}: byte 0x{data[exc.start]:02x} is not UTF-8 text",
            hint="each line is `host key-type base64-key`; remove or fix that line",
        ) from None


# A FileVault Mac at its unlock screen (macOS 26) shows another host key than once unlocked: its own keys and
# sshd configuration are on the locked Data volume (apple_ssh_and_filevault(7)). That key is kept apart from the
# node's normal one, in known_hosts + this suffix beside the inventory's known_hosts, in known_hosts format (so
# `ssh -o UserKnownHostsFile=…known_hosts.unlock` checks it as strictly by hand): never accepted for a normal login.
UNLOCK_SUFFIX = ".unlock"


def unlock_known_hosts(known_hosts: tuple[Path, ...]) -> Path | None:
    """Where the unlock-screen keys of nodes checked against `known_hosts` are recorded (None: the user's own
    ~/.ssh/known_hosts is used, and no unlock key is looked for)."""
    return known_hosts[0].with_name(known_hosts[0].name + UNLOCK_SUFFIX) if known_hosts else None


def host_entry(host: str, port: int) -> str:
    """How OpenSSH names a host in known_hosts."""
    return host if port == 22 else f"[{host}]:{port}"


def _recorded(paths: tuple[Path, ...], hostname: str) -> list[dict]:
    out = []
    for path in paths:
        if not path.is_file():
            continue
        try:
            keys = paramiko.HostKeys(str(path)).lookup(hostname)
        except (OSError, paramiko.SSHException, ValueError, UnicodeDecodeError):
            continue
        if keys is not None:
            out.append(keys)
    return out


def key_recorded(paths: tuple[Path, ...], hostname: str, key: paramiko.PKey) -> bool:
    """Whether one of the known_hosts files `paths` records `key` for `hostname` (host or [host]:port)."""
    return any((r := keys.get(key.get_name())) is not None and r.asbytes() == key.asbytes()
               for keys in _recorded(paths, hostname))


def unlock_key_recorded(target: SshTarget) -> bool:
    """Whether an unlock-screen key is recorded for the node (`macfleet trust --unlock`)."""
    path = target.unlock_known_hosts
    return path is not None and bool(_recorded((path,), host_entry(target.host, target.port)))


def unlock_key_matches(path: Path | None, hostname: str, key: paramiko.PKey) -> bool:
    """Whether `key` is the unlock-screen key recorded for `hostname`."""
    return key_recorded((path,) if path is not None else (), hostname, key)


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint, as `ssh-keygen -lf` prints it."""
    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
    return f"{key.get_name()} SHA256:{digest}"


# ---------------------------------------------------------------------------------------------
# Connecting
# ---------------------------------------------------------------------------------------------


class _RejectUnlessUnlockScreen(paramiko.MissingHostKeyPolicy):
    """paramiko's RejectPolicy, except that a key recorded as the node's unlock-screen key says so."""

    def __init__(self, unlock: Path | None):
        self.unlock = unlock

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if unlock_key_matches(self.unlock, hostname, key):
            raise AtUnlockScreen(hostname, fingerprint(key))
        raise paramiko.SSHException(f"Server {hostname!r} not found in known_hosts")


def _client(known_hosts: tuple[Path, ...]) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    if known_hosts:
        for path in known_hosts:
            client.load_host_keys(str(path))
    else:
        client.load_system_host_keys()
    # Never trust an unknown host key: a Mac whose key changed is refused, not re-learned; the unlock-screen key
    # recorded for it is told apart (and never accepted for a login).
    client.set_missing_host_key_policy(_RejectUnlessUnlockScreen(unlock_known_hosts(known_hosts)))
    return client


def _login(
    client: paramiko.SSHClient,
    what: str,
    host: str,
    port: int,
    user: str | None,
    key_files: tuple[Path, ...],
    timeout_s: float,
    sock: object | None,
    known_hosts: tuple[Path, ...],
) -> None:
    try:
        client.connect(
            host, port=port, username=user, key_filename=[str(k) for k in key_files] or None,
            look_for_keys=not key_files, allow_agent=not key_files, sock=sock,  # type: ignore[arg-type]
            timeout=timeout_s, banner_timeout=timeout_s, auth_timeout=timeout_s,
        )
    except paramiko.BadHostKeyException as exc:
        where = ", ".join(str(p) for p in known_hosts) or "~/.ssh/known_hosts"
        shown = host_entry(host, port)
        if unlock_key_matches(unlock_known_hosts(known_hosts), shown, exc.key):
            raise AtUnlockScreen(what, fingerprint(exc.key)) from None
        raise UsageError(
            f"{what}: the host key of {shown} has CHANGED: {where} has {fingerprint(exc.expected_key)}, the host "
            f"offers {fingerprint(exc.key)}. Either it was reinstalled, or someone is in between: nothing was sent",
            hint=f"check the new key on the Mac itself (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`), "
                 f"then replace its line: ssh-keygen -R {shlex.quote(shown)} -f {shlex.quote(where.split(', ')[0])}; "
                 f"if the Mac is at its FileVault unlock screen (its console shows it), record that screen's key "
                 f"with `macfleet trust --unlock {what}`",
        ) from None
    except AtUnlockScreen as exc:  # from the policy, which knows the host only
        raise AtUnlockScreen(what, exc.key_fingerprint) from None
    except paramiko.AuthenticationException as exc:
        raise Unreachable(f"{host}:{port} refused our login as {user or 'the default user'}: {exc}") from None
    except paramiko.SSHException as exc:
        raise Unreachable(f"ssh to {host}:{port} failed: {exc}") from None
    except OSError as exc:  # includes timeouts
        raise Unreachable(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None


class Jumps:
    """Jump-host connections shared by every node of a pass, so 32 nodes behind one jump host make one login
    there (not 32, which its sshd's MaxStartups would start dropping)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[tuple[Hop, ...], paramiko.SSHClient] = {}
        self._failed: dict[tuple[Hop, ...], Exception] = {}

    def transport(self, hops: tuple[Hop, ...], target: SshTarget) -> paramiko.Transport:
        """The transport of the last hop, connecting each hop through the one before it."""
        with self._lock:
            for n in range(1, len(hops) + 1):
                chain = hops[:n]
                if chain in self._failed:
                    raise self._failed[chain]
                client = self._clients.get(chain)
                if client is not None and client.get_transport() and client.get_transport().is_active():
                    continue
                hop = chain[-1]
                sock = _open_forward(self._clients[chain[:-1]], hop.host, hop.port, target) if n > 1 else None
                client = _client(hop.known_hosts + target.known_hosts)
                try:
                    _login(client, f"{target.node} (jump host {hop.host})", hop.host, hop.port, hop.user,
                           hop.key_files or target.key_files, target.connect_timeout_s, sock,
                           hop.known_hosts or target.known_hosts)
                except Unreachable as exc:
                    self._failed[chain] = Unreachable(f"jump host {hop.host}: {exc}")
                    raise self._failed[chain] from None
                self._clients[chain] = client
            transport = self._clients[hops].get_transport()
            assert transport is not None
            return transport

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()


def _open_forward(client: paramiko.SSHClient, host: str, port: int, target: SshTarget) -> paramiko.Channel:
    transport = client.get_transport()
    try:
        assert transport is not None
        return transport.open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0),
                                      timeout=target.connect_timeout_s)
    except (paramiko.SSHException, OSError, EOFError, AssertionError) as exc:
        raise Unreachable(f"the jump host could not reach {host}:{port}: {exc}") from None


class SshSession:
    """A connected node. Use as a context manager; `run` may be called from several threads."""

    def __init__(self, target: SshTarget, jumps: Jumps | None = None):
        self.target = target
        self._own_jumps = jumps is None
        self.jumps = jumps or Jumps()
        self.client = _client(target.known_hosts)

    def __enter__(self) -> SshSession:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self) -> None:
        t = self.target
        sock: object | None = None
        if t.jumps:
            last = self.jumps.transport(t.jumps, t)
            try:
                sock = last.open_channel("direct-tcpip", (t.host, t.port), ("127.0.0.1", 0),
                                         timeout=t.connect_timeout_s)
            except (paramiko.SSHException, OSError, EOFError) as exc:
                raise Unreachable(f"jump host {t.jumps[-1].host} could not reach {t.host}:{t.port}: {exc}") from None
        elif t.proxy_command:
            sock = paramiko.ProxyCommand(t.proxy_command)
        _login(self.client, t.node, t.host, t.port, t.user, t.key_files, t.connect_timeout_s, sock, t.known_hosts)
        transport = self.client.get_transport()
        if transport is not None:
            transport.set_keepalive(5)

    def close(self) -> None:
        self.client.close()
        if self._own_jumps:
            self.jumps.close()

    def _open_channel(
        self, transport: paramiko.Transport, deadline: float, cancel: threading.Event | None
    ) -> paramiko.Channel:
        """A session channel; one refused (the server is at MaxSessions while a finished channel is still being
        closed on its side) is asked for again until the command's own deadline."""
        delay = 0.05
        while True:
            try:
                return transport.open_session(timeout=max(0.1, deadline - time.monotonic()))
            except paramiko.SSHException as exc:
                # Two refusals at once on one transport: paramiko hands the server's reason to one opener and a
                # bare "Unable to open channel." to the other; both are the same refusal.
                refused = isinstance(exc, paramiko.ChannelException) or str(exc).startswith("Unable to open channel")
                if not refused:
                    raise Unreachable(f"{self.target.host}: could not start a command: {exc}") from None
                if time.monotonic() + delay > deadline or (cancel is not None and cancel.is_set()):
                    raise Unreachable(
                        f"{self.target.host}: could not start a command: the server kept refusing a channel "
                        f"({getattr(exc, 'text', exc)}; at its MaxSessions limit?)"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
            except (OSError, EOFError) as exc:
                raise Unreachable(
                    f"{self.target.host}: could not start a command: {exc or type(exc).__name__}"
                ) from None

    def run(self, spec: CommandSpec, *, timeout_s: float | None = None, cancel: threading.Event | None = None) -> Raw:
        return self.run_line(spec.command_line, timeout_s=timeout_s or spec.timeout_s, cancel=cancel, spec=spec)

    def run_line(
        self,
        command_line: str,
        *,
        timeout_s: float,
        cancel: threading.Event | None = None,
        spec: CommandSpec | None = None,
    ) -> Raw:
        """Run one already-quoted command line on a channel of its own; CommandTimeout past `timeout_s`.

        macOS has no timeout(1): the timeout is kept here, on the client, and the channel is closed at it."""
        spec = spec or CommandSpec("?", (command_line,))
        started = time.monotonic()
        deadline = started + timeout_s
        channel = self._start(command_line, deadline, cancel)
        out, err = bytearray(), bytearray()
        try:
            for chunk in self._pump(channel, spec, deadline, timeout_s, cancel, err):
                out += chunk
            rc = self._exit_status(channel, command_line)
        finally:
            channel.close()
        return Raw(
            stdout=out.decode("utf-8", errors="replace"),
            stderr=err.decode("utf-8", errors="replace"),
            rc=rc,
            took_s=time.monotonic() - started,
            ended_at=time.time(),
        )

    @staticmethod
    def _pump(channel: paramiko.Channel, spec: CommandSpec, deadline: float, timeout_s: float,
              cancel: threading.Event | None, err: bytearray, *, eof_grace_s: float | None = EOF_GRACE_S
              ) -> Iterator[bytes]:
        """A started command's stdout as it comes (its stderr into `err`), until it has exited and its output is
        drained; CommandCancelled or CommandTimeout (at `deadline`) otherwise.

        sshd may send the exit status before the last of the output: after it, the output is read to sshd's EOF.
        `eof_grace_s`: how long to go on waiting for the EOF while nothing more comes (a background child still
        holding stdout open must not hold the command to its timeout); each piece that comes starts it again, so
        a busy node's late tail is still read. None: to the EOF, for a command that leaves no child (curl)."""
        quiet_since: float | None = None
        while True:
            came = False
            while channel.recv_ready():
                came = True
                yield channel.recv(65536)
            while channel.recv_stderr_ready():
                came = True
                err += channel.recv_stderr(65536)
            drained = not channel.recv_ready() and not channel.recv_stderr_ready()
            if channel.exit_status_ready() and drained:
                if channel.eof_received:
                    return
                now = time.monotonic()
                quiet_since = now if came or quiet_since is None else quiet_since
                if eof_grace_s is not None and now - quiet_since > eof_grace_s:
                    return
            if channel.closed and not channel.recv_ready():
                return
            if cancel is not None and cancel.is_set():
                raise CommandCancelled(spec)
            if time.monotonic() > deadline:
                raise CommandTimeout(spec, timeout_s)
            channel.status_event.wait(0.02)

    def _exit_status(self, channel: paramiko.Channel, command_line: str) -> int:
        rc = channel.recv_exit_status()
        if rc == -1:  # paramiko's mark for "no exit status came": the session dropped, or a signal ended it
            raise Unreachable(f"{self.target.host}: the session of `{command_line}` closed without an exit status")
        return rc

    def stream(self, command_line: str, *, stdin: bytes = b"", timeout_s: float,
               cancel: threading.Event | None = None) -> Iterator[bytes]:
        """Run one already-quoted command line with `stdin` as its input (then EOF) and yield its stdout as it
        comes, all of it, to sshd's EOF (the command must leave no child holding its stdout: exo's API through
        curl); CommandTimeout past `timeout_s`, RemoteExit when it ends with another status than 0."""
        spec = CommandSpec("?", (command_line,))
        deadline = time.monotonic() + timeout_s
        channel = self._start(command_line, deadline, cancel)
        err = bytearray()
        try:
            channel.sendall(stdin)
            channel.shutdown_write()
            yield from self._pump(channel, spec, deadline, timeout_s, cancel, err, eof_grace_s=None)
            rc = self._exit_status(channel, command_line)
        except (OSError, EOFError) as exc:
            raise Unreachable(f"{self.target.host}: `{command_line}` was cut off: {exc}") from None
        finally:
            channel.close()
        if rc != 0:
            raise RemoteExit(rc, err.decode("utf-8", errors="replace"))

    def run_batch(
        self, specs: tuple[CommandSpec, ...], *, deadline: float, cancel: threading.Event | None = None,
        lanes: int = LANES,
    ) -> tuple[dict[str, Raw], dict[str, str]]:
        """Run `specs` in one remote shell on one channel, `lanes` at a time (collect.batch); each keeps its own
        timeout, counted from its start, cut short at `deadline` (monotonic). Every spec ends in the outputs, or
        in the failures with why: a hung command is its own failure, the others are still read."""
        started = time.monotonic()
        # each command's own timeout runs from when its lane starts it; one not started is bounded by `deadline`
        ends = [deadline] * len(specs)
        began = [started] * len(specs)
        pending, running = set(range(len(specs))), set()
        outputs: dict[str, Raw] = {}
        failed: dict[str, str] = {}
        if not specs:
            return outputs, failed
        mark = new_mark()
        try:
            channel = self._start(remote_command(batch_script(specs, mark, lanes)), deadline, cancel)
        except Unreachable as exc:
            return outputs, {s.key: str(exc) for s in specs}
        reader, err = FrameReader(mark, len(specs)), bytearray()
        try:
            while pending:
                while channel.recv_ready():
                    for frame in reader.feed(channel.recv(65536)):
                        i = frame.index
                        if i not in pending:
                            continue
                        if frame.rc is None:
                            running.add(i)
                            began[i] = time.monotonic()
                            ends[i] = min(began[i] + specs[i].timeout_s, deadline)
                            continue
                        pending.discard(i)
                        outcome = _framed(specs[i], frame.rc, frame.stdout, frame.stderr, began[i])
                        (outputs if isinstance(outcome, Raw) else failed)[specs[i].key] = outcome  # type: ignore
                while channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                now = time.monotonic()
                for i in [i for i in pending if now > ends[i]]:
                    pending.discard(i)
                    failed[specs[i].key] = (
                        str(CommandTimeout(specs[i], round(ends[i] - began[i], 3))) if i in running else
                        f"`{specs[i].command_line}` not started within the pass's deadline: the node's "
                        f"{lanes} lanes were busy (hung commands hold theirs)")
                if not pending or channel.recv_ready() or channel.recv_stderr_ready():
                    continue
                if cancel is not None and cancel.is_set():
                    for i in pending:
                        failed[specs[i].key] = str(CommandCancelled(specs[i]))
                    break
                if channel.exit_status_ready() or channel.closed:
                    # The script's last output and its exit status can both arrive between the reads above and
                    # this check: sshd sends the output first, so once the status is in, so is the output.
                    if channel.recv_ready() or channel.recv_stderr_ready():
                        continue
                    why = _script_end(channel, err)
                    for i in pending:
                        failed[specs[i].key] = f"`{specs[i].command_line}` not read: {why}"
                    break
                channel.status_event.wait(0.02)
        finally:
            channel.close()
        return outputs, failed

    def _start(self, command_line: str, deadline: float, cancel: threading.Event | None) -> paramiko.Channel:
        transport = self.client.get_transport()
        if transport is None or not transport.is_active():
            raise Unreachable(f"connection to {self.target.host} was lost")
        channel = self._open_channel(transport, deadline, cancel)
        try:
            channel.exec_command(command_line)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            channel.close()
            raise Unreachable(f"{self.target.host}: could not start a command: {exc or type(exc).__name__}") from None
        return channel


def _framed(spec: CommandSpec, rc: int, stdout: bytes, stderr: bytes, started: float) -> Raw | str:
    """One command's frame; a command ended by a signal (the shell says 128 + its number) has no exit status of
    its own, as when it runs on a channel by itself."""
    if rc > 128:
        return f"the session of `{spec.command_line}` closed without an exit status (ended by signal {rc - 128})"
    return Raw(stdout=stdout.decode("utf-8", errors="replace"), stderr=stderr.decode("utf-8", errors="replace"),
               rc=rc, took_s=time.monotonic() - started, ended_at=time.time())


def _script_end(channel: paramiko.Channel, err: bytearray) -> str:
    """Why the script ended before it framed a command: its exit status (or none) and the end of its stderr."""
    said = err.decode("utf-8", errors="replace").strip()[-200:]
    if not channel.exit_status_ready():
        return "the session closed before it answered" + (f" ({said})" if said else "")
    rc = channel.recv_exit_status()
    if rc == NO_TMPDIR_EXIT:
        return f"the node could not make a temporary directory for its output ({said or 'mktemp failed'})"
    if rc == -1:
        return "the session closed without an exit status before it answered"
    return f"the shell running it ended (exit {rc}) before it answered" + (f": {said}" if said else "")
