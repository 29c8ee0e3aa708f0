"""`reboot` and `watch` wiring: bad input exits 2 with one clear line, before any node is contacted."""

from __future__ import annotations

from tests.conftest import EXAMPLE_INVENTORY

EXAMPLE = str(EXAMPLE_INVENTORY)


def test_reboot_refuses_part_of_a_mesh(cli):
    r = cli("reboot", "-i", EXAMPLE, "studio-1", "--dry-run")
    assert r.exit_code == 2 and "a mesh reboots whole" in r.stderr


def test_reboot_unknown_node_and_mesh(cli):
    assert cli("reboot", "-i", EXAMPLE, "nope").exit_code == 2
    r = cli("reboot", "-i", EXAMPLE, "--mesh", "nope", "--json")
    assert r.exit_code == 2 and cli.json(r)["error"]["code"] == "usage"


def test_watch_bad_listen(cli):
    r = cli("watch", "-i", EXAMPLE, "--listen", "9464", "--once")
    assert r.exit_code == 2 and "ADDR:PORT" in r.stderr


def test_watch_bad_policy_exits_2_before_probing(cli, example_inventory):
    policy = example_inventory / "group_vars" / "all" / "watch.yml"
    policy.write_text("macfleet_remediation:\n  checks: [rdma, nosuch]\n")
    r = cli("watch", "-i", str(example_inventory), "--once")
    assert r.exit_code == 2 and "unknown check(s) nosuch" in r.stderr
    policy.write_text("macfleet_remediation:\n  checks: [reachable]\n")
    r = cli("watch", "-i", str(example_inventory), "--once")
    assert r.exit_code == 2 and "ladder has" in r.stderr
    policy.write_text("macfleet_remediation:\n  windows: [{start: '25:00'}]\n")
    assert cli("watch", "-i", str(example_inventory), "--once").exit_code == 2


def test_help(cli):
    assert cli("reboot", "--help").exit_code == 0
    assert cli("watch", "--help").exit_code == 0


def test_watch_check_refuses_an_unsafe_state_directory_and_bad_options(cli, example_inventory, tmp_path,
                                                                         monkeypatch) -> None:
    """watch --check reads the healer's state: an unsafe shared directory is refused (exit 2) as everywhere else,
    and its options are checked as without --check (it skipped both)."""
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    monkeypatch.setenv("MACFLEET_CLUSTER_STATE_DIR", str(open_dir))
    r = cli("watch", "--check", "-i", str(example_inventory))
    assert r.exit_code == 2 and "world-writable" in r.stderr, r.stderr
    monkeypatch.setenv("MACFLEET_CLUSTER_STATE_DIR", str(tmp_path / "fine"))
    r = cli("watch", "--check", "--listen", "nonsense", "-i", str(example_inventory))
    assert r.exit_code == 2 and "--listen 'nonsense'" in r.stderr, r.stderr
