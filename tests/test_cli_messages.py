"""Messages that say what is true (issue 30): each was misleading before, reproduced as the sysadmin walk did
(reviews-2026-12/sysadmin-walk.md, "CLI findings" 7 and the inventory findings)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tests.conftest import EXAMPLE_INVENTORY

GAI = "cannot connect to studio-1:22: Name or service not known"  # collect/ssh.py's words for a socket.gaierror


def _set_model(inventory, model: str) -> None:
    hosts = inventory / "hosts.yml"
    text = hosts.read_text()
    assert 'macfleet_model: "Mac15,14"' in text or "macfleet_model: Mac15,14" in text
    hosts.write_text(text.replace("Mac15,14", model, 1))


def test_an_unknown_model_is_refused_at_load_naming_the_known_ones(cli, example_inventory) -> None:
    _set_model(example_inventory, "Mac99,1")
    result = cli("inventory", "check", "-i", str(example_inventory), "--json")
    assert result.exit_code == 2, result.output
    message = json.dumps(json.loads(result.stdout)["error"])
    assert "macfleet_model" in message and "Mac99,1" in message and "Mac15,14 (mac-studio-m3-ultra)" in message


def test_a_mesh_without_models_is_told_to_set_them_and_an_unknown_one_is_not() -> None:
    from macfleet.errors import UsageError
    from macfleet.flow.topology import mesh_sheet
    from macfleet.inventory.load import load_inventory

    mesh = load_inventory(EXAMPLE_INVENTORY).meshes[0]
    nodes = list(mesh.nodes)
    unknown = mesh.model_copy(update={"nodes": (nodes[0].model_copy(update={"model": "Mac99,1"}), *nodes[1:])})
    with pytest.raises(UsageError) as e:
        mesh_sheet(unknown)
    assert "set macfleet_model" not in (e.value.hint or "") and "does not know" in e.value.message
    unset = mesh.model_copy(update={"nodes": (nodes[0].model_copy(update={"model": None}), *nodes[1:])})
    with pytest.raises(UsageError) as e:
        mesh_sheet(unset)
    assert "set macfleet_model" in (e.value.hint or "") and "studio-1" in e.value.message


def test_a_dns_failure_is_named_as_one_not_a_powered_off_mac() -> None:
    from macfleet.inventory.load import load_inventory
    from macfleet.judge.health import check_reachable
    from macfleet.judge.reach import unreachable_fix
    from macfleet.judge.topology import _unreachable_findings

    mesh = load_inventory(EXAMPLE_INVENTORY).meshes[0]
    (finding,) = _unreachable_findings(mesh, {"studio-1": GAI})
    (health,) = check_reachable(SimpleNamespace(facts={"studio-1": SimpleNamespace(
        reachable=False, unreachable_reason=GAI)}), "studio-1")
    for fix in (finding.fix, health.fix, unreachable_fix("studio-1", GAI)):
        assert "DNS failure" in fix and "powered on" not in fix
    for why in ("ssh: Could not resolve hostname studio-1: nodename nor servname provided, or not known",
                "[Errno -3] Temporary failure in name resolution"):
        assert "DNS failure" in unreachable_fix("studio-1", why)
    assert "powered on" in unreachable_fix("studio-1", "cannot connect to studio-1:22: timed out")


def test_rollout_exo_with_a_missing_source_does_not_point_at_the_lab(cli, tmp_path, cluster_state) -> None:
    result = cli("rollout", "exo", "--source", str(tmp_path / "nonexistent"), "--no-build",
                 "-i", str(EXAMPLE_INVENTORY), "--json")
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert "no such directory" in error["message"]
    assert "lab" not in error["hint"] and "git URL" in error["hint"]
    assert not list(cluster_state.glob("*/audit.jsonl"))  # refused before any maintenance was taken


def test_rollout_exo_takes_its_source_and_ref_from_the_inventory(cli, example_inventory) -> None:
    settings = example_inventory / "group_vars" / "all" / "macfleet.yml"
    text = settings.read_text()
    settings.write_text(text.replace("  source: null", "  source: builds/exo", 1).replace(
        "  version: null", "  version: v1.0.60", 1))
    result = cli("rollout", "exo", "--no-build", "-i", str(example_inventory), "--json")
    assert result.exit_code == 2, result.output
    # read from the inventory, resolved against its directory (not a missing --source)
    assert f"--source {example_inventory.resolve() / 'builds' / 'exo'}" in json.loads(result.stdout)["error"]["message"]

    from macfleet.flow.rollout import exo_source
    from macfleet.inventory.load import load_inventory

    fleet = load_inventory(example_inventory)
    assert exo_source(fleet, fleet.meshes[0], None, None) == (str(example_inventory.resolve() / "builds/exo"),
                                                               "v1.0.60")
    assert exo_source(fleet, fleet.meshes[0], "https://x/exo", "main") == ("https://x/exo", "main")


def test_rollout_exo_without_a_source_anywhere_says_where_to_set_it(cli) -> None:
    result = cli("rollout", "exo", "--no-build", "-i", str(EXAMPLE_INVENTORY), "--json")
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert "macfleet_exo.source" in error["message"] and "--source" in error["hint"]


def test_inventory_check_says_known_hosts_is_empty(cli) -> None:
    result = cli("inventory", "check", "-i", str(EXAMPLE_INVENTORY))
    assert result.exit_code == 0
    assert "empty known_hosts" in result.stderr and "macfleet trust" in result.stderr


def test_facts_parse_shows_the_command_not_our_class_names(cli) -> None:
    from tests.conftest import ROOT

    captures = ROOT / "tests" / "fixtures" / "captures"
    for kind_dir in sorted(p for p in captures.iterdir() if p.is_dir()):
        first = next((p for p in sorted(kind_dir.iterdir()) if not p.name.endswith(".expected.json")), None)
        if first is None:
            continue
        result = cli("facts", "parse", "auto", str(first), env={"COLUMNS": "200"})
        assert "Facts" not in result.stdout, (kind_dir.name, result.stdout[:300])
    f = captures / "rdma-ctl" / "macos__rdma_ctl_status_enabled_1.txt"
    assert cli("facts", "parse", "rdma-ctl", str(f)).stdout.startswith("rdma_ctl status\n")
