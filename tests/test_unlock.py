"""A FileVault Mac at its unlock screen (macOS 26, apple_ssh_and_filevault(7)): told apart from an intruder by
the unlock-screen key recorded apart (known_hosts.unlock), in every reader, and `macfleet unlock`'s bad input.

The real OpenSSH server of tests/sshd.py plays the node; which of its keys' records it matches (the normal one,
the unlock-screen one, neither) is what each test sets. The lab test
(tests/lab/test_lab_faults.py::test_filevault_unlock_screen_…) drives the real pre-boot stand-in end to end."""

from __future__ import annotations

import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from macfleet.act import reboot as act_reboot
from macfleet.act import unlock as act_unlock
from macfleet.collect.commands import CommandSpec
from macfleet.collect.gather import gather
from macfleet.collect.ssh import AtUnlockScreen, SshTarget, unlock_known_hosts
from macfleet.errors import AT_UNLOCK_SCREEN, UsageError
from macfleet.inventory.load import load_inventory
from macfleet.judge.health import HealthContext, NodeFacts, check_reachable
from macfleet.judge.startup_steps import startup_steps
from tests import sshd

needs_sshd = pytest.mark.skipif(not sshd.available(), reason="needs root and OpenSSH (scripts/setup installs it)")


def _other_key(tmp_path: Path, name: str) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)], check=True)
    return " ".join((tmp_path / f"{name}.pub").read_text().split()[:2])


@pytest.fixture
def inv(server, tmp_path: Path) -> Path:
    """The server's inventory, its known_hosts holding ANOTHER key (the node's normal key, while the server shows
    what the test records as its unlock-screen key)."""
    d = tmp_path / "inv"
    shutil.copytree(server.inventory, d)
    (d / "known_hosts").write_text(f"[127.0.0.1]:{server.port} {_other_key(tmp_path, 'normal')}\n")
    return d


def _record_unlock(inv: Path, server, key: str | None = None) -> None:
    (inv / "known_hosts.unlock").write_text(f"[127.0.0.1]:{server.port} {key or server.host_key_pub}\n")


# ------------------------------------------------------------------------------------------ the readers


@needs_sshd
def test_the_recorded_unlock_key_is_waiting_at_the_unlock_screen_not_a_changed_key(server, inv: Path) -> None:
    _record_unlock(inv, server)
    fleet = load_inventory(inv)
    got = gather(fleet, fleet.nodes[:1], [CommandSpec("t", ("true",))], deadline_s=20)
    why = got.unreachable["node-1"]
    assert AT_UNLOCK_SCREEN in why and "CHANGED" not in why and "macfleet unlock node-1" in why
    # the same when known_hosts has no key of that type at all (paramiko's missing-key policy)
    (inv / "known_hosts").write_text("")
    got = gather(load_inventory(inv), fleet.nodes[:1], [CommandSpec("t", ("true",))], deadline_s=20)
    assert AT_UNLOCK_SCREEN in got.unreachable["node-1"]


@needs_sshd
def test_a_key_matching_neither_record_is_still_refused_as_a_changed_key(server, inv: Path, tmp_path: Path) -> None:
    _record_unlock(inv, server, _other_key(tmp_path, "third"))
    fleet = load_inventory(inv)
    with pytest.raises(UsageError) as info:
        gather(fleet, fleet.nodes[:1], [CommandSpec("t", ("true",))], deadline_s=20)
    assert "has CHANGED" in info.value.message and "someone is in between" in info.value.message
    assert "trust --unlock" in (info.value.hint or "")


@needs_sshd
def test_look_tells_the_three_apart_and_sends_nothing_to_an_unknown_key(server, inv: Path, tmp_path: Path) -> None:
    fleet = load_inventory(inv)
    target = SshTarget.for_node(fleet, fleet.nodes[0])
    assert target.unlock_known_hosts == inv / "known_hosts.unlock" == unlock_known_hosts(target.known_hosts)
    assert act_unlock.look(target).state == "unknown-key"
    sent, why = act_unlock.send_password(target, "never-sent")
    assert not sent and "neither its known key nor its recorded unlock-screen key" in why
    _record_unlock(inv, server)
    assert act_unlock.look(target).state == "unlock-screen"
    (inv / "known_hosts").write_text(f"[127.0.0.1]:{server.port} {server.host_key_pub}\n")
    assert act_unlock.look(target).state == "normal"


@needs_sshd
def test_trust_unlock_refuses_a_server_offering_key_logins_and_trust_names_the_unlock_screen(
        cli, server, inv: Path) -> None:
    r = cli("trust", "-i", str(inv), "--unlock", "--yes", "--json")
    node = cli.json(r)["nodes"][0]
    assert r.exit_code == 1 and "publickey" in node["refused"] and not (inv / "known_hosts.unlock").exists()
    _record_unlock(inv, server)
    r = cli("trust", "-i", str(inv), "--yes", "--json")
    node = cli.json(r)["nodes"][0]
    assert r.exit_code == 0 and node["status"] == "unlock-screen" and not node["recorded"]
    assert "macfleet unlock node-1" in node["reason"]


# ------------------------------------------------------------------------------------------ macfleet unlock


@needs_sshd
def test_unlock_bad_input_exits_2_before_anything_is_sent(cli, server, inv: Path, tmp_path: Path) -> None:
    r = cli("unlock", "-i", str(inv), "--json")
    assert r.exit_code == 2 and "--password-file" in cli.json(r)["error"]["message"]
    loose = tmp_path / "pw"
    loose.write_text("secret-pw\n")
    loose.chmod(0o644)
    r = cli("unlock", "-i", str(inv), "--password-file", str(loose), "--check", "--json")
    assert r.exit_code == 2 and "others can read it" in cli.json(r)["error"]["message"]
    assert "secret-pw" not in r.output
    r = cli("unlock", "-i", str(inv), "nope", "--password-file", str(loose), "--json")
    assert r.exit_code == 2 and "no node 'nope'" in cli.json(r)["error"]["message"]


@needs_sshd
def test_unlock_check_names_what_it_would_do_and_refuses_an_unknown_key(cli, server, inv: Path,
                                                                        tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("secret-pw\n")
    pw.chmod(0o600)
    r = cli("unlock", "-i", str(inv), "--password-file", str(pw), "--check", "--json")
    node = cli.json(r)["nodes"][0]
    assert r.exit_code == 1 and node["result"] == "refused" and "someone is in between" in node["detail"]
    _record_unlock(inv, server)
    r = cli("unlock", "-i", str(inv), "--password-file", str(pw), "--check", "--json")
    assert r.exit_code == 0 and cli.json(r)["nodes"][0]["result"] == "would unlock"
    assert "secret-pw" not in r.output


# ------------------------------------------------------------------------------------------ judgement


def test_reachable_check_says_unlock_it_not_intrusion() -> None:
    why = str(AtUnlockScreen("studio-2", "ssh-ed25519 SHA256:abc"))
    ctx = HealthContext(fleet=None, meshes=[], now=datetime.now(UTC),  # type: ignore[arg-type]
                        facts={"studio-2": NodeFacts(reachable=False, unreachable_reason=why)})
    [finding] = check_reachable(ctx, "studio-2")
    assert AT_UNLOCK_SCREEN in finding.message
    assert "macfleet unlock studio-2" in finding.fix and "intrusion" not in finding.fix


def test_recovery_checklist_says_what_to_do_at_the_unlock_screen_after_restart() -> None:
    steps = startup_steps("Mac Studio")
    restart = next(i for i, s in enumerate(steps) if "Restart" in s)
    assert "unlock screen" in steps[restart + 1] and "macfleet unlock" in steps[restart + 1]


class _Kept:
    """A node's kept session as the wait sees it: at the unlock screen until unlocked, then back."""

    def __init__(self) -> None:
        self.unlocked = False
        self.target = SshTarget("studio-2", "192.0.2.1", 22, None, (), (), 1.0, jumps=(), proxy_command="x")

    def alive(self) -> bool:
        return False

    def drop(self) -> None:
        pass

    def get(self, now: bool = False):
        if not self.unlocked:
            raise AtUnlockScreen("studio-2", "ssh-ed25519 SHA256:abc")

        class _S:
            def run(self, spec, timeout_s):
                return act_reboot.Raw(stdout="{ sec = 2 }", stderr="", rc=0, took_s=0.0)

        return _S()


def test_the_reboot_wait_unlocks_a_node_at_the_unlock_screen_once_then_sees_it_back() -> None:
    kept = _Kept()
    calls: list[str] = []

    def unlock(node: str) -> tuple[bool, str]:
        calls.append(node)
        kept.unlocked = True
        return True, "password accepted"

    class _Sessions:
        def __init__(self) -> None:
            self.sessions = {"studio-2": kept}

    seen: list[str] = []
    waits = act_reboot.wait_for_nodes(_Sessions(), ["studio-2"], {"studio-2": "{ sec = 1 }"}, 10,  # type: ignore
                                      lambda n, s, d: seen.append(d), unlock=unlock)
    assert calls == ["studio-2"] and waits["studio-2"].back
    assert any(AT_UNLOCK_SCREEN in d and "unlocking with the stored password" in d for d in seen)


def test_without_a_credential_the_wait_names_the_unlock_screen_and_never_calls_it_down() -> None:
    kept = _Kept()

    class _Sessions:
        def __init__(self) -> None:
            self.sessions = {"studio-2": kept}

    waits = act_reboot.wait_for_nodes(_Sessions(), ["studio-2"], {}, 0.3, lambda n, s, d: None)  # type: ignore
    assert not waits["studio-2"].back
    assert AT_UNLOCK_SCREEN in waits["studio-2"].last_seen and not waits["studio-2"].last_seen.startswith("down")


# ------------------------------------------------------------------------------------------ the healer


def test_watch_unlocks_a_node_found_at_the_unlock_screen_once_and_audits_it(monkeypatch) -> None:
    from types import SimpleNamespace

    from macfleet.collect.gather import Gathered
    from macfleet.watch import loop

    sent: list[str] = []
    monkeypatch.setattr(loop, "unlocker", lambda fleet, mesh: lambda n: (sent.append(n), (False, "refused"))[1])
    w = loop.Watcher.__new__(loop.Watcher)
    audit: list[dict] = []
    w.fleet, w.unlock_refused, w.say = None, set(), lambda line: None
    w.audit = SimpleNamespace(append=audit.append)
    w.notifier = SimpleNamespace(notify=lambda entry: None)
    kept = SimpleNamespace(retry_now=lambda: None)
    w.probers = {"m": SimpleNamespace(sessions={"studio-1": kept, "studio-2": kept})}
    mesh = SimpleNamespace(name="m", node_names=("studio-1", "studio-2"))
    at_screen = Gathered(unreachable={"studio-2": str(AtUnlockScreen("studio-2", "ssh-ed25519 SHA256:abc")),
                                      "studio-1": "cannot connect: no route to host"})
    w.unlock_waiting(mesh, at_screen)  # type: ignore[arg-type]
    assert sent == ["studio-2"] and audit[0]["action"] == "unlock" and "not unlocked" in audit[0]["result"]
    w.unlock_waiting(mesh, at_screen)  # type: ignore[arg-type]
    assert sent == ["studio-2"]  # a refused password is not tried again...
    w.unlock_waiting(mesh, Gathered())  # type: ignore[arg-type]
    w.unlock_waiting(mesh, at_screen)  # type: ignore[arg-type]
    assert sent == ["studio-2", "studio-2"]  # ...until the node was seen up
