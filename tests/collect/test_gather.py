"""Our SSH layer against a real OpenSSH server: outputs verbatim, timeouts, unreachable nodes,
strict host keys. Nothing is mocked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from macfleet.collect import ssh as ssh_module
from macfleet.collect.batch import LANES
from macfleet.collect.commands import ALL_SPECS, CommandSpec
from macfleet.collect.gather import gather, start_gather
from macfleet.errors import UsageError
from macfleet.inventory.load import load_inventory
from tests import sshd

pytestmark = pytest.mark.skipif(not sshd.available(), reason="needs root and OpenSSH (scripts/setup installs it)")

CAPTURES = Path(__file__).resolve().parent.parent / "fixtures" / "captures"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = sshd.start(tmp_path_factory.mktemp("sshd"), nodes=("node-1", "node-2"))
    yield s
    s.stop()


def test_outputs_come_back_verbatim(server) -> None:
    fleet = load_inventory(server.inventory)
    specs = [
        CommandSpec("echo", ("printf", "a\\tb\\n\\313\\207x")),  # octal: POSIX printf, whichever sh runs it
        CommandSpec("fail", ("sh", "-c", "echo oops >&2; exit 3")),
    ]
    result = gather(fleet, fleet.nodes, specs, deadline_s=20)
    assert result.unreachable == {}
    for node in ("node-1", "node-2"):
        assert result.outputs[node]["echo"].stdout == "a\tb\nˇx"
        fail = result.outputs[node]["fail"]
        assert (fail.rc, fail.stderr) == (3, "oops\n")


def test_a_hung_command_times_out_alone(server) -> None:
    fleet = load_inventory(server.inventory)
    specs = [CommandSpec("hang", ("sleep", "30"), timeout_s=0.5), CommandSpec("quick", ("true",))]
    result = gather(fleet, fleet.nodes[:1], specs, deadline_s=20)
    assert "no answer within 0.5 s" in result.failed["node-1"]["hang"]
    assert result.outputs["node-1"]["quick"].rc == 0
    assert result.took_s < 10


def test_unreachable_node_is_recorded_and_others_still_read(server, tmp_path: Path) -> None:
    hosts = server.inventory / "hosts.yml"
    original = hosts.read_text()
    try:
        hosts.write_text(original + "        node-3:\n          ansible_host: 127.0.0.1\n          ansible_port: 1\n")
        fleet = load_inventory(server.inventory)
        result = gather(fleet, fleet.nodes, [CommandSpec("t", ("true",))], deadline_s=20)
    finally:
        hosts.write_text(original)
    assert set(result.outputs) == {"node-1", "node-2"}
    assert "cannot connect to 127.0.0.1:1" in result.unreachable["node-3"]


def test_changed_host_key_says_so_with_both_fingerprints(server) -> None:
    known = server.inventory / "known_hosts"
    original = known.read_text()
    try:
        # another key for the same host: strict checking must refuse, never re-learn, and say what changed
        other_key = "AAAAC3NzaC1lZDI1NTE5AAAAIHmL3lAf0U5ZKc1rX0V0Zl5mYh1H3Gg9cR4p2t0r7q1x"
        known.write_text(f"[127.0.0.1]:{server.port} ssh-ed25519 {other_key}\n")
        fleet = load_inventory(server.inventory)
        with pytest.raises(UsageError) as info:
            gather(fleet, fleet.nodes[:1], [CommandSpec("t", ("true",))], deadline_s=20)
    finally:
        known.write_text(original)
    offered = subprocess.run(["ssh-keygen", "-lf", "-"], input=server.host_key_pub, capture_output=True,
                             text=True, check=True).stdout.split()[1]
    assert "has CHANGED" in info.value.message
    assert offered in info.value.message  # the node's key, as `ssh-keygen -lf` shows it
    assert info.value.message.count("SHA256:") == 2
    assert "powered on" not in f"{info.value.message} {info.value.hint}"
    assert "ssh-keygen -R" in (info.value.hint or "")


def test_unknown_host_is_refused(server) -> None:
    known = server.inventory / "known_hosts"
    original = known.read_text()
    try:
        known.write_text("")
        fleet = load_inventory(server.inventory)
        result = gather(fleet, fleet.nodes[:1], [CommandSpec("t", ("true",))], deadline_s=20)
    finally:
        known.write_text(original)
    assert "node-1" in result.unreachable


def test_missing_known_hosts_is_a_usage_error(server) -> None:
    known = server.inventory / "known_hosts"
    original = known.read_text()
    known.unlink()
    try:
        fleet = load_inventory(server.inventory)
        with pytest.raises(UsageError, match="known_hosts"):
            gather(fleet, fleet.nodes[:1], [CommandSpec("t", ("true",))], deadline_s=20)
    finally:
        known.write_text(original)


def test_cancel_stops_the_pass(server) -> None:
    fleet = load_inventory(server.inventory)
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    result = gather(fleet, fleet.nodes[:1], [CommandSpec("hang", ("sleep", "30"), timeout_s=25)], cancel=cancel)
    assert "hang" in result.failed["node-1"]
    assert result.took_s < 10


def test_a_started_pass_runs_while_the_caller_works_and_asks_per_node_commands_once_logged_in(server) -> None:
    """start_gather returns at once; a per-node function is asked on each node's thread after its login
    (doctor works out its pings to peers from the IP plan meanwhile), and its commands are read with the rest."""
    fleet = load_inventory(server.inventory)
    asked: list[tuple[str, str]] = []

    def extra(node: str) -> tuple[CommandSpec, ...]:
        asked.append((node, threading.current_thread().name))
        return (CommandSpec("me", ("echo", node)),)

    pending = start_gather(fleet, fleet.nodes, [CommandSpec("t", ("true",))], deadline_s=20, per_node=extra)
    result = pending.result()
    assert sorted(asked) == [("node-1", "gather-node-1"), ("node-2", "gather-node-2")]
    assert {n: o["me"].stdout for n, o in result.outputs.items()} == {"node-1": "node-1\n", "node-2": "node-2\n"}
    assert all(o["t"].rc == 0 for o in result.outputs.values()) and not result.failed and not result.unreachable


def test_an_abandoned_pass_stops(server) -> None:
    fleet = load_inventory(server.inventory)
    pending = start_gather(fleet, fleet.nodes, [CommandSpec("hang", ("sleep", "30"), timeout_s=25)], deadline_s=30)
    started = time.monotonic()
    pending.abandon()
    result = pending.result()
    assert time.monotonic() - started < 10
    assert not any(o.get("hang") for o in result.outputs.values())


def test_every_command_we_run_has_a_real_capture() -> None:
    """design.md §6.4: every CommandSpec must be one seen on a real Mac, its output proven by a capture."""
    missing = [s.key for s in ALL_SPECS if not any((CAPTURES / s.kind).glob("*"))]
    assert not missing, f"no real capture under tests/fixtures/captures/ for: {missing}"


# ---------------------------------------------------------------------------------------------
# The session limit: macOS's sshd (like stock OpenSSH) opens at most 10 channels per connection.
# ---------------------------------------------------------------------------------------------


def test_seventeen_commands_all_answer_under_max_sessions_10(server) -> None:
    fleet = load_inventory(server.inventory)
    specs = [CommandSpec(f"c{i}", ("sh", "-c", f"sleep 0.3; echo {i}"), timeout_s=60) for i in range(17)]
    result = gather(fleet, fleet.nodes, specs, deadline_s=120)
    assert result.unreachable == {}
    assert result.failed == {}
    for node in ("node-1", "node-2"):
        assert {k: r.stdout for k, r in result.outputs[node].items()} == {f"c{i}": f"{i}\n" for i in range(17)}


def test_a_node_is_read_over_one_channel(server, monkeypatch: pytest.MonkeyPatch) -> None:
    """All of a node's commands in one shell: one sshd session per node, not one per command."""
    opened: list[str] = []
    real = ssh_module.SshSession._open_channel

    def counted(self, *args, **kwargs):
        opened.append(self.target.node)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ssh_module.SshSession, "_open_channel", counted)
    fleet = load_inventory(server.inventory)
    result = gather(fleet, fleet.nodes, [CommandSpec(f"c{i}", ("echo", str(i))) for i in range(12)], deadline_s=30)
    assert result.failed == {} and result.unreachable == {}
    assert sorted(opened) == ["node-1", "node-2"]


def test_commands_behind_lanes_held_by_hung_ones_fail_with_a_reason(server) -> None:
    """Every lane held by a hung command: those time out alone, each; what could not start says why."""
    fleet = load_inventory(server.inventory)
    hung = [CommandSpec(f"h{i}", ("sleep", "30"), timeout_s=1) for i in range(LANES)]
    result = gather(fleet, fleet.nodes[:1], [*hung, CommandSpec("late", ("true",))], deadline_s=4)
    failed = result.failed["node-1"]
    assert all("no answer within 1 s" in failed[s.key] for s in hung)
    assert "not started within the pass's deadline" in failed["late"]
    assert result.took_s < 10


def test_the_inventory_sets_how_many_commands_run_at_once_on_a_node(server) -> None:
    """`macfleet_probes.lanes`: with 2, two hung commands hold the node's two lanes and a third never starts."""
    probes = server.inventory / "group_vars" / "all" / "probes.yml"
    probes.write_text("macfleet_probes:\n  lanes: 2\n")
    try:
        fleet = load_inventory(server.inventory)
        hung = [CommandSpec(f"h{i}", ("sleep", "30"), timeout_s=1) for i in range(2)]
        result = gather(fleet, fleet.nodes[:1], [*hung, CommandSpec("late", ("true",))], deadline_s=3)
    finally:
        probes.unlink()
    failed = result.failed["node-1"]
    assert all("no answer within 1 s" in failed[s.key] for s in hung)
    assert "the node's 2 lanes were busy" in failed["late"]


def test_a_refused_channel_is_recorded_with_its_reason(server) -> None:
    """Past the server's limit (12 commands at once, each on a channel of its own, as `watch` and the reboot
    runner open them), a command whose channel is refused until its timeout fails with its reason."""
    fleet = load_inventory(server.inventory)
    outcome: dict[int, str] = {}
    with ssh_module.SshSession(ssh_module.SshTarget.for_node(fleet, fleet.nodes[0])) as session:
        def one(i: int) -> None:
            try:
                session.run(CommandSpec(f"c{i}", ("sleep", "20"), timeout_s=3))
                outcome[i] = "read"
            except Exception as exc:
                outcome[i] = str(exc)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert len(outcome) == 12
    assert sum("kept refusing a channel" in why for why in outcome.values()) >= 1
    assert all(why.strip() for why in outcome.values())


def test_every_command_asked_for_is_read_or_failed_with_a_reason(server) -> None:
    """A dropped session, a timeout and a command ended by a signal: each is in `failed`, with why."""
    fleet = load_inventory(server.inventory)
    specs = [
        CommandSpec("quick", ("echo", "ok")),
        CommandSpec("hang", ("sleep", "60"), timeout_s=3),
        CommandSpec("signalled", ("sh", "-c", "kill -9 $$")),
        CommandSpec("slow", ("sleep", "30")),
        # ends this connection's sshd process: every command still running on it loses its session
        CommandSpec("drop", ("sh", "-c", "sleep 8; kill -9 $PPID")),
    ]
    result = gather(fleet, fleet.nodes[:1], specs, deadline_s=60)
    read, failed = result.outputs.get("node-1", {}), result.failed.get("node-1", {})
    assert set(read) | set(failed) == {s.key for s in specs}
    assert read["quick"].stdout == "ok\n"
    assert "no answer within 3 s" in failed["hang"]
    assert "closed without an exit status" in failed["signalled"]
    assert "slow" in failed and "drop" in failed
    assert all(why.strip() for why in failed.values())


# ---------------------------------------------------------------------------------------------
# Bad local files are bad input (exit 2), said as OpenSSH would, before any node is dialled.
# ---------------------------------------------------------------------------------------------


def _with_key(server, tmp_path: Path, *, passphrase: str = "", mode: int = 0o600) -> Path:
    key = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", str(key)], check=True)
    key.chmod(mode)
    (server.inventory / "host_vars" / "node-1").mkdir(parents=True, exist_ok=True)
    (server.inventory / "host_vars" / "node-1" / "login.yml").write_text(f"ansible_ssh_private_key_file: {key}\n")
    return key


@pytest.fixture
def host_vars_cleanup(server):
    yield
    import shutil

    shutil.rmtree(server.inventory / "host_vars", ignore_errors=True)


def test_a_missing_private_key_is_bad_input(server, tmp_path: Path, host_vars_cleanup, cli) -> None:
    _with_key(server, tmp_path).unlink()
    result = cli("topology", "check", "-i", str(server.inventory), "--json")
    assert result.exit_code == 2, result.output
    assert "does not exist" in cli.json(result)["error"]["message"]


def test_a_passphrase_protected_key_is_bad_input(server, tmp_path: Path, host_vars_cleanup) -> None:
    _with_key(server, tmp_path, passphrase="s3cret-words")
    fleet = load_inventory(server.inventory)
    with pytest.raises(UsageError, match="protected by a passphrase"):
        gather(fleet, fleet.nodes[:1], [CommandSpec("t", ("true",))], deadline_s=20)


def test_a_private_key_readable_by_others_is_refused(server, tmp_path: Path, host_vars_cleanup) -> None:
    key = _with_key(server, tmp_path, mode=0o644)
    fleet = load_inventory(server.inventory)
    with pytest.raises(UsageError, match="mode 0644") as info:
        gather(fleet, fleet.nodes[:1], [CommandSpec("t", ("true",))], deadline_s=20)
    assert f"chmod 600 {key}" in (info.value.hint or "")


def test_a_known_hosts_file_that_is_not_utf8_is_bad_input(server, cli) -> None:
    known = server.inventory / "known_hosts"
    original = known.read_bytes()
    try:
        known.write_bytes(original + b"# caf\xe9\n")
        result = cli("topology", "check", "-i", str(server.inventory), "--json")
    finally:
        known.write_bytes(original)
    assert result.exit_code == 2, result.output
    bad_line = original.count(b"\n") + 1
    assert f"line {bad_line}: byte 0xe9 is not UTF-8" in cli.json(result)["error"]["message"]


# ---------------------------------------------------------------------------------------------
# Logging in as Ansible does: per-host user, port and key; ProxyJump from the args or ~/.ssh/config.
# ---------------------------------------------------------------------------------------------


def test_per_host_port_and_key_from_host_vars_are_followed(server, tmp_path: Path, host_vars_cleanup) -> None:
    """The group's settings say port 1 and no key; host_vars/node-1 gives the real port and key."""
    hosts = server.inventory / "hosts.yml"
    original = hosts.read_text()
    hv = server.inventory / "host_vars" / "node-1"
    hv.mkdir(parents=True)
    (hv / "login.yml").write_text(
        f"ansible_port: {server.port}\nansible_ssh_private_key_file: \"{{{{ inventory_dir }}}}/id_ed25519\"\n"
    )
    try:
        hosts.write_text(original.replace(f"ansible_port: {server.port}", "ansible_port: 1"))
        settings = server.inventory / "group_vars" / "all" / "macfleet.yml"
        keep = settings.read_text()
        settings.write_text(keep.replace("private_key_file: id_ed25519", "private_key_file: no-such-key"))
        try:
            fleet = load_inventory(server.inventory)
            result = gather(fleet, fleet.nodes[:1], [CommandSpec("t", ("echo", "in"))], deadline_s=20)
        finally:
            settings.write_text(keep)
    finally:
        hosts.write_text(original)
    assert result.outputs["node-1"]["t"].stdout == "in\n"


def _jump_config(server, tmp_path: Path, jump_port: int) -> Path:
    config = tmp_path / "ssh_config"
    inv = server.inventory
    config.write_text(
        f"Host behind-the-jump\n  HostName 127.0.0.1\n  Port {server.port}\n  ProxyJump jumper\n"
        f"Host jumper\n  HostName 127.0.0.1\n  Port {jump_port}\n  User root\n"
        f"  IdentityFile {inv / 'id_ed25519'}\n  UserKnownHostsFile {inv / 'known_hosts'}\n"
    )
    return config


def test_proxyjump_from_the_users_ssh_config(server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = server.inventory / "hosts.yml"
    original = hosts.read_text()
    hosts.write_text(original.replace("ansible_host: 127.0.0.1\n          ansible_port: "
                                      f"{server.port}\n", "ansible_host: behind-the-jump\n", 1))
    try:
        fleet = load_inventory(server.inventory)
        monkeypatch.setattr(ssh_module, "USER_SSH_CONFIG", _jump_config(server, tmp_path, server.port))
        good = gather(fleet, fleet.nodes[:1], [CommandSpec("t", ("echo", "through"))], deadline_s=20)
        # the same, with nothing listening on the jump host's port: the failure names the jump host
        monkeypatch.setattr(ssh_module, "USER_SSH_CONFIG", _jump_config(server, tmp_path, 1))
        bad = gather(fleet, fleet.nodes[:1], [CommandSpec("t", ("true",))], deadline_s=20)
    finally:
        hosts.write_text(original)
    assert good.outputs["node-1"]["t"].stdout == "through\n"
    assert "jump host 127.0.0.1" in bad.unreachable["node-1"]


def test_proxyjump_from_ansible_ssh_common_args(server, tmp_path: Path) -> None:
    """-J in the host's ansible_ssh_extra_args, the jump host's key and known_hosts from `-F FILE`, as
    OpenSSH takes them (it passes -F, and only -F, on to the jump host's ssh)."""
    config = tmp_path / "jump_config"
    config.write_text(f"Host *\n  IdentityFile {server.inventory / 'id_ed25519'}\n"
                      f"  UserKnownHostsFile {server.inventory / 'known_hosts'}\n")
    hosts = server.inventory / "hosts.yml"
    original = hosts.read_text()
    extra = f"-F {config} -J root@127.0.0.1:1"
    entry = f"ansible_ssh_extra_args: \"{extra}\"\n          ansible_user:"
    hosts.write_text(original.replace("ansible_user:", entry, 1))
    try:
        fleet = load_inventory(server.inventory)
        target = ssh_module.SshTarget.for_node(fleet, fleet.nodes[0])
        bad = gather(fleet, fleet.nodes[:1], [CommandSpec("t", ("true",))], deadline_s=20)
    finally:
        hosts.write_text(original)
    assert [(h.host, h.port, h.user) for h in target.jumps] == [("127.0.0.1", 1, "root")]
    assert target.jumps[0].known_hosts == (server.inventory / "known_hosts",)
    assert "jump host 127.0.0.1" in bad.unreachable["node-1"]


# ---------------------------------------------------------------------------------------------
# Ctrl-C: prompt, once or twice, with no traceback.
# ---------------------------------------------------------------------------------------------


def _hung_inventory(server, tmp_path: Path) -> tuple[Path, object]:
    """node-1 answers; node-2 accepts TCP and never says a word (a hung Mac), under a 60 s connect timeout."""
    import shutil
    import socket

    inv = tmp_path / "inv"
    shutil.copytree(server.inventory, inv)
    # at node-2's own address: a silent socket elsewhere leaves node-2's port closed, refused at once, and the
    # pass can end before Ctrl-C is pressed
    address = load_inventory(inv).node("node-2").address
    silent = socket.socket()
    silent.bind((address, 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    hosts = inv / "hosts.yml"
    text = hosts.read_text()
    head, _, tail = text.rpartition(f"ansible_port: {server.port}")
    hosts.write_text(f"{head}ansible_port: {port}{tail}")
    settings = inv / "group_vars" / "all" / "macfleet.yml"
    settings.write_text(settings.read_text().replace("connect_timeout_s: 5", f"connect_timeout_s: {HUNG_S}"))
    with (inv / "known_hosts").open("a") as fh:
        fh.write(f"[{address}]:{port} {server.host_key_pub}\n")
    return inv, silent


HUNG_S = 600  # the hung node's connect timeout (the most the inventory allows): only Ctrl-C ends the pass sooner


@pytest.mark.parametrize(("presses", "command"), [(1, "topology check"), (2, "topology check"), (1, "doctor")])
def test_ctrl_c_with_a_hung_node_returns_at_once(server, tmp_path: Path, presses: int, command: str) -> None:
    """(doctor dials first and imports its judges while the nodes answer: Ctrl-C then stops the pass too.)"""
    inv, silent = _hung_inventory(server, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-m", "macfleet", *command.split(), "-i", str(inv)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 20
        while "collecting" not in (line := proc.stderr.readline()) and "probing" not in line:  # pass started
            assert line and time.monotonic() < deadline, "macfleet did not start collecting"
        silent.settimeout(20)
        hung, _ = silent.accept()  # node-2's connection is open and gets no banner: the pass waits on it
        for _ in range(presses):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.1)  # two separate presses, as a person makes them
        try:
            _, err = proc.communicate(timeout=HUNG_S / 5)
        except subprocess.TimeoutExpired:
            pytest.fail(f"Ctrl-C did not end the pass: it still waits on the hung node (timeout {HUNG_S} s)")
        hung.close()
    finally:
        proc.kill()
        silent.close()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "cancelled" in err
