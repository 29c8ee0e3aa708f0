"""`macfleet rollout exo --build-on NODE` end to end on the shared 4-node lab: a source tree (`lab exo-build
--source`, whose build.sh stands in for exo's npm + uv build) sent to a builder, built there at the release's
final path, its manifest computed there, fanned out from the builder over Thunderbolt, switched, healthy; then
builds that fail (exit 3, a timeout, a release that needs something only the builder has): exit 1, nothing
switched, nothing left but the builder's log. Every test leaves lab4 on its original release, healthy.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.lab.conftest import Lab
from tests.lab.test_rollout_lab import _healthy_on, _status

pytestmark = pytest.mark.lab(minutes=1.5)

BUILDER_INDEX = 1  # not the first node: the seed is the builder, not whoever comes first


@pytest.fixture
def controller(monkeypatch, tmp_path, cluster_state) -> Path:
    """The controller's state: the user's own under tmp, and the test's shared cluster state (lock, history)."""
    monkeypatch.setenv("MACFLEET_STATE_DIR", str(tmp_path / "state"))
    return cluster_state


def _inventory(lab: Lab, where: Path, **build: object) -> Path:
    """A copy of the lab's inventory whose `macfleet_exo.build` is `build`."""
    inv = where
    if inv.exists():
        shutil.rmtree(inv)
    shutil.copytree(lab.inventory, inv)
    gv = inv / "group_vars" / "all" / "macfleet.yml"
    data = yaml.safe_load(gv.read_text())
    data["macfleet_exo"]["build"] = build
    gv.write_text(yaml.safe_dump(data))
    return inv


def _releases(lab: Lab, node: str) -> list[str]:
    return lab.ssh(node, "ls -a /opt/exo/releases").stdout.split()


def test_built_on_the_builder_fanned_out_switched(lab4: Lab, controller: Path, tmp_path: Path) -> None:
    before = _status(lab4)["current"]
    builder = lab4.nodes[BUILDER_INDEX]
    others = [n for n in lab4.nodes if n != builder]
    src = tmp_path / "src"
    # an exo that declares zenoh's ports (exo since 09f9ea313), where the lab's own release declares none
    lab4.macfleet("lab", "exo-build", "--source", "--zenoh", "--version", "1.0.90", "--out", str(src))
    inv = _inventory(lab4, tmp_path / "inv", node=builder, command="sh ./build.sh", timeout_s=120)

    # --check: what it would build where; nothing anywhere changes (no lock, no directory on the builder)
    plan = json.loads(lab4.macfleet("rollout", "exo", "--source", str(src), "-i", str(inv), "--check",
                                    "--json").stdout)
    name = plan["release"]
    assert name.startswith("1.0.90-") and plan["build"]["node"] == builder
    assert plan["build"]["directory"] == f"/opt/exo/releases/{name}" and plan["build"]["command"] == "sh ./build.sh"
    assert plan["stage_on"] == others and plan["switch_from"] == before
    assert name not in _releases(lab4, builder) and not list(controller.glob("*/lock.json"))

    p = lab4.macfleet("rollout", "exo", "--source", str(src), "-i", str(inv), "--json", timeout=300)
    report = json.loads(p.stdout)
    assert report["result"] == "switched" and report["release"] == name, report
    assert report["built_on"] == builder and report["staged"] == others
    assert f"from {builder} over Thunderbolt" in p.stderr
    _healthy_on(lab4, name)
    peer = others[-1]
    # the packet filter follows the release: its peer ports let in from the mesh only, on every node, before the
    # switch
    assert "exo's peer ports differ" in p.stderr
    assert json.loads(lab4.ssh(peer, f"cat /opt/exo/releases/{name}/macfleet-ports.json").stdout)["tcp"] == [52414]
    for n in lab4.nodes:
        rules = lab4.ssh(n, "sudo -n pfctl -a com.apple/macfleet -s rules").stdout
        assert "52414" in rules and "udp" in rules and "52413" in rules, (n, rules)
    # built at its final path (the #! line names it), links carried and verified, landed with its manifest
    assert lab4.ssh(peer, f"head -1 /opt/exo/releases/{name}/.venv/bin/exo").stdout.strip() == \
        f"#!/opt/exo/releases/{name}/.venv/bin/python"
    assert lab4.ssh(peer, f"readlink /opt/exo/releases/{name}/bin/exo").stdout.strip() == "../.venv/bin/exo"
    listing = _releases(lab4, peer)
    assert f"{name}.manifest.json" in listing and not [x for x in listing if x.startswith(".staging-")]
    assert not [x for x in _releases(lab4, builder) if x.startswith(".build-")]  # its log goes when it succeeds

    # the same source again: nothing to do (and, once rolled back, the release built is reused, not rebuilt)
    again = json.loads(lab4.macfleet("rollout", "exo", "--source", str(src), "-i", str(inv), "--json").stdout)
    assert again["result"] == "already" and again["release"] == name
    back = lab4.macfleet("rollout", "rollback", "-i", str(inv), "--json", timeout=300)
    assert json.loads(back.stdout)["release"] == before
    _healthy_on(lab4, before)
    assert "52414" not in lab4.ssh(peer, "sudo -n pfctl -a com.apple/macfleet -s rules").stdout  # back to the API
    plan = json.loads(lab4.macfleet("rollout", "exo", "--source", str(src), "-i", str(inv), "--check",
                                    "--json").stdout)
    assert plan["build"] is None and plan["reuse_from"] == builder and plan["stage_on"] == []
    for n in lab4.nodes:
        lab4.ssh(n, f"rm -rf /opt/exo/releases/{name} /opt/exo/releases/{name}.manifest.json")


def test_failed_builds_exit_1_nothing_switched(lab4: Lab, controller: Path, tmp_path: Path) -> None:
    before = _status(lab4)["current"]
    builder = lab4.nodes[BUILDER_INDEX]
    bad = tmp_path / "bad"
    lab4.macfleet("lab", "exo-build", "--source", "--fail-build", "--version", "1.0.91", "--out", str(bad))
    inv = _inventory(lab4, tmp_path / "inv", node=builder, command="sh ./build.sh", timeout_s=120)
    try:
        # the build exits 3: its tail in the message, its directory gone, its log kept on the builder
        p = lab4.macfleet("rollout", "exo", "--source", str(bad), "-i", str(inv), "--json", check=False,
                          timeout=300)
        assert p.returncode == 1, p.stderr
        err = json.loads(p.stdout)["error"]
        assert err["code"] == "rollout_failed" and f"on {builder} exited 3; nothing was switched" in err["message"]
        assert "fails on purpose" in err["message"]
        name = err["details"]["release"]
        listing = _releases(lab4, builder)
        assert name not in listing and f".build-{name}.log" in listing

        # a build past its timeout is killed on the builder, with everything it started
        src = tmp_path / "src"
        lab4.macfleet("lab", "exo-build", "--source", "--version", "1.0.92", "--out", str(src))
        slow = _inventory(lab4, tmp_path / "slow", node=builder, command="echo compiling; sleep 347", timeout_s=2)
        p = lab4.macfleet("rollout", "exo", "--source", str(src), "-i", str(slow), "--json", check=False,
                          timeout=300)
        assert p.returncode == 1, p.stderr
        assert "timed out after 2 s" in json.loads(p.stdout)["error"]["message"]
        assert "sleep 347" not in lab4.ssh(builder, "ps -eo args").stdout

        # a venv pointing at an interpreter only the builder has (uv's own directory in its home): refused
        local = ('mkdir -p "$HOME/.local/uvpy" && ln -sfn /Library/Developer/CommandLineTools/usr/bin/python3 '
                 '"$HOME/.local/uvpy/python3" && sh ./build.sh && ln -sfn "$HOME/.local/uvpy/python3" .venv/bin/python')
        mine = _inventory(lab4, tmp_path / "mine", node=builder, command=local, timeout_s=120)
        p = lab4.macfleet("rollout", "exo", "--source", str(src), "-i", str(mine), "--json", check=False,
                          timeout=300)
        assert p.returncode == 1, p.stderr
        msg = json.loads(p.stdout)["error"]["message"]
        assert "is not self-contained: .venv/bin/python -> /Users/" in msg and "UV_PYTHON_INSTALL_DIR" in msg
        assert all(n in msg for n in lab4.nodes if n != builder)
        assert not [x for x in _releases(lab4, builder) if x.startswith("1.0.92-")]
        st = _status(lab4)
        assert st["current"] == before and all(n["running"] for n in st["nodes"].values()), st
    finally:
        lab4.ssh(builder, "rm -rf ~/.local/uvpy /opt/exo/releases/.build-*")


def test_a_builder_without_xcode_builds_nothing_and_says_how(lab4: Lab, controller: Path, tmp_path: Path) -> None:
    """A checkout shaped as exo's since 4466cd532 (MLX an extra, built from a git source) on a builder with the
    Command Line Tools only, as every lab Mac (and a Mac out of the box): refused before the build command runs,
    with the way to get Xcode's Metal toolchain; nothing switched, no directory left."""
    before = _status(lab4)["current"]
    builder = lab4.nodes[BUILDER_INDEX]
    src = tmp_path / "src"
    lab4.macfleet("lab", "exo-build", "--source", "--builds-mlx", "--version", "1.0.93", "--out", str(src))
    inv = _inventory(lab4, tmp_path / "inv", node=builder, command="sh ./build.sh", timeout_s=120)
    p = lab4.macfleet("rollout", "exo", "--source", str(src), "-i", str(inv), "--json", check=False, timeout=300)
    assert p.returncode == 1, p.stderr
    err = json.loads(p.stdout)["error"]
    assert err["code"] == "rollout_failed" and f"{builder} cannot build" in err["message"], err
    assert "/Library/Developer/CommandLineTools" in err["message"]
    assert "xcode-select --switch /Applications/Xcode.app/Contents/Developer" in err["message"]
    assert "xcodebuild -downloadComponent MetalToolchain" in err["message"]
    assert not [x for x in _releases(lab4, builder) if x.startswith("1.0.93-")]
    assert lab4.ssh(builder, 'xcrun -f metal', check=False).returncode == 72  # the stand-in: no Xcode here
    st = _status(lab4)
    assert st["current"] == before and all(n["running"] for n in st["nodes"].values()), st


def test_a_build_past_the_lock_ttl_keeps_its_lock(lab4: Lab, controller: Path, tmp_path: Path) -> None:
    """hostile.md row 7: a build running longer than the lock's TTL (its `created` moved back 61 min stands in
    for the time) lost its lock to a second identical rollout, which removed the live build. The holder lives:
    the second one refuses, naming it, and the build runs on."""
    import signal
    import subprocess

    from tests.lab.conftest import PY
    from tests.lab.test_rollout_lab import _lock_file

    builder = lab4.nodes[BUILDER_INDEX]
    src = tmp_path / "src"
    lab4.macfleet("lab", "exo-build", "--source", "--version", "1.0.94", "--out", str(src))
    inv = _inventory(lab4, tmp_path / "inv", node=builder, command="echo compiling; sleep 417", timeout_s=600)
    argv = [PY, "-m", "macfleet", "rollout", "exo", "--source", str(src), "-i", str(inv)]
    first = subprocess.Popen(argv, cwd=lab4.workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        lab4.wait(lambda: "sleep 417" in lab4.ssh(builder, "ps -eo args").stdout, 120, "the build to run")
        lock = _lock_file(controller)
        data = json.loads(lock.read_text())
        assert data["phase"]["action"] == "build" and data["pid"] == first.pid
        data["created"] = data["refreshed"] = "2026-01-01T00:00:00+00:00"
        lock.write_text(json.dumps(data))
        second = lab4.macfleet("rollout", "exo", "--source", str(src), "-i", str(inv), check=False, timeout=120)
        assert second.returncode == 1, second.stderr
        assert f"locked by rollout exo (pid {first.pid}" in second.stderr
        assert "removing the unfinished build" not in second.stderr
        assert "sleep 417" in lab4.ssh(builder, "ps -eo args").stdout  # the build runs on
        assert first.poll() is None
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
        pids = lab4.ssh(builder, "pgrep -f 'sleep 417'", check=False).stdout.split()
        if pids:
            lab4.ssh(builder, f"kill {' '.join(p for p in pids if p.isdigit())}", check=False)
        lab4.ssh(builder, "rm -rf /opt/exo/releases/1.0.94-* /opt/exo/releases/.build-*", check=False)
