"""`macfleet maintenance start|end|status` (issue 28 item 2): --check changes nothing, --json, bad input exit 2,
the audit log, and a maintenance that ends by itself."""

from __future__ import annotations

import json
import time
from pathlib import Path


def _audit(cluster_state: Path) -> list[dict]:
    return [json.loads(x) for f in cluster_state.glob("*/audit.jsonl") for x in f.read_text().splitlines()]


def test_start_status_end_with_check_and_audit(cli, example_inventory, cluster_state) -> None:
    inv = ["-i", str(example_inventory)]
    checked = cli("maintenance", "start", "--for", "2h", "--reason", "recabling studio-3", "--check", *inv)
    assert checked.exit_code == 0 and "would be (--check)" in checked.stdout
    assert not list(cluster_state.glob("*/maintenance.json")) and not _audit(cluster_state)  # nothing changed

    started = cli("maintenance", "start", "--for", "2h", "--reason", "recabling studio-3", "--json", *inv)
    assert started.exit_code == 0, started.stderr
    [mesh] = json.loads(started.stdout)["meshes"]
    assert mesh["maintenance"]["reason"] == "recabling studio-3" and mesh["replaced"] is None
    status = json.loads(cli("maintenance", "status", "--json", *inv).stdout)["meshes"][0]
    assert status["maintenance"]["until"] == mesh["maintenance"]["until"]

    assert "would be (--check)" in cli("maintenance", "end", "--check", *inv).stdout
    assert json.loads(cli("maintenance", "status", "--json", *inv).stdout)["meshes"][0]["maintenance"]
    ended = json.loads(cli("maintenance", "end", "--json", *inv).stdout)["meshes"][0]
    assert ended["ended"]["reason"] == "recabling studio-3"
    assert json.loads(cli("maintenance", "status", "--json", *inv).stdout)["meshes"][0]["maintenance"] is None
    assert [e["action"] for e in _audit(cluster_state)] == ["maintenance-start", "maintenance-end"]


def test_bad_input_exit_2_nothing_written(cli, example_inventory, cluster_state) -> None:
    for args, says in ((("--for", "2x", "--reason", "r"), "--for '2x': expected a duration"),
                       (("--for", "9d", "--reason", "r"), "at most 7 days"),
                       (("--for", "2h", "--reason", "a\x1b[31m"), "--reason: expected one printable line"),
                       (("--for", "2h", "--reason", "r", "--mesh", "nope"), "no mesh 'nope'")):
        result = cli("maintenance", "start", *args, "-i", str(example_inventory))
        assert result.exit_code == 2 and says in result.stderr, result.stderr
    assert not list(cluster_state.glob("*/maintenance.json"))


def test_a_maintenance_ends_by_itself(cli, example_inventory) -> None:
    inv = ["-i", str(example_inventory)]
    assert cli("maintenance", "start", "--for", "1s", "--reason", "short", *inv).exit_code == 0
    deadline = time.monotonic() + 30
    while json.loads(cli("maintenance", "status", "--json", *inv).stdout)["meshes"][0]["maintenance"]:
        assert time.monotonic() < deadline, "the maintenance did not end by itself"
        time.sleep(0.1)


def test_a_damaged_file_is_repaired_by_end_as_its_hint_says(cli, example_inventory, cluster_state) -> None:
    """hostile: a pid no process can have in the shared file crashed every reader; now the file reads as damaged
    (treated as maintenance by the healer), and `maintenance end` replaces it, audited."""
    inv = ["-i", str(example_inventory)]
    assert cli("maintenance", "start", "--for", "2h", "--reason", "r", *inv).exit_code == 0
    [path] = cluster_state.glob("*/maintenance.json")
    data = json.loads(path.read_text())
    for record in data.values():  # {mesh: record}
        record.update(command="reboot", pid=99999999999999999999)
    path.write_text(json.dumps(data))
    damaged = cli("maintenance", "status", *inv)
    assert damaged.exit_code != 0 and "Traceback" not in damaged.stderr + damaged.stdout
    assert "maintenance" in damaged.stderr
    ended = cli("maintenance", "end", "--json", *inv)
    assert ended.exit_code == 0, ended.stderr
    assert json.loads(cli("maintenance", "status", "--json", *inv).stdout)["meshes"][0]["maintenance"] is None
    assert any("damaged maintenance file was replaced" in e["decision"] for e in _audit(cluster_state))
