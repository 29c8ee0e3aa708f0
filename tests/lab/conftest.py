"""Lab fixtures (marker `lab`; Linux + root only, skipped cleanly elsewhere).

Fixtures other engineers' lab tests can reuse:

  lab4   session-scoped 4-node Mac Studio M3 Ultra full mesh (default start state, exo included when the
         exo stand-in exists). Do not break it: restore anything you change; use `lab_small` to reboot.
  lab_small  session-scoped 2-node lab (boot 1 s, Thunderbolt shaped to 80 mbit, no exo) for destructive tests.
  make_lab   factory: make_lab(name, *up_args) -> Lab, torn down (and checked clean) at the end of the test.

Both shared labs are put back after every test that used them (`restore_default`: faults cleared, every node up
with SSH, exo answering where the lab has it; checked in-process first, so a test that left the lab as it found
it costs milliseconds), and `lab_small`'s inventory is put back as `lab up` wrote it when a module other than the
last one takes it. Anything else a test changes on a node (a sysctl, a file, a setting) it puts back itself.
Start a lab of your own (`make_lab`) only for a shape no shared lab has (a fresh Mac, pods, 3 or 4 nodes to break).

A `Lab` gives:
  .name, .inventory (Path of inventories/NAME), .nodes (names), .workdir
  .macfleet(*args, check=True, timeout=120) -> CompletedProcess  (`python -m macfleet ...`, in .workdir)
  .ssh(node, command, check=True, timeout=60) -> CompletedProcess  (`macfleet lab ssh --name NAME node command`)
  .sudo(node, command, check=True) -> CompletedProcess  (as root, the admin's password typed: sudo asks for it
         outside macfleet's scoped drop-in, as on a Mac)
  .allow_ansible()   on a `--fresh` lab: the Command Line Tools and the sudoers drop-in (done by `_up` unless
         trust=False), so playbooks other than bootstrap run there
  .up_output  what `macfleet lab up` printed
  .status() -> {node: {"name", "mesh", "state", "address", "faults"}}
  .fault(*args, clear=False) -> CompletedProcess  (`macfleet lab fault --name NAME ARGS… [--clear]`)
  .wait(lambda: cond, timeout, what)   poll with a deadline (never sleep)
  .wait_state(node, {"up"}, timeout)   polls .state(node) (in-process; .status() runs the CLI)
  .truth() -> lab.json (the plan: nodes, cables, addresses), read from the lab's state directory
Teardown runs `macfleet lab down` and asserts no namespace, link, process, state or inventory is left.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

STATE_ROOT = Path("/run/macfleet-lab")
PY = sys.executable
# Lets two checkouts run their lab tests on one machine at once without sharing a lab (e.g. "w1"); each of a
# run's workers (pytest-xdist: PYTEST_XDIST_WORKER gw0, gw1…) has labs of its own as well.
LAB_PREFIX = (os.environ.get("MACFLEET_TEST_LAB_PREFIX", "")
              + os.environ.get("PYTEST_XDIST_WORKER", "").replace("gw", "w"))
# The stand-ins wait as long as a Mac takes (lab/macos/latency.py) unless a run chooses a share of that here
# (`lab up --latency`); unset: as a Mac.
LAB_LATENCY = os.environ.get("MACFLEET_TEST_LAB_LATENCY")


def _lab_capable() -> str | None:
    if platform.system() != "Linux":
        return "the lab needs Linux"
    if os.geteuid() != 0:
        return "the lab needs root"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _lab_capable()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "lab" in item.keywords:
            item.add_marker(skip)


def run_macfleet(args: list[str], *, cwd: Path, check: bool = True, timeout: float = 180,
                 ) -> subprocess.CompletedProcess:
    p = subprocess.run([PY, "-m", "macfleet", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"macfleet {' '.join(args)} -> {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


@dataclass
class Lab:
    name: str
    workdir: Path
    nodes: list[str] = field(default_factory=list)
    up_output: str = ""  # what `macfleet lab up` printed (its hints are tested by running them)
    inventory_as_up: Path | None = None  # a copy of the inventory as `lab up` wrote it (shared labs)

    @property
    def inventory(self) -> Path:
        return self.workdir / "inventories" / self.name

    @property
    def password_file(self) -> Path:
        """The admin's password (0600), in the lab's state directory, never in its inventory."""
        return STATE_ROOT / self.name / "admin-password"

    def macfleet(self, *args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess:
        return run_macfleet(list(args), cwd=self.workdir, check=check, timeout=timeout)

    def ssh(self, node: str, command: str, *, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        """What `macfleet lab ssh` runs (the same ssh argv, strict host keys), without paying for the CLI's
        start-up on every call; test_lab_mesh.py checks `macfleet lab ssh` itself."""
        from macfleet.lab import state

        p = subprocess.run(state.ssh_argv(self.name, node, command), capture_output=True, text=True,
                           timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"{node}: {command!r} -> {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
        return p

    def sudo(self, node: str, command: str, *, check: bool = True, timeout: float = 60
             ) -> subprocess.CompletedProcess:
        """`command` as root through sudo with the admin's password typed (sudo -S), as a person at the Mac does:
        for what macfleet's scoped sudoers drop-in does not allow without a password."""
        import shlex

        from macfleet.lab import state

        password = self.password_file.read_text()
        argv = state.ssh_argv(self.name, node, f"sudo -S -p '' sh -c {shlex.quote(command)}")
        p = subprocess.run(argv, input=password, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"{node}: sudo {command!r} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
        return p

    def allow_ansible(self) -> None:
        """What bootstrap's first steps leave on a fresh node, so other playbooks can run there without the whole
        bootstrap: the Command Line Tools (through the softwareupdate stand-in) and macfleet's sudoers drop-in."""
        from macfleet.lab import prepared
        from macfleet.lab.macos import devtools

        drop_in = prepared.render("sudoers", "macfleet.sudoers.j2", sudoers_user=self.truth()["user"])
        script = (f"touch {devtools.PLACEHOLDER} && softwareupdate --install '{devtools.CLT_LABEL}' >/dev/null && "
                  f"cat > /etc/sudoers.d/{prepared.SUDOERS_FILE} <<'MACFLEET'\n{drop_in}MACFLEET\n"
                  f"chmod 440 /etc/sudoers.d/{prepared.SUDOERS_FILE}")
        for node in self.nodes:
            self.sudo(node, script)

    def fault(self, *args: str, clear: bool = False, check: bool = True) -> subprocess.CompletedProcess:
        """`macfleet lab fault --name NAME ARGS… [--clear]` (docs/lab-faults.md)."""
        return self.macfleet("lab", "fault", "--name", self.name, *args, *(["--clear"] if clear else []), check=check)

    def status(self) -> dict[str, dict]:
        p = self.macfleet("lab", "status", "--name", self.name, "--json")
        return {n["name"]: n for n in json.loads(p.stdout)["nodes"]}

    def truth(self) -> dict:
        return json.loads((STATE_ROOT / self.name / "lab.json").read_text())

    def node_state(self, node: str, which: str = "boot") -> dict:
        return json.loads((STATE_ROOT / self.name / "nodes" / node / f"{which}.json").read_text())

    @staticmethod
    def wait(cond: Callable[[], object], timeout: float, what: str, every: float = 0.1):
        """Poll `cond` until it holds or `timeout` passed: every `every` s, and never busier than two thirds of
        the time (a poll that costs a doctor pass or a probe round is followed by half its own time at rest), so
        that polling leaves the machine to the lab and to the other tests."""
        deadline = time.monotonic() + timeout
        while True:
            started = time.monotonic()
            value = cond()
            if value:
                return value
            now = time.monotonic()
            if now > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(max(every, (now - started) / 2))

    def state(self, node: str) -> str:
        """The node's state as `lab status` says it, read in-process: a poll costs a file read, not a CLI start
        (`status()` runs the CLI, tested in test_lab_mesh.py)."""
        from macfleet.lab import control

        return next(n["state"] for n in control.status(self.name) if n["name"] == node)

    def wait_state(self, node: str, states: set[str], timeout: float = 60) -> str:
        return self.wait(lambda: (s := self.state(node)) in states and s, timeout, f"{node} in {states}")

    def wait_ssh(self, node: str, timeout: float = 60) -> None:
        self.wait(lambda: self.ssh(node, "true", check=False, timeout=15).returncode == 0, timeout,
                  f"ssh to {node}", every=0.3)


def assert_nothing_left(name: str, workdir: Path) -> None:
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"mfl-{name}-" not in ns, f"namespaces left: {ns}"
    assert not (STATE_ROOT / name).exists(), "state directory left"
    assert not (workdir / "inventories" / name).exists(), "inventory left"
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"/run/macfleet-lab/{name}/" not in ps, "node processes left"
    assert f"macfleet.lab.supervisor {name}\n" not in ps, "supervisor left"


def _up(name: str, workdir: Path, *args: str, trust: bool = True) -> Lab:
    """A lab up. A `--fresh` one is a Mac out of the box: unless `trust=False` (the bootstrap tests' first
    contact), its host keys are recorded (`macfleet trust --yes`, an operator vouching for the lab) and it gets
    what bootstrap's first steps leave (`allow_ansible`), so a test of another playbook can run there."""
    name = LAB_PREFIX + name
    workdir.mkdir(parents=True, exist_ok=True)
    run_macfleet(["lab", "down", "--name", name], cwd=workdir, check=False)
    latency = ("--latency", LAB_LATENCY) if LAB_LATENCY is not None and "--latency" not in args else ()
    p = run_macfleet(["lab", "up", "--name", name, *args, *latency], cwd=workdir)
    if "--fresh" in args and trust:
        run_macfleet(["trust", "-i", str(workdir / "inventories" / name), "--yes", "--json"], cwd=workdir)
    lab = Lab(name, workdir, up_output=p.stdout)
    lab.nodes = list(lab.status())
    if "--fresh" in args and trust:
        lab.allow_ansible()
    return lab


def _down(lab: Lab) -> None:
    # bounded, not timed: how fast `lab down` is belongs in bench/, and a loaded machine is slower
    run_macfleet(["lab", "down", "--name", lab.name], cwd=lab.workdir, timeout=120)
    assert_nothing_left(lab.name, lab.workdir)


@pytest.fixture(scope="session")
def lab4(tmp_path_factory) -> Iterator[Lab]:
    if _lab_capable():
        pytest.skip(_lab_capable())
    lab = _up("t4", tmp_path_factory.mktemp("lab4"), "--nodes", "4")
    yield lab
    _down(lab)


@pytest.fixture(scope="session")
def lab_small(tmp_path_factory) -> Iterator[Lab]:
    """One per session (it was one per module: five start-ups): `restore_default` after each test and the
    inventory put back at each new module keep it as every module found it before."""
    if _lab_capable():
        pytest.skip(_lab_capable())
    import shutil

    lab = _up("t2", tmp_path_factory.mktemp("lab2"), "--nodes", "2", "--boot-seconds", "1", "--tb-rate", "80mbit",
              "--no-exo")
    lab.inventory_as_up = tmp_path_factory.mktemp("lab2-inventory") / lab.name
    shutil.copytree(lab.inventory, lab.inventory_as_up, symlinks=True)
    yield lab
    _down(lab)


def restore(lab: Lab) -> None:
    """Leave a shared lab as the next test expects it, whatever the last test did or where it failed: every
    active fault cleared (hang's and filevault-on's --clear press the power button), every node up with SSH."""
    for node, st in lab.status().items():
        for active in st["faults"]:
            kind, *args = active.split()
            if node == next((a for a in args if a in lab.nodes), node):  # a pair fault is cleared once
                lab.fault(kind, *[a for a in args if a in lab.nodes], clear=True, check=False)
    for node, st in lab.status().items():
        if st["state"] in ("off", "locked", "missing"):
            lab.macfleet("lab", "power", "--name", lab.name, node, "cycle", check=False)
    for node in lab.nodes:
        lab.wait_ssh(node, 60)


def _answers(address: str, port: int) -> bool:
    import socket

    try:
        socket.create_connection((address, port), timeout=5).close()
    except OSError:
        return False
    return True


def _exo_port(lab: Lab) -> int | None:
    """The port exo listens on in this lab, or None for a lab without exo (`--no-exo`, `--fresh`)."""
    from macfleet.lab.exo import standin

    return standin.API_PORT if lab.truth().get("exo") else None


def remove_model(lab: Lab, model: str) -> None:
    """A test's model gone from a shared lab as it found it: its instances stopped, its files removed from every
    node, and every node's exo no longer listing it as downloaded (exo rescans its models directory on its own
    cadence, stretched on a loaded host: the next test would find the model still there)."""
    from macfleet.constants import EXO_MODELS_DIR
    from macfleet.judge.rollout import model_dir_name

    lab.macfleet("exo", "stop", model, "-i", str(lab.inventory), check=False)
    folder = model_dir_name(model)  # where `rollout model` puts it, and stages it (node/preflight.py)
    for n in lab.nodes:
        lab.ssh(n, f"rm -rf {EXO_MODELS_DIR}/{folder} {EXO_MODELS_DIR}/.macfleet-staging/{folder}", check=False)
    port = _exo_port(lab)

    def listed_on(node: str) -> bool:
        from macfleet.errors import FactsParseError
        from macfleet.facts.exoapi import parse_cluster

        out = lab.ssh(node, f"curl -s -m 5 http://127.0.0.1:{port}/state", check=False).stdout
        try:
            return any(model in models for models in parse_cluster(out).models.values())
        except FactsParseError:
            return False  # exo not answering there: it rescans when it starts

    if port is not None:
        lab.wait(lambda: not any(listed_on(n) for n in lab.nodes), 120, f"every exo to forget {model}'s files")


def _in_default_state(lab: Lab) -> bool:
    """No fault active, every node up and answering on SSH's port (and exo's where the lab has exo): read
    in-process from the lab's state and by TCP connects, so that the check costs milliseconds."""
    from macfleet.lab import control

    nodes = control.status(lab.name)
    if any(n["faults"] or n["state"] != "up" for n in nodes):
        return False
    ports = [22, *([p] if (p := _exo_port(lab)) else [])]
    return all(_answers(n["address"], port) for n in nodes for port in ports)


def restore_default(lab: Lab) -> None:
    """A shared lab as the next test expects it: checked cheaply, restored (`restore`, then exo's LaunchDaemon
    loaded again where it does not answer) only when something is off."""
    if _in_default_state(lab):
        return
    restore(lab)
    port = _exo_port(lab)
    if port is None:
        return
    from macfleet.lab import prepared

    plist = f"/Library/LaunchDaemons/{prepared.EXO_LABEL}.plist"
    for node in lab.nodes:
        address = lab.status()[node]["address"]
        if not _answers(address, port):
            lab.ssh(node, f"launchctl print system/{prepared.EXO_LABEL} >/dev/null 2>&1 || "
                          f"sudo -n launchctl bootstrap system {plist}", check=False)
            lab.wait(lambda a=address: _answers(a, port), 60, f"exo on {node} after the restore", every=0.5)


_last_module_of: dict[str, str] = {}


def _inventory_as_up(lab: Lab) -> None:
    """Put back the inventory `lab up` wrote (a module may leave a policy, a setting or a generated file)."""
    import shutil

    if lab.inventory_as_up is None:
        return
    shutil.rmtree(lab.inventory)  # missing would mean something took the shared lab down: let that show
    shutil.copytree(lab.inventory_as_up, lab.inventory, symlinks=True)


@pytest.fixture(autouse=True)
def _small_lab_left_healthy(request) -> Iterator[None]:
    """After each test that used a shared lab (`lab4`, `lab_small`, directly or through another fixture), the
    lab as the next one expects it; `lab_small`'s inventory as `lab up` wrote it at each module's first use."""
    shared = [name for name in ("lab4", "lab_small") if name in request.fixturenames]
    if "lab_small" in shared:
        small = request.getfixturevalue("lab_small")
        module = request.node.module.__name__
        if _last_module_of.setdefault(small.name, module) != module:
            _last_module_of[small.name] = module
            _inventory_as_up(small)
    yield
    for name in shared:
        try:
            lab = request.getfixturevalue(name)
        except (Exception, pytest.skip.Exception):
            continue  # it never came up (skipped, or its own error is the test's): nothing to put back
        restore_default(lab)


@pytest.fixture
def make_lab(tmp_path) -> Iterator[Callable[..., Lab]]:
    made: list[Lab] = []

    def make(name: str, *args: str) -> Lab:
        lab = _up(name, tmp_path / name, *args)
        made.append(lab)
        return lab

    yield make
    for lab in made:
        _down(lab)
