"""CLI frame: help for every group, version, exit codes and the JSON/stderr split."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from macfleet.cli.app import GROUPS
from tests.conftest import EXAMPLE_INVENTORY

GROUP_NAMES = [name for name, _, _ in GROUPS]


def test_every_group_has_its_module() -> None:
    # decided by the modules, not read back from the output under test
    assert [name for name, module, _ in GROUPS if importlib.util.find_spec(module) is None] == []


def test_root_help(cli) -> None:
    result = cli("--help")
    assert result.exit_code == 0
    for name in GROUP_NAMES:
        assert name in result.stdout


@pytest.mark.parametrize("group", GROUP_NAMES)
def test_group_help(cli, group: str) -> None:
    result = cli(group, "--help")
    assert result.exit_code == 0, result.stderr
    assert "Usage" in result.stdout


def test_version(cli) -> None:
    result = cli("--version")
    assert result.exit_code == 0
    assert result.stdout.startswith("macfleet ")


def test_inventory_check_example(cli) -> None:
    result = cli("inventory", "check", "-i", str(EXAMPLE_INVENTORY))
    assert result.exit_code == 0, result.stderr
    assert "1 mesh, 4 Macs" in result.stdout


def test_inventory_check_json(cli) -> None:
    result = cli("inventory", "check", "-i", str(EXAMPLE_INVENTORY), "--json")
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert {k: v for k, v in report.items() if k != "warnings"} == {
        "inventory": str(EXAMPLE_INVENTORY),
        "ok": True,
        "meshes": {"mesh1": ["studio-1", "studio-2", "studio-3", "studio-4"]},
    }
    # the example ships an empty known_hosts: said, since strict host keys refuse every node until `trust`
    assert [(w["key_path"], w["found"]) for w in report["warnings"]] == [
        ("macfleet_ssh.known_hosts_file", "an empty known_hosts (no host key recorded)")]


def test_inventory_env_var(cli) -> None:
    result = cli("inventory", "check", env={"MACFLEET_INVENTORY": str(EXAMPLE_INVENTORY)})
    assert result.exit_code == 0


def test_inventory_show_json(cli) -> None:
    data = cli.json(cli("inventory", "show", "-i", str(EXAMPLE_INVENTORY), "--json"))
    assert [n["name"] for n in data["meshes"][0]["nodes"]] == ["studio-1", "studio-2", "studio-3", "studio-4"]
    assert data["settings"]["ipplan"] == {"pool": "10.213.0.0/16", "prefix": 30, "mtu": 1500}


def test_broken_inventory_exits_2_naming_file_and_value(cli, example_inventory) -> None:
    hosts = example_inventory / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("studio-3.cluster.example.com", "'studio 3'"))
    result = cli("inventory", "check", "-i", str(example_inventory))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "hosts.yml:20 macfleet.children.mesh1.hosts.studio-3.ansible_host: found 'studio 3'" in result.stderr
    assert "Traceback" not in result.stderr


def test_broken_inventory_json_error(cli, example_inventory) -> None:
    hosts = example_inventory / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("studio-3.cluster.example.com", "'studio 3'"))
    result = cli("inventory", "check", "-i", str(example_inventory), "--json")
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "inventory_invalid"
    assert error["details"]["problems"][0]["found"] == "'studio 3'"


def test_missing_inventory_exit_2(cli, tmp_path) -> None:
    result = cli("inventory", "check", "-i", str(tmp_path / "none"))
    assert result.exit_code == 2
    assert "no inventory directory" in result.stderr


def test_unknown_option_exit_2(cli) -> None:
    assert cli("inventory", "check", "--bogus").exit_code == 2


def test_console_script_runs() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "macfleet", "inventory", "check", "-i", str(EXAMPLE_INVENTORY)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_lab_faults_lists_every_fault_and_takes_name(cli) -> None:
    result = cli("lab", "faults", "--name", "no-such-lab", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["active"] == []
    usages = [f["usage"].split()[0] for f in data["faults"]]
    for fault in ("unplug", "slow-cable", "wrong-port", "double-cable", "via-hub", "unknown-mac", "bridge-on",
                  "ip-drift", "apipa", "rdma-off", "rdma-wedge", "qp-exhausted", "hang", "slow-boot", "os-mismatch",
                  "filevault-on", "disk-full", "sleep-on", "wired-limit-lost", "clock-skew", "exo-down",
                  "exo-version", "exo-runner-failed", "update-offered", "update-fails", "update-rdma-off"):
        assert fault in usages


@pytest.mark.parametrize(
    ("codes", "expected"), [([], 0), ([0, 1], 1), ([1, 3, 0], 3), ([3, 2, 1], 2), ([0, 0], 0)]
)
def test_exit_code_precedence(codes: list[int], expected: int) -> None:
    from macfleet.errors import most_severe_exit

    assert most_severe_exit(codes) == expected


@pytest.mark.parametrize(
    "argv",
    [
        ("inventory", "check", "--bogus", "--json"),  # unknown option
        ("facts", "parse", "--json"),  # missing argument
        ("topology", "plan", "--nodes", "many", "--json"),  # a value of the wrong type
    ],
)
def test_json_usage_errors_are_the_json_error_object(cli, argv: tuple[str, ...]) -> None:
    result = cli(*argv)
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "usage" and error["message"]
    assert "╭" not in result.stderr  # one plain line, not click's box


def test_inventory_check_warns_about_a_proxycommand(cli, example_inventory) -> None:
    hosts = example_inventory / "hosts.yml"
    user = "          ansible_user: admin\n"
    hosts.write_text(hosts.read_text().replace(user, user + "          ansible_ssh_extra_args: -o ProxyCommand=x\n", 1))
    result = cli("inventory", "check", "-i", str(example_inventory), "--json")
    assert result.exit_code == 0, result.stderr
    assert "warning: inv/hosts.yml:18" in result.stderr and "ProxyCommand" in result.stderr
    warning, known_hosts = json.loads(result.stdout)["warnings"]  # and the example's empty known_hosts
    assert (warning["file"], warning["line"]) == ("inv/hosts.yml", 18)
    assert known_hosts["key_path"] == "macfleet_ssh.known_hosts_file"
