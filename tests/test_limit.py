"""`-l/--limit`: Ansible's host-pattern syntax over macfleet's nodes and groups (inventory/limit.py)."""

from __future__ import annotations

import json

import pytest

from macfleet.errors import UsageError
from macfleet.inventory.limit import match

HOSTS = ["studio-1", "studio-2", "studio-3", "studio-4", "mini-1", "mini-2"]
GROUPS = {"macfleet": HOSTS, "mesh1": HOSTS[:4], "mesh2": HOSTS[4:]}


@pytest.mark.parametrize(("pattern", "expected"), [
    ("studio-1", ["studio-1"]),
    ("studio-2,studio-1", ["studio-1", "studio-2"]),  # inventory order, as Ansible runs them
    ("studio-1:mini-2", ["studio-1", "mini-2"]),
    ("mesh2", ["mini-1", "mini-2"]),
    ("all", HOSTS),
    ("studio-*", HOSTS[:4]),
    ("studio-[13]", ["studio-1", "studio-3"]),
    ("mesh*", HOSTS),
    ("~studio-[12]$", ["studio-1", "studio-2"]),
    ("mesh1:!studio-2", ["studio-1", "studio-3", "studio-4"]),
    ("!studio-2", [h for h in HOSTS if h != "studio-2"]),  # only exclusions: from all
    ("macfleet:&mesh2", ["mini-1", "mini-2"]),
    ("&mesh2:macfleet", ["mini-1", "mini-2"]),  # & applies after the plain terms, wherever written
    ("!studio-1:mesh1:&studio-*", ["studio-2", "studio-3", "studio-4"]),
    (" studio-1 , studio-3 ", ["studio-1", "studio-3"]),
])
def test_patterns(pattern: str, expected: list[str]) -> None:
    assert match(pattern, HOSTS, GROUPS) == expected


@pytest.mark.parametrize(("pattern", "says"), [
    ("studio-9", "'studio-9' matches no node or group"),
    ("mesh1:!mesh1", "leaves no node"),
    ("", "empty"),
    (",", "empty"),
    ("studio-1:!", "without a name"),
    ("~(", "not a regular expression"),
    ("x" * 2000, "at most"),
])
def test_bad_patterns_are_refused_with_what_exists(pattern: str, says: str) -> None:
    with pytest.raises(UsageError) as e:
        match(pattern, HOSTS, GROUPS)
    assert says in str(e.value.message)
    assert e.value.exit_code == 2


# ---------------------------------------------------------------------------------------------- on the CLI

def test_limit_that_matches_nothing_is_refused_before_any_node_is_dialled(cli, example_inventory) -> None:
    for argv in (("doctor",), ("bootstrap", "--check"), ("trust",), ("unlock", "--check"),
                 ("rdma", "enable", "--non-interactive"), ("rollout", "model", "a/b", "--verify", "--from", "/")):
        result = cli(*argv, "-i", str(example_inventory), "--limit", "studio-9", "--json")
        assert result.exit_code == 2, (argv, result.output)
        error = json.loads(result.stdout)["error"]
        assert "'studio-9' matches no node or group" in error["message"] and "studio-1" in error["hint"], argv


def test_reboot_refuses_a_limit_that_is_not_a_whole_mesh_with_the_reason(cli, example_inventory) -> None:
    result = cli("reboot", "--check", "-i", str(example_inventory), "-l", "studio-*:!studio-2")
    assert result.exit_code == 2, result.output
    assert "a mesh reboots whole" in result.stderr and "studio-1, studio-3, studio-4" in result.stderr
    assert "released only when the whole mesh reboots together" in result.stderr


def test_doctor_fix_refuses_part_of_a_mesh(cli, example_inventory) -> None:
    result = cli("doctor", "--fix", "-i", str(example_inventory), "-l", "studio-1")
    assert result.exit_code == 2, result.output
    assert "IP plan, which is made for whole meshes" in result.stderr


def test_limit_narrows_meshes_and_names_the_partial_ones() -> None:
    from macfleet.flow.meshes import limit_meshes
    from macfleet.inventory.load import load_inventory
    from tests.conftest import EXAMPLE_INVENTORY

    fleet = load_inventory(EXAMPLE_INVENTORY)
    meshes, partial = limit_meshes(fleet, list(fleet.meshes), "mesh1:!studio-4")
    assert [m.node_names for m in meshes] == [("studio-1", "studio-2", "studio-3")] and partial == ["mesh1"]
    meshes, partial = limit_meshes(fleet, list(fleet.meshes), "all")
    assert meshes == list(fleet.meshes) and partial == []


def test_part_of_a_mesh_leaves_out_exactly_the_mesh_wide_checks() -> None:
    from macfleet.flow.doctor import limited_checks
    from macfleet.judge.health import CHECK_CODES, CHECKS

    mesh_wide = ("macos-build", "cabling", "rdma", "ip-plan", "exo-version", "exo-peers", "exo-rdma", "tb-ping",
                 "exo-api-exposure", "llama-rpc", "links-bench", "exo-discovery", "model-placed", "inference")
    assert {c.code for c in CHECKS if c.mesh_wide} == set(mesh_wide)
    assert limited_checks(None) == [c for c in CHECK_CODES if c not in mesh_wide]
    assert limited_checks(["cabling", "power"]) == ["power"]
