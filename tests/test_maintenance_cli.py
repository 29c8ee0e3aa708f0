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


def test_a_maintenance_file_that_cannot_be_written_or_read_is_an_error_naming_it(cli, example_inventory) -> None:
    import os

    from macfleet.paths import maintenance_file

    path = maintenance_file(example_inventory)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # the CLI runs in this process: its temporary file
    tmp.mkdir(parents=True)  # fails for root too: a directory where the file goes
    result = cli("maintenance", "start", "--for", "2h", "--reason", "r", "-i", str(example_inventory))
    assert result.exit_code == 1 and f"cannot write the maintenance file {path}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not path.exists()
    tmp.rmdir()
    path.mkdir()
    result = cli("maintenance", "status", "-i", str(example_inventory))
    assert result.exit_code == 1 and f"the maintenance file {path} cannot be read" in result.stderr, result.stderr


def test_an_audit_log_that_cannot_be_written_is_an_error_for_a_person_said_for_a_command(
        cli, example_inventory) -> None:
    from macfleet.flow.maintenance import planned
    from macfleet.inventory.load import load_inventory
    from macfleet.paths import audit_file

    path = audit_file(example_inventory)
    path.mkdir(parents=True)  # fails for root too
    result = cli("maintenance", "start", "--for", "2h", "--reason", "r", "-i", str(example_inventory))
    assert result.exit_code == 1 and f"cannot write the audit log {path}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert cli("maintenance", "end", "-i", str(example_inventory)).exit_code == 1

    fleet = load_inventory(example_inventory)
    said: list[str] = []
    ran = False
    with planned(fleet, fleet.meshes[0], "reboot", "a test", say=said.append):
        ran = True  # the command goes on: its maintenance holds, only its audit line is missing
        status = json.loads(cli("maintenance", "status", "--json", "-i", str(example_inventory)).stdout)
        assert status["meshes"][0]["maintenance"]["command"] == "reboot"
    assert ran and json.loads(cli("maintenance", "status", "--json", "-i", str(example_inventory)).stdout)[
        "meshes"][0]["maintenance"] is None
    assert [s for s in said if f"cannot write the audit log {path}" in s] == [
        f"cannot write the audit log {path}: Is a directory: this maintenance-start is not in the audit log",
        f"cannot write the audit log {path}: Is a directory: this maintenance-end is not in the audit log"], said
