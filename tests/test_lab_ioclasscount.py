"""The lab's `ioclasscount` stand-in (lab/macos/rdma.py): Apple's output format (IOKitTools/ioclasscount.tproj/
ioclasscount.c at 04b1b654a84a3c15e1420ab7913cbf701fa74cbc), counts modelled on the exo stand-in's held runner
starts (lab/exo/runner.py Leak), and read by the product's parser as a Mac's would be. No lab, no root."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest

from macfleet.facts.ledger import parse_rdma_in_use
from macfleet.lab.exo import runner
from macfleet.lab.macos import common, rdma, system

PD, QP = "AppleThunderboltRDMAProtectionDomain", "AppleThunderboltRDMAQueuePair"
BOOTED_AT = 1764662400.25


def _node(tmp_path, rdma_on: bool = True) -> common.Node:
    tmp_path.mkdir(exist_ok=True)
    ports = [{"receptacle": r, "device": f"en{r + 1}", "max_speed_gbps": 120, "rdma_capable": True} for r in (1, 2, 3)]
    common.write_json(tmp_path / "lab.json", {"user": "macadmin", "nodes": {"m1": {"model": "studio"}},
                                              "models": {"studio": {"ports": ports}}})
    nd = tmp_path / "nodes" / "m1"
    (nd / "fs" / "Users" / "macadmin" / ".exo").mkdir(parents=True)
    common.write_json(nd / "persist.json", {"rdma": rdma_on})
    common.write_json(nd / "boot.json", {"power": "on", "booted_at": BOOTED_AT})
    return common.Lab(common.Path(tmp_path)).node("m1")


def _leak(node: common.Node) -> runner.Leak:
    from pathlib import Path

    return runner.Leak(Path(node.dir) / "fs" / "Users" / "macadmin" / ".exo" / runner.LEAK_FILE)


def _run(node: common.Node, args: list[str], monkeypatch, active: int = 2) -> tuple[int, str]:
    monkeypatch.setattr(rdma, "port_active", lambda n, p, links: p["receptacle"] <= active)
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    rc = rdma.ioclasscount(node, args)
    return rc, out.getvalue()


def test_the_exo_standins_leak_file_is_the_one_ioclasscount_reads() -> None:
    assert f".exo/{runner.LEAK_FILE}" == rdma.EXO_LEAK_FILE  # EXO_HOME's default, ~/.exo (exo's and the stand-in's)
    assert (rdma.PD_CLASS, rdma.QP_CLASS) == (PD, QP)


def test_apples_format_and_counts_of_held_starts_and_the_running_runner(tmp_path, monkeypatch) -> None:
    node = _node(tmp_path)
    boot = system.kern_boottime(node.boot) + "\n"  # as the exo stand-in reads it from `sysctl -n kern.boottime`
    assert _run(node, [PD, QP], monkeypatch) == (0, f"{PD} = 0, {QP} = 0\n")  # no exo yet: nothing held
    leak = _leak(node)
    for _ in range(8):
        leak.failed_start(boot)
    leak.holding(boot, os.getpid())  # a live process: the runner holding its share
    rc, out = _run(node, [PD, QP], monkeypatch)
    assert (rc, out) == (0, f"{PD} = 18, {QP} = 18\n")  # (8 held + 1 running) x 2 active devices
    got = parse_rdma_in_use(out)  # the product reads it as a Mac's
    assert (got.domains.count, got.queue_pairs.count) == (18, 18)
    assert _run(node, [QP], monkeypatch, active=3) == (0, f"{QP} = 27\n")
    unknown = f"{PD} = 18, IOPCIDevice = <no such class>, {QP} = 18\n"  # as printInstanceCount prints it
    assert _run(node, [PD, "IOPCIDevice", QP], monkeypatch)[1] == unknown
    assert _run(node, [], monkeypatch)[1] == f"{PD} = 18\n{QP} = 18\n"  # every class known, one a line, sorted
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leak.holding(boot, dead.pid)  # the runner is gone: its share is released
    assert _run(node, [PD, QP], monkeypatch)[1] == f"{PD} = 16, {QP} = 16\n"
    leak.holding(boot, None)
    for _ in range(4):
        leak.failed_start(boot)  # 12 held: a device gives no more than max_pd domains, max_qp - 1 queue pairs
    assert _run(node, [PD, QP], monkeypatch)[1] == f"{PD} = 22, {QP} = 20\n"


def test_a_reboot_releases_everything_and_rdma_off_counts_zero(tmp_path, monkeypatch) -> None:
    node = _node(tmp_path)
    boot = system.kern_boottime(node.boot)
    _leak(node).failed_start(boot)
    assert _run(node, [PD, QP], monkeypatch)[1] == f"{PD} = 2, {QP} = 2\n"
    node.update("boot", lambda d: d.__setitem__("booted_at", BOOTED_AT + 600))  # another boot
    assert _run(node, [PD, QP], monkeypatch)[1] == f"{PD} = 0, {QP} = 0\n"
    off = _node(tmp_path / "off", rdma_on=False)
    _leak(off).failed_start(system.kern_boottime(off.boot))
    assert _run(off, [PD, QP], monkeypatch)[1] == f"{PD} = 0, {QP} = 0\n"  # the classes known, none in use


@pytest.mark.parametrize("text", ["", "{", "[]", json.dumps({"boot": 1, "failed": "x"}), "\x00"])
def test_a_leak_file_it_cannot_read_counts_nothing_held(tmp_path, monkeypatch, text: str) -> None:
    node = _node(tmp_path)
    (_leak(node).path).write_text(text)
    assert _run(node, [PD, QP], monkeypatch) == (0, f"{PD} = 0, {QP} = 0\n")


def test_an_option_is_refused(tmp_path, monkeypatch) -> None:
    node = _node(tmp_path)
    assert _run(node, ["--track"], monkeypatch) == (1, "")
