"""An inventory never echoes a secret: a vars file that is a link out of the inventory directory is refused (it
is never read), and every bad value a problem shows is a short, escaped excerpt, on stderr and in --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from macfleet.errors import InventoryError
from macfleet.inventory.load import load_inventory

# A private key as `ssh-keygen -t ed25519` writes it: the body is what must never be shown.
BODY = [
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
    "QyNTUxOQAAACDSECRETSECRETSECRETSECRETSECRETSECRETSECRETSEAAAAJBxyzxyz0",
    "c2VjcmV0LWtleS1tYXRlcmlhbC10aGF0LW11c3QtbmV2ZXItYmUtcHJpbnRlZC1hbnl3aG",
    "VyZQAAAEDxkNe1SECRETSECRETSECRETSECRETSECRETSECRETSECRETSECRETSECRETS",
]
PRIVATE_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(BODY) + "\n-----END OPENSSH PRIVATE KEY-----\n"


def _secret(tmp_path: Path) -> Path:
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    key = ssh / "id_ed25519"
    key.write_text(PRIVATE_KEY)
    key.chmod(0o600)
    return key


def _leaks(text: str) -> list[str]:
    return [line for line in BODY if line[:20] in text or line[-20:] in text]


def _check(cli, inv: Path) -> tuple[object, object]:
    human = cli("inventory", "check", "-i", str(inv))
    as_json = cli("inventory", "check", "-i", str(inv), "--json")
    for result in (human, as_json):
        assert result.exit_code == 2, (result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
        assert _leaks(result.stdout + result.stderr) == []
    return human, as_json


@pytest.mark.parametrize(
    "link",
    ["group_vars/all/x.yml", "group_vars/mesh1.yml", "host_vars/studio-1.yml", "group_vars/all/sub/x.yaml"],
)
def test_a_vars_file_linked_out_of_the_inventory_is_refused_unread(cli, example_inventory: Path, tmp_path: Path,
                                                                   link: str) -> None:
    path = example_inventory / link
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(_secret(tmp_path))
    human, as_json = _check(cli, example_inventory)
    assert f"inv/{link}: found a link to " in human.stderr
    assert "outside the inventory directory" in human.stderr and "a file inside the inventory" in human.stderr
    (problem,) = json.loads(as_json.stdout)["error"]["details"]["problems"]
    assert problem["file"] == f"inv/{link}" and "outside the inventory directory" in problem["found"]


def test_a_linked_directory_and_hosts_file_out_of_the_inventory_are_refused(cli, example_inventory: Path,
                                                                            tmp_path: Path) -> None:
    key = _secret(tmp_path)
    (example_inventory / "group_vars" / "mesh1").symlink_to(key.parent, target_is_directory=True)
    human, _ = _check(cli, example_inventory)
    assert "inv/group_vars/mesh1/id_ed25519: found a link to " in human.stderr

    (example_inventory / "group_vars" / "mesh1").unlink()
    hosts = example_inventory / "hosts.yml"
    moved = tmp_path / "hosts.yml"
    hosts.rename(moved)
    hosts.symlink_to(moved)
    with pytest.raises(InventoryError) as caught:
        load_inventory(example_inventory)
    assert [str(p) for p in caught.value.problems] == [
        f"inv/hosts.yml: found a link to {moved}, outside the inventory directory, "
        "expected a file inside the inventory directory (copy it in, or link to a file inside it)"
    ]


def test_links_inside_the_inventory_are_followed(example_inventory: Path) -> None:
    (example_inventory / "group_vars" / "mesh1").symlink_to("all", target_is_directory=True)
    (example_inventory / "host_vars").mkdir()
    (example_inventory / "host_vars" / "studio-1.yml").symlink_to("../group_vars/all/ansible.yml")
    fleet = load_inventory(example_inventory)
    assert [n.name for n in fleet.meshes[0].nodes] == ["studio-1", "studio-2", "studio-3", "studio-4"]


SECRET_TAIL = "ZZTAILZZ"
LONG = "x" * 3000 + SECRET_TAIL
KEY = "x" * 1000 + SECRET_TAIL  # YAML's longest implicit key is 1024 characters


@pytest.mark.parametrize(
    ("file", "text"),
    [
        ("group_vars/all/x.yml", PRIVATE_KEY),  # a copied-in key: a document that is not a mapping
        ("group_vars/all/x.yml", f"{LONG}\n"),
        ("group_vars/all/x.yml", f"macfleet_exo:\n  port: '{LONG}'\n"),
        ("group_vars/all/x.yml", f"macfleet_exo:\n  {KEY}: 1\n"),
        ("group_vars/all/x.yml", f"macfleet_{KEY}: 1\n"),
        ("group_vars/all/x.yml", f"macfleet_remediation:\n  windows: [{{days: [sat], start: '02:00', end: '06:00', "
                                 f"timezone: '{LONG}'}}]\n"),
        ("group_vars/all/x.yml", f"ansible_user: '{LONG}'\n"),
        ("host_vars/studio-1.yml", f"ansible_ssh_common_args: [{LONG}]\n"),
        ("hosts.yml", f"macfleet:\n  children:\n    mesh1:\n      hosts:\n        '{KEY}': {{}}\n"),
        ("hosts.yml", f"macfleet:\n  children:\n    '{KEY}':\n      hosts: {{a: {{}}}}\n"),
        ("hosts.yml", f"macfleet:\n  children:\n    mesh1:\n      hosts:\n        a: {{ansible_host: '{LONG}'}}\n"),
        ("hosts.yml", f"macfleet:\n  children:\n    mesh1:\n      hosts:\n        a: {{macfleet_model: '{LONG}'}}\n"),
        ("hosts.yml", f"macfleet:\n  children:\n    mesh1:\n      hosts:\n        a: {{ansible_port: '{LONG}'}}\n"),
        ("hosts.yml", f"macfleet:\n  children:\n    mesh1:\n      hosts:\n        a: '{LONG}'\n"),
        ("hosts.yml", f"'{KEY}': {{}}\nmacfleet: {{}}\n"),
        ("hosts.yml", f"macfleet:\n  {KEY}: 1\n  children: {{mesh1: {{hosts: {{a: {{}}}}}}}}\n"),
    ],
    ids=["copied-key", "document", "setting", "setting-key", "top-key", "timezone", "connection-var",
         "connection-list", "host-name", "mesh-name", "address", "model", "port", "host-entry", "top-group",
         "macfleet-key"],
)
def test_a_bad_value_is_shown_as_a_short_escaped_excerpt(cli, example_inventory: Path, file: str,
                                                         text: str) -> None:
    path = example_inventory / file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    human, as_json = _check(cli, example_inventory)
    problems = json.loads(as_json.stdout)["error"]["details"]["problems"]
    assert problems
    for shown in [*human.stderr.splitlines(), *(json.dumps(p) for p in problems)]:
        assert SECRET_TAIL not in shown and "x" * 100 not in shown, shown[:300]
        assert len(shown) < 600, shown[:300]


def test_an_excerpt_escapes_what_a_terminal_would_act_on(example_inventory: Path) -> None:
    (example_inventory / "group_vars/all/x.yml").write_text('macfleet_exo:\n  port: "a\\e[2J\\u202eb\\nc"\n')
    with pytest.raises(InventoryError) as caught:
        load_inventory(example_inventory)
    (problem,) = caught.value.problems
    assert problem.found == "'a\\x1b[2J\\u202eb\\nc'"


def test_an_inventory_directory_that_is_itself_a_link_still_loads(example_inventory: Path, tmp_path: Path) -> None:
    link = tmp_path / "default"
    link.symlink_to(example_inventory, target_is_directory=True)
    assert len(load_inventory(link).meshes[0].nodes) == 4
