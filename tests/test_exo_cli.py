"""`macfleet exo ...` end to end without a lab: a real OpenSSH server on 127.0.0.1 is the node (tests/sshd.py),
the lab's exo stand-in runs in process on a port the inventory names, and the CLI reaches it as it reaches a
Mac: curl on the node over the SSH login. Place (refusals, --check, --wait), chat streamed with its tokens/s,
status, stop; bad input exit 2 before any node is dialled; the tunnel's OpenSSH argv."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests import sshd
from tests import test_lab_exo_standin as standin
from tests.conftest import EXAMPLE_INVENTORY
from tests.test_lab_exo_instances import MODEL, _model_on
from tests.test_lab_exo_standin import _get, _wait

start_mesh = standin.start_mesh  # the fixture

pytestmark = pytest.mark.skipif(not sshd.available(), reason="needs root and OpenSSH's sshd")


@pytest.fixture
def node(server, start_mesh, tmp_path: Path):
    """(inventory, the stand-in app): one node whose exo answers on the stand-in's port."""
    _model_on(tmp_path, range(1))
    _mesh, apps = start_mesh(1)
    _wait(lambda: _get(apps[0].port, "/state")[2]["nodeMemory"])
    (server.inventory / "group_vars" / "all" / "exo.yml").write_text(f"macfleet_exo:\n  port: {apps[0].port}\n")
    return server.inventory, apps[0]


def test_place_chat_status_stop(cli, node, tmp_path: Path) -> None:
    inv, app = node
    env = {"MACFLEET_STATE_DIR": str(tmp_path / "state")}
    rdma = cli("exo", "place", MODEL, "--min-nodes", "1", "--over", "rdma", "--sharding", "tensor", "-i", str(inv),
               env=env)
    assert rdma.exit_code == 0, rdma.stderr  # one node: exo forces it to a ring, pipeline (placement.py)

    missing = cli("exo", "place", "mlx-community/Qwen3-0.6B-8bit", "--over", "ring", "-i", str(inv), env=env)
    assert missing.exit_code == 1 and "is not on" in missing.stderr
    assert "macfleet rollout model mlx-community/Qwen3-0.6B-8bit" in missing.stderr
    unknown = cli("exo", "place", "acme/nowhere", "-i", str(inv), env=env)
    assert unknown.exit_code == 1 and "Failed to load model card" in unknown.stderr and "no node holds it" in \
        unknown.stderr and "macfleet rollout model acme/nowhere" in unknown.stderr
    huge = cli("exo", "place", "mlx-community/DeepSeek-V3.1-4bit", "--over", "ring", "-i", str(inv), env=env)
    assert huge.exit_code == 1 and "No cycles found with sufficient memory" in huge.stderr

    already = cli("exo", "place", MODEL, "--over", "ring", "--wait", "--json", "-i", str(inv), env=env)
    assert already.exit_code == 0 and json.loads(already.stdout)["already"] is True
    stop_check = cli("exo", "stop", MODEL, "--check", "--json", "-i", str(inv), env=env)
    assert json.loads(stop_check.stdout)["stopped"] is False and _get(app.port, "/state")[2]["instances"]
    stop = cli("exo", "stop", MODEL, "-i", str(inv), env=env)
    assert stop.exit_code == 0 and "stopped" in stop.stdout

    check = cli("exo", "place", MODEL, "--over", "ring", "--check", "--json", "-i", str(inv), env=env)
    plan = json.loads(check.stdout)
    # exo's name for the node (its ComputerName): 127.0.0.1 is none of the addresses exo lists for it
    assert check.exit_code == 0 and plan["check"] and not plan["placed"] and plan["nodes"] == ["mini0"]
    assert "would place" in cli("exo", "place", MODEL, "--over", "ring", "--check", "-i", str(inv), env=env).stdout
    streamed = cli("exo", "place", MODEL, "--over", "ring", "--check", "--events", "-i", str(inv), env=env)
    lines = [json.loads(x) for x in streamed.stdout.splitlines()]
    assert [lines[0]["event"], lines[-1]["event"]] == ["started", "finished"], lines
    assert lines[-1]["result"]["check"] and lines[-1]["result"]["nodes"] == ["mini0"]
    assert not any(i for i in _get(app.port, "/state")[2]["instances"]
                   if "PipelineShardMetadata" in json.dumps(i) and MODEL in json.dumps(i))
    placed = cli("exo", "place", MODEL, "--over", "ring", "--wait", "--json", "-i", str(inv), env=env)
    report = json.loads(placed.stdout)
    assert placed.exit_code == 0 and report["instance"]["ready"] and report["instance"]["transport"] == "ring"

    chat = cli("exo", "chat", MODEL, "say hello to the mesh", "--max-tokens", "14", "-i", str(inv), env=env)
    assert chat.exit_code == 0, chat.stderr
    assert chat.stdout.startswith("Hello from the lab's exo on 1 node. You said: say hello")
    said = " ".join(chat.stdout.split())
    assert "generation: 14 tokens at" in said and "tokens/s (exo's figures" in said
    as_json = json.loads(cli("exo", "chat", MODEL, "hi", "--json", "-i", str(inv), env=env).stdout)
    assert as_json["answer"].endswith("You said: hi") and as_json["generation_tps"] > 0

    status = cli("exo", "status", "--json", "-i", str(inv), env=env)
    doc = json.loads(status.stdout)
    assert status.exit_code == 0 and doc["nodes"][0]["running"] and doc["nodes"][0]["node_id"] == app.node_id
    assert [s["node"] for s in doc["instances"][0]["shards"]] == ["node-1"]
    human = cli("exo", "status", "-i", str(inv), env=env)
    assert human.exit_code == 0 and "RunnerReady" in human.stdout and "node-1" in human.stdout

    unplaced = cli("exo", "chat", "acme/absent", "hi", "-i", str(inv), env=env)
    assert unplaced.exit_code == 1 and "exo place acme/absent" in unplaced.stderr


@pytest.mark.parametrize(("args", "says"), [
    (("place", "not-a-model"), "bad model 'not-a-model'"),
    (("place", "org/m", "--over", "tb4"), "--over 'tb4': expected rdma or ring"),
    (("place", "org/m", "--sharding", "x"), "expected pipeline or tensor"),
    (("chat", "org/../m", "hi"), "bad model"),
    (("chat", "org/m", "   "), "the prompt must be 1 to"),
    (("tunnel", "no-such-node"), "no node 'no-such-node'"),
    (("status", "-l", "studio-1"), "which is not every node of one mesh"),
    (("stop", ""), "expected an instance id or a model"),
    (("stop", "org/m\x1b[31m"), "expected an instance id or a model"),
    (("stop", "org/m", "-l", "studio-1,studio-2"), "which is not every node of one mesh"),
])
def test_bad_input_exit_2_before_any_node(cli, args, says) -> None:
    result = cli("exo", *args, "-i", str(EXAMPLE_INVENTORY))
    assert result.exit_code == 2, result.stderr
    assert says in result.stderr


def test_tunnel_reaches_exo_through_the_nodes_own_login(node) -> None:
    import subprocess

    from macfleet.flow.exo import tunnel_argv
    from macfleet.inventory.load import load_inventory

    inv, app = node
    local = standin._free_port()
    url, argv = tunnel_argv(load_inventory(inv), None, local_port=local)
    assert url == f"http://127.0.0.1:{local}/"
    assert argv[0] == "ssh" and "StrictHostKeyChecking=yes" in argv and "BatchMode=yes" in argv and "-N" in argv
    assert argv[argv.index("-L") + 1] == f"127.0.0.1:{local}:127.0.0.1:{app.port}"
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert _wait(lambda: _answer(local), 20) == app.node_id
    finally:
        proc.terminate()
        proc.wait(10)


def _answer(port: int) -> str | None:
    try:
        return _get(port, "/node_id", timeout=2)[2]
    except OSError:
        return None


def test_place_wait_waits_the_inventorys_place_timeout_unless_told(cli, node, tmp_path: Path, monkeypatch) -> None:
    from macfleet.flow import exo as flow

    inv, _app = node
    exo_yml = inv / "group_vars" / "all" / "exo.yml"
    exo_yml.write_text(exo_yml.read_text() + "  place_timeout_s: 77\n")
    waited: list[float] = []
    real = flow._await_ready
    monkeypatch.setattr(flow, "_await_ready", lambda api, model, timeout_s, say: (waited.append(timeout_s),
                                                                                  real(api, model, timeout_s, say))[1])
    env = {"MACFLEET_STATE_DIR": str(tmp_path / "state")}
    placed = cli("exo", "place", MODEL, "--over", "ring", "--wait", "-i", str(inv), env=env)
    assert placed.exit_code == 0, placed.stderr
    assert cli("exo", "stop", MODEL, "-i", str(inv), env=env).exit_code == 0
    told = cli("exo", "place", MODEL, "--over", "ring", "--wait", "--timeout", "90", "-i", str(inv), env=env)
    assert told.exit_code == 0, told.stderr
    assert waited == [77.0, 90.0]


def test_a_prompt_on_stdin_that_is_not_utf8_is_refused() -> None:
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "macfleet", "exo", "chat", "org/m", "-i", str(EXAMPLE_INVENTORY)],
                       input=b"\xff\xfe hello", capture_output=True, env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    assert p.returncode == 2 and b"not UTF-8" in p.stderr and b"Traceback" not in p.stderr, p.stderr
