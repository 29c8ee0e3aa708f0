"""One paramiko SSH connection per node, strict host-key checking, commands as parallel channels.

This module moves bytes and nothing else: it never parses what it reads.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import paramiko

from macfleet.collect.commands import CommandSpec
from macfleet.errors import UsageError
from macfleet.inventory.model import Fleet, Node


@dataclass(frozen=True)
class Raw:
    """What one command printed, verbatim."""

    stdout: str
    stderr: str
    rc: int
    took_s: float


class CommandTimeout(Exception):
    def __init__(self, spec: CommandSpec, timeout_s: float):
        super().__init__(f"`{spec.command_line}` gave no answer within {timeout_s:g} s")


class Unreachable(Exception):
    """The node could not be reached or refused us; the message says which and why."""


@dataclass(frozen=True)
class SshTarget:
    node: str
    host: str
    port: int
    user: str | None
    key_file: Path | None
    known_hosts: Path | None
    connect_timeout_s: float

    @classmethod
    def for_node(cls, fleet: Fleet, node: Node) -> SshTarget:
        ssh = next(m.settings.ssh for m in fleet.meshes if m.name == node.mesh)
        return cls(
            node=node.name,
            host=node.address,
            port=node.port,
            user=node.user,
            key_file=fleet.path(ssh.private_key_file),
            known_hosts=fleet.path(ssh.known_hosts_file),
            connect_timeout_s=ssh.connect_timeout_s,
        )


class SshSession:
    """A connected node. Use as a context manager; `run` may be called from several threads."""

    def __init__(self, target: SshTarget):
        self.target = target
        self.client = paramiko.SSHClient()

    def __enter__(self) -> SshSession:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self) -> None:
        t = self.target
        if t.known_hosts is not None:
            if not t.known_hosts.is_file():
                raise UsageError(
                    f"known_hosts file {t.known_hosts} does not exist",
                    hint="host keys are checked strictly: add each Mac's key first (ssh-keyscan, then verify it)",
                )
            self.client.load_host_keys(str(t.known_hosts))
        else:
            self.client.load_system_host_keys()
        # Never trust an unknown host key: a Mac whose key changed is refused, not re-learned.
        self.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            self.client.connect(
                t.host,
                port=t.port,
                username=t.user,
                key_filename=str(t.key_file) if t.key_file else None,
                look_for_keys=t.key_file is None,
                allow_agent=t.key_file is None,
                timeout=t.connect_timeout_s,
                banner_timeout=t.connect_timeout_s,
                auth_timeout=t.connect_timeout_s,
            )
        except paramiko.BadHostKeyException as exc:
            raise Unreachable(f"host key of {t.host} does not match known_hosts (impersonation?): {exc}") from None
        except paramiko.SSHException as exc:
            raise Unreachable(f"ssh to {t.host}:{t.port} failed: {exc}") from None
        except OSError as exc:  # includes timeouts
            raise Unreachable(f"cannot connect to {t.host}:{t.port}: {exc.strerror or exc}") from None
        transport = self.client.get_transport()
        if transport is not None:
            transport.set_keepalive(5)

    def close(self) -> None:
        self.client.close()

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
        """Run one already-quoted command line; raise CommandTimeout past `timeout_s`."""
        transport = self.client.get_transport()
        if transport is None or not transport.is_active():
            raise Unreachable(f"connection to {self.target.host} was lost")
        started = time.monotonic()
        try:
            channel = transport.open_session(timeout=timeout_s)
            channel.exec_command(command_line)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise Unreachable(f"{self.target.host}: could not start a command: {exc}") from None
        out, err = bytearray(), bytearray()
        deadline = started + timeout_s
        try:
            while True:
                while channel.recv_ready():
                    out += channel.recv(65536)
                while channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                if channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready():
                    break
                if channel.closed and not channel.recv_ready():
                    break
                if time.monotonic() > deadline or (cancel is not None and cancel.is_set()):
                    raise CommandTimeout(spec or CommandSpec("?", (command_line,)), timeout_s)
                channel.status_event.wait(0.02)
            rc = channel.recv_exit_status() if channel.exit_status_ready() else -1
        finally:
            channel.close()
        return Raw(
            stdout=out.decode("utf-8", errors="replace"),
            stderr=err.decode("utf-8", errors="replace"),
            rc=rc,
            took_s=time.monotonic() - started,
        )
