"""`macfleet bench links` wiring: bad input refused in one line, exit 2, before any node is dialled."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("value", ["0", "601", "1.5", "x"])
def test_duration_out_of_range_is_refused(cli, example_inventory, value: str) -> None:
    result = cli("bench", "links", "-i", str(example_inventory), "--duration", value)
    assert result.exit_code == 2
    assert "--duration" in result.stderr or "seconds" in result.stderr


def test_a_baseline_file_that_is_not_ours_is_refused_first(cli, example_inventory) -> None:
    path = example_inventory / "bench-links.baseline.json"
    path.write_text('{"version": 1, "meshes": {"mesh1": {"saved_at": 3}}}\n')
    result = cli("bench", "links", "-i", str(example_inventory), "--json")
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "usage" and "is not a baseline macfleet wrote" in error["message"]
    assert path.read_text() == '{"version": 1, "meshes": {"mesh1": {"saved_at": 3}}}\n'


def test_min_fraction_is_a_checked_setting(cli, example_inventory) -> None:
    (example_inventory / "group_vars" / "all" / "bench.yml").write_text("macfleet_bench:\n  min_fraction: 1.5\n")
    result = cli("inventory", "check", "-i", str(example_inventory))
    assert result.exit_code == 2
    assert "min_fraction" in result.stderr


def test_bench_exo_refuses_a_baseline_file_not_ours_before_any_node(cli, example_inventory) -> None:
    path = example_inventory / "bench-exo.baseline.json"
    path.write_text('{"version": 1, "meshes": {"mesh1": {"saved_at": 3}}}\n')
    result = cli("bench", "exo", "-i", str(example_inventory), "--json")
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "usage" and "is not an inference baseline macfleet wrote" in error["message"]


def test_inference_min_fraction_is_a_checked_setting(cli, example_inventory) -> None:
    (example_inventory / "group_vars" / "all" / "bench.yml").write_text(
        "macfleet_bench:\n  inference_min_fraction: 0\n")
    result = cli("inventory", "check", "-i", str(example_inventory))
    assert result.exit_code == 2 and "inference_min_fraction" in result.stderr
