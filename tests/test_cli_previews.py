"""Previews (`--check`) where there were none (issue 30): `doctor --fix --check` runs each fix's playbook in
Ansible's check mode, on a private copy of the inventory, and judges once; `rollout model --check` says what would
be sent where, with sizes, and sends nothing. And -l/--limit on a command that needs the whole mesh."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from macfleet.errors import UsageError
from tests.test_doctor_cli import finding, report


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_doctor_fix_check_runs_each_fix_in_check_mode_once_and_changes_nothing(cli, example_inventory,
                                                                               monkeypatch) -> None:
    from macfleet.act import ansible
    from macfleet.flow import doctor, topology

    before = _tree(example_inventory)
    looks: list[int] = []
    runs: list[ansible.PlaybookRun] = []

    def judged(fleet, meshes, **_):
        looks.append(1)
        return SimpleNamespace(report=report([finding("studio-1", "ip-plan"), finding("studio-2", "power"),
                                              finding("studio-2", "rdma")]), facts={})

    def ran(run, **_):
        runs.append(run)
        assert run.inventory != example_inventory or run.playbook != "network"  # the plan goes into a copy
        return SimpleNamespace(changes={run.limit[0]: [f"{run.playbook}: a task"]})

    monkeypatch.setattr(doctor, "run_doctor", judged)
    monkeypatch.setattr(doctor, "fix_vars", lambda *a: {})
    monkeypatch.setattr(topology, "prepare_apply", lambda fleet, meshes: SimpleNamespace(
        nodes=["studio-1"], hostvars={"studio-1": {"x": 1}}))
    monkeypatch.setattr(ansible, "run_playbook", ran)
    result = cli("doctor", "-i", str(example_inventory), "--fix", "--check", "--diff", "--json")
    assert result.exit_code == 1, result.output  # the findings are still there: nothing was fixed
    payload = json.loads(result.stdout)
    assert len(looks) == 1 and payload["after"] is None
    assert {(f["playbook"], f["status"]) for f in payload["fixes"]} == {("network", "would apply"),
                                                                       ("power", "would apply")}
    assert {f["playbook"]: f["changes"] for f in payload["fixes"]}["power"] == {"studio-2": ["power: a task"]}
    assert all(r.check and r.diff for r in runs) and len(runs) == 2
    assert payload["not_fixed"][0]["check"] == "rdma"
    assert _tree(example_inventory) == before


def _model(tmp_path: Path) -> tuple[Path, dict[str, tuple[int, str]]]:
    src = tmp_path / "model"
    src.mkdir()
    files = {"config.json": b"{}", "weights.safetensors": b"w" * 5000}
    for name, data in files.items():
        (src / name).write_bytes(data)
    return src, {n: (len(d), hashlib.sha256(d).hexdigest()) for n, d in files.items()}


DF = ("Filesystem 1024-blocks Used Available Capacity Mounted on\n"
      "/dev/disk3s5 {size} 100 {free} 1% /System/Volumes/Data\n")


def test_rollout_model_check_says_what_each_node_would_get_and_sends_nothing(cli, example_inventory, tmp_path,
                                                                             monkeypatch) -> None:
    from macfleet.act import transfer
    from macfleet.flow import models
    from macfleet.judge.push import NodeHolding

    src, files = _model(tmp_path)
    real = {f.path: f.digest for f in transfer.local_manifest(src).files}  # the digests the push compares

    def preflight(fleet, nodes, models_dir, name, manifest):
        assert nodes == ["studio-1", "studio-2", "studio-3"]
        answers = {
            "studio-1": {"have": {p: [s, real[p]] for p, (s, _) in files.items()}, "staged": {}},  # has it all
            "studio-2": {"have": {"config.json": [2, real["config.json"]]}, "staged": {"weights.safetensors": 1000}},
            "studio-3": {"have": {}, "staged": {}},
        }
        return {n: NodeHolding(**a, df=DF.format(size=10**9, free=1 if n == "studio-3" else 10**8), final="/x",
                               staging="/y") for n, a in answers.items()}

    monkeypatch.setattr(models, "_preflight", preflight)
    monkeypatch.setattr(transfer, "node_sessions", lambda *a, **k: pytest.fail("a session was opened"))
    result = cli("rollout", "model", "org/m", "--from", str(src), "-i", str(example_inventory), "-l",
                 "studio-1,studio-2,studio-3", "--check", "--json")
    plan = json.loads(result.stdout)
    assert result.exit_code == 1, result.output  # studio-3 has no room: the push would be refused
    assert plan["result"] == "check" and plan["files"] == 2 and plan["bytes"] == 5002 and plan["seed"] == "studio-1"
    assert plan["nodes"]["studio-1"] == {"has_files": 2, "would_send_files": 0, "would_send_bytes": 0,
                                        "refused": None}
    assert plan["nodes"]["studio-2"]["would_send_bytes"] == 4000  # 5000 less the 1000 already staged
    assert "needs" in plan["nodes"]["studio-3"]["refused"]
    assert not list(example_inventory.glob("*lock*"))


def test_rollout_model_check_with_hf_downloads_nothing(cli, example_inventory, monkeypatch, tmp_path) -> None:
    from macfleet.flow import models

    monkeypatch.setattr(models, "transfer_cache", lambda fleet: tmp_path / "cache")
    monkeypatch.setattr(models, "fetch_hf", lambda *a: pytest.fail("downloaded"))
    result = cli("rollout", "model", "org/m", "--hf", "-i", str(example_inventory), "--check", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["download"]["from"] == "huggingface"


@pytest.mark.parametrize(("limit", "mesh"), [("mesh1", "mesh1"), ("studio-*", "mesh1"), ("all", "mesh1"),
                                             ("studio-1,studio-2,studio-3,studio-4", "mesh1")])
def test_a_limit_naming_one_whole_mesh_is_that_mesh(limit: str, mesh: str) -> None:
    from macfleet.cli.options import whole_mesh
    from macfleet.inventory.load import load_inventory
    from tests.conftest import EXAMPLE_INVENTORY

    assert whole_mesh(load_inventory(EXAMPLE_INVENTORY), None, limit, "why") == mesh


def test_a_limit_on_part_of_a_mesh_is_refused_with_the_reason(cli) -> None:
    from tests.conftest import EXAMPLE_INVENTORY

    result = cli("topology", "ipplan", "-i", str(EXAMPLE_INVENTORY), "-l", "studio-1", "--json")
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert "not every node of one mesh" in error["message"] and "one subnet per pair" in error["hint"]
    with pytest.raises(UsageError, match="another"):
        from macfleet.cli.options import whole_mesh
        from macfleet.inventory.load import load_inventory

        whole_mesh(load_inventory(EXAMPLE_INVENTORY), "other", "mesh1", "why")


def test_ansible_diffs_are_shown_as_ansible_shows_them() -> None:
    """The shapes of a task result's `diff` (ansible-core's lineinfile/template/copy give before/after texts with
    headers; file gives states; some modules a `prepared` text)."""
    from macfleet.act.ansible import MAX_DIFF_CHARS, diff_text

    text = diff_text({"diff": [{"before": "a\nb\n", "after": "a\nc\n", "before_header": "/etc/pf.anchors/x",
                                "after_header": "/etc/pf.anchors/x"}]})
    assert text is not None and "--- /etc/pf.anchors/x" in text and "-b\n" in text and "+c\n" in text
    assert diff_text({"diff": {"before": {"state": "absent"}, "after": {"state": "file"}}}) == (
        "- {'state': 'absent'}\n+ {'state': 'file'}\n")
    assert diff_text({"diff": [{"prepared": "changed: 1 line"}]}) == "changed: 1 line\n"
    assert diff_text({"diff": [{"before": "same", "after": "same"}]}) is None
    assert diff_text({"changed": True}) is None
    long = diff_text({"diff": {"before": "", "after": "x\n" * MAX_DIFF_CHARS}})
    assert long is not None and long.endswith("… (cut)\n") and len(long) < MAX_DIFF_CHARS + 20


def test_bootstrap_diff_is_asked_of_ansible_and_shown_as_text(cli, example_inventory, monkeypatch) -> None:
    from macfleet.flow import bootstrap as flow

    asked: dict = {}

    def fake(fleet, meshes, *, check, diff, on_diff, **_):
        asked.update(check=check, diff=diff)
        on_diff("studio-1", "pf anchor", "--- a\n+++ b\n-[red]old\n+new\n")
        return SimpleNamespace(json_payload=lambda: {"changed": 0, "nodes": {}}, exit_code=0, nodes={},
                               unreachable={})

    monkeypatch.setattr(flow, "bootstrap", fake)
    result = cli("bootstrap", "-i", str(example_inventory), "--check", "--diff", "--non-interactive", "--json")
    assert result.exit_code == 0, result.output
    assert asked == {"check": True, "diff": True}
    assert "--- studio-1: pf anchor" in result.stderr and "-[red]old" in result.stderr  # data, not markup


@pytest.mark.skipif(not __import__("tests.sshd").sshd.available(), reason="needs root and OpenSSH")
def test_trust_check_shows_each_key_and_writes_and_asks_nothing(cli, server, tmp_path: Path) -> None:
    """A real OpenSSH server: `trust --check` fetches the key and says what `trust` would do with it."""
    inv = tmp_path / "inv"
    shutil.copytree(server.inventory, inv)
    (inv / "known_hosts").write_text("")
    would = cli("trust", "-i", str(inv), "--check", "--yes", "--json")
    assert would.exit_code == 0, would.output
    payload = json.loads(would.stdout)
    assert payload["check"] is True and payload["nodes"][0]["recorded"] is True
    asks = cli("trust", "-i", str(inv), "--check", "--json")
    assert asks.exit_code == 0, asks.output
    node = json.loads(asks.stdout)["nodes"][0]
    assert node["to_confirm"] is True and node["recorded"] is False and node["refused"] is None
    assert (inv / "known_hosts").read_text() == ""
    human = cli("trust", "-i", str(inv), "--check")
    assert "nothing written" in human.stdout and "to confirm" in human.stdout


def test_rollout_rollback_check_names_the_release_and_takes_no_lock(cli, example_inventory, monkeypatch,
                                                                   tmp_path) -> None:
    from macfleet.act import lock as lock_mod
    from macfleet.act import release
    from macfleet.flow import rollout
    from macfleet.judge.rollout import RolloutStatus

    monkeypatch.setenv("MACFLEET_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(release, "read_nodes", lambda fleet, names, root: {
        n: SimpleNamespace(current="1.0.72", releases=["1.0.70", "1.0.71", "1.0.72"]) for n in names})
    monkeypatch.setattr(rollout, "rollout_status", lambda fleet, mesh: RolloutStatus(current="1.0.72", nodes={}))
    monkeypatch.setattr(lock_mod.ClusterLock, "hold", lambda *a, **k: pytest.fail("the lock was taken"))
    result = cli("rollout", "rollback", "-i", str(example_inventory), "--check", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["result"], report["previous"], report["release"]) == ("check", "1.0.72", "1.0.71")
    human = cli("rollout", "rollback", "-i", str(example_inventory), "--check")
    assert "would switch back from 1.0.72 to 1.0.71" in human.stdout


def test_rdma_enable_check_is_its_non_interactive_walk_and_writes_nothing(cli, example_inventory) -> None:
    import re
    import socket

    with socket.socket() as s:  # every Mac on a port nothing listens on: real SSH, refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    hosts = example_inventory / "hosts.yml"
    n = iter(range(2, 10))  # one loopback address per Mac
    hosts.write_text(re.sub(r"ansible_host: \S+", lambda m: f"ansible_host: 127.0.0.{next(n)}\n"
                            f"          ansible_port: {port}", hosts.read_text()))
    before = _tree(example_inventory)
    result = cli("rdma", "enable", "-i", str(example_inventory), "--check")
    assert result.exit_code == 3, result.output
    assert "could not read whether RDMA is on" in result.stdout + result.stderr
    assert _tree(example_inventory) == before
