"""Our SSH layer against a real OpenSSH server: outputs verbatim, timeouts, unreachable nodes,
strict host keys. Nothing is mocked."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from macfleet.collect.commands import ALL_SPECS, CommandSpec
from macfleet.collect.gather import gather
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
        CommandSpec("echo", ("printf", "a\\tb\\n\\xcb\\x87x")),
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


def test_changed_host_key_is_refused(server) -> None:
    known = server.inventory / "known_hosts"
    original = known.read_text()
    try:
        # another key for the same host: strict checking must refuse, never re-learn
        other_key = "AAAAC3NzaC1lZDI1NTE5AAAAIHmL3lAf0U5ZKc1rX0V0Zl5mYh1H3Gg9cR4p2t0r7q1x"
        known.write_text(f"[127.0.0.1]:{server.port} ssh-ed25519 {other_key}\n")
        fleet = load_inventory(server.inventory)
        result = gather(fleet, fleet.nodes[:1], [CommandSpec("t", ("true",))], deadline_s=20)
    finally:
        known.write_text(original)
    assert "node-1" in result.unreachable
    assert "host key" in result.unreachable["node-1"]


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


def test_every_command_we_run_has_a_real_capture() -> None:
    """design.md §6.4: every CommandSpec must be one seen on a real Mac, its output proven by a capture."""
    missing = [s.key for s in ALL_SPECS if not any((CAPTURES / s.kind).glob("*"))]
    assert not missing, f"no real capture under tests/fixtures/captures/ for: {missing}"
