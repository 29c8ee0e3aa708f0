"""The ansible-runner wrapper against a real OpenSSH server: stats, changes, check mode, failures,
unreachable hosts and cancellation, all from real ansible-playbook runs."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from macfleet.act import ansible as act_ansible
from macfleet.act.ansible import PlaybookRun, run_playbook
from macfleet.errors import PlaybookFailed, UnreachableError, UsageError
from tests import sshd

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


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = sshd.start(tmp_path_factory.mktemp("sshd"), nodes=("node-1",))
    yield s
    s.stop()


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
