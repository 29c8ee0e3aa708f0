"""The ansible-runner wrapper against a real OpenSSH server: stats, changes, check mode, failures,
unreachable hosts and cancellation, all from real ansible-playbook runs."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from macfleet.act import ansible as act_ansible
from macfleet.act.ansible import PlaybookRun, run_playbook
from macfleet.errors import Cancelled, PlaybookFailed, UnreachableError, UsageError
from tests import sshd

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not sshd.available(), reason="needs root and OpenSSH (scripts/setup installs it)")

PLAYBOOK = """\
- name: Exercise the wrapper.
  hosts: macfleet
  gather_facts: false
  tasks:
    - name: Ensure the marker file exists.
      ansible.builtin.copy:
        dest: "{{ marker }}"
        content: "macfleet\\n"
        mode: "0600"
    - name: Fail when asked to.
      ansible.builtin.fail:
        msg: "asked to fail on {{ inventory_hostname }}"
      when: fail_here | default(false) | bool
    - name: Wait when asked to.
      ansible.builtin.command:
        argv: [sleep, "{{ wait_s | default(0) }}"]
      changed_when: false
"""


@pytest.fixture
def playbooks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "playbooks"
    d.mkdir()
    (d / "exercise.yml").write_text(PLAYBOOK)
    monkeypatch.setattr(act_ansible, "PLAYBOOKS_DIR", d)
    monkeypatch.setenv("MACFLEET_STATE_DIR", str(tmp_path / "state"))
    return d


def test_check_then_apply_then_idempotent(server, playbooks: Path, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    events = []
    check = run_playbook(
        PlaybookRun("exercise", server.inventory, extravars={"marker": str(marker)}, check=True, diff=True),
        on_event=events.append,
    )
    assert check.status == "successful"
    assert check.changes == {"node-1": ["Ensure the marker file exists."]}
    assert not marker.exists(), "--check changed something"
    assert any(e.status == "changed" and e.host == "node-1" for e in events)
    # --diff: Ansible's own diff of the file it would write reaches the event, as text (bootstrap --diff shows it)
    assert any(e.diff and "macfleet" in e.diff for e in events), [e.diff for e in events]

    first = run_playbook(PlaybookRun("exercise", server.inventory, extravars={"marker": str(marker)}))
    assert first.hosts["node-1"].changed == 1
    assert marker.read_text() == "macfleet\n"

    second = run_playbook(PlaybookRun("exercise", server.inventory, extravars={"marker": str(marker)}))
    assert second.changed == 0
    assert second.hosts["node-1"].ok >= 2


def test_task_failure_names_host_task_and_message(server, playbooks: Path, tmp_path: Path) -> None:
    run = PlaybookRun("exercise", server.inventory, extravars={"marker": str(tmp_path / "m"), "fail_here": True})
    with pytest.raises(PlaybookFailed) as info:
        run_playbook(run)
    assert "node-1: Fail when asked to.: asked to fail on node-1" in info.value.message


def test_unreachable_host_raises_unreachable(server, playbooks: Path, tmp_path: Path) -> None:
    hosts = server.inventory / "hosts.yml"
    original = hosts.read_text()
    hosts.write_text(original.replace(f"ansible_port: {server.port}", "ansible_port: 1"))
    try:
        with pytest.raises(UnreachableError) as info:
            run_playbook(PlaybookRun("exercise", server.inventory, extravars={"marker": str(tmp_path / "m")}))
    finally:
        hosts.write_text(original)
    assert set(info.value.nodes) == {"node-1"}


def test_cancel_ends_the_run(server, playbooks: Path, tmp_path: Path) -> None:
    cancel = threading.Event()
    threading.Timer(2.0, cancel.set).start()
    run = PlaybookRun("exercise", server.inventory, extravars={"marker": str(tmp_path / "m"), "wait_s": 60})
    result = run_playbook(run, cancel=cancel, raise_on_failure=False)
    assert result.status == "canceled"


def test_bad_playbook_name_is_usage_error(server) -> None:
    with pytest.raises(UsageError):
        PlaybookRun("../etc/passwd", server.inventory)


def test_our_signal_handlers_survive_a_run(server, playbooks: Path, tmp_path: Path) -> None:
    import signal

    before = signal.getsignal(signal.SIGINT)
    run_playbook(PlaybookRun("exercise", server.inventory, extravars={"marker": str(tmp_path / "m")}))
    assert signal.getsignal(signal.SIGINT) is before


# ---------------------------------------------------------------------------------------------
# No secret on disk; no SSH master connection left behind; paths with spaces and quotes.
# ---------------------------------------------------------------------------------------------


def test_no_secret_from_the_environment_reaches_the_state_directory(
    server, playbooks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = {"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-planted-aws-secret", "ANSIBLE_BECOME_PASS": "planted-become-pw"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    run_playbook(PlaybookRun("exercise", server.inventory, extravars={"marker": str(tmp_path / "m")}))
    state = tmp_path / "state"
    files = [p for p in state.rglob("*") if p.is_file()]
    assert any(p.name == "command" for p in files), "the run left no artifacts to check"
    for path in files:
        data = path.read_bytes()
        for name, value in secrets.items():
            assert value.encode() not in data, f"{name} written to {path}"


def _ssh_connections_to(port: int) -> list[str]:
    """The SSH master processes (ControlMaster, `[mux]`) with a connection to `port`, each with its command line."""
    out = subprocess.run(["ss", "-tnpH", "state", "established", f"( dport = :{port} )"], capture_output=True,
                         text=True).stdout
    masters = []
    for line in out.splitlines():
        for pid in re.findall(r'"ssh",pid=(\d+)', line):
            try:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue  # gone meanwhile
            if "[mux]" in args or "ControlMaster" in args or "ControlPersist" in args:
                masters.append(f"{line.strip()} :: {args}")
    return masters


def test_no_ssh_master_outlives_a_run(server, playbooks: Path, tmp_path: Path) -> None:
    # A master from an earlier module's run, still talking to that module's (gone) sshd's child on a port the
    # kernel has since given to this server, is not this run's: only masters that appear with the run count.
    before = set(_ssh_connections_to(server.port))
    run_playbook(PlaybookRun("exercise", server.inventory, extravars={"marker": str(tmp_path / "m")}))
    deadline = time.monotonic() + 20  # well under ControlPersist (60 s)
    while set(_ssh_connections_to(server.port)) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert set(_ssh_connections_to(server.port)) - before == set(), "an ssh master connection outlived the run"


def test_an_inventory_under_a_path_with_a_space_and_a_quote(server, playbooks: Path, tmp_path: Path) -> None:
    inv = tmp_path / "it's a dir" / "inv"
    shutil.copytree(server.inventory, inv)
    result = run_playbook(PlaybookRun("exercise", inv, extravars={"marker": str(tmp_path / "m")}, check=True))
    assert result.status == "successful"
    assert result.hosts["node-1"].ok >= 1


# ---------------------------------------------------------------------------------------------
# playbooks/roles/ipplan (port.yml): only "not a recognized network service" means "create it".
# ---------------------------------------------------------------------------------------------

PORT_PLAYBOOK = """\
- name: Exercise the port tasks of the ipplan role.
  hosts: macfleet
  gather_facts: false
  tasks:
    - name: Run the ipplan role (and the probe it runs itself) on one port.
      ansible.builtin.include_role:
        name: "{{ ipplan_role }}"
      vars:
        ipplan_networksetup: "{{ stub }}"
        ipplan_ifconfig: "{{ stub }}"
        ipplan_mtu: 1500
        ipplan_bridge_services: []
        ipplan_interfaces:
          - {device: en3, hardware_port: Thunderbolt 2, service: Thunderbolt 2, address: 10.213.0.1,
             netmask: 255.255.255.252}
"""

STUB = """#!/bin/sh
echo "$*" >> {dir}/calls.log
case "$1" in
  -getinfo) cat {dir}/getinfo.out; exit "$(cat {dir}/getinfo.rc)" ;;
esac
exit 0
"""


@pytest.mark.parametrize(
    ("out", "rc", "creates"),
    [
        ("Thunderbolt 2 is not a recognized network service.\n** Error: The parameters were not valid.\n", 4, True),
        ("** Error: Command requires admin privileges.\n", 14, False),  # a failure that is not "missing"
    ],
    ids=["missing-service", "other-failure"],
)
def test_port_tasks_create_a_service_only_when_it_is_missing(
    server, playbooks: Path, tmp_path: Path, out: str, rc: int, creates: bool
) -> None:
    stub = tmp_path / "networksetup"
    stub.write_text(STUB.replace("{dir}", str(tmp_path)))
    stub.chmod(0o755)
    (tmp_path / "getinfo.out").write_text(out)
    (tmp_path / "getinfo.rc").write_text(str(rc))
    (playbooks / "port.yml").write_text(PORT_PLAYBOOK)
    role = REPO / "playbooks" / "roles" / "ipplan"
    run = PlaybookRun("port", server.inventory, extravars={"stub": str(stub), "ipplan_role": str(role)})
    result = run_playbook(run, raise_on_failure=False)
    log = tmp_path / "calls.log"
    calls = log.read_text() if log.exists() else ""
    assert ("-createnetworkservice" in calls) is creates, (calls, result.failed_tasks)
    assert (result.status == "successful") is creates


def test_a_cancelled_run_says_in_one_line_what_was_done() -> None:
    result = act_ansible.PlaybookResult(
        playbook="network", status="canceled", rc=254, hosts={}, failed_tasks=[],
        changes={"studio-1": ["Create the network service for Thunderbolt 2.", "Set the MTU of en3."]},
        unreachable={}, artifact_dir=None,
    )
    with pytest.raises(Cancelled) as info:
        act_ansible.raise_for(result)
    line = str(info.value)
    assert "\n" not in line
    assert "2 task(s) changed studio-1" in line and "were not run" in line


def test_the_cli_prints_that_line_and_exits_130(cli, example_inventory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from macfleet.flow import topology as flow_topology  # the command imports its flow when it runs

    def interrupted(*_a, **_k):
        raise Cancelled("playbook network cancelled: nothing had been changed; the rest was not run")

    monkeypatch.setattr(flow_topology, "check_topology", interrupted)
    result = cli("topology", "check", "-i", str(example_inventory))
    assert result.exit_code == 130
    assert "playbook network cancelled: nothing had been changed" in result.stderr
    assert "Traceback" not in result.output


def test_ansible_playbook_is_found_beside_the_python_running_macfleet_first():
    """A venv or pipx install whose bin is not on the caller's PATH still runs its own ansible-playbook."""
    import os
    import sys
    from pathlib import Path

    from macfleet.act.ansible import run_path

    ours = str(Path(sys.executable).parent)
    assert run_path("/usr/bin:/bin").split(os.pathsep) == [ours, "/usr/bin", "/bin"]
    assert run_path(f"/usr/bin:{ours}").split(os.pathsep) == [ours, "/usr/bin"]
    assert run_path("") == ours
