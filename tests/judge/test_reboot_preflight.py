"""The reboot preflight as a table: every refusal says why, before any node goes down."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from macfleet.facts.system import FdesetupFacts
from macfleet.inventory.model import MaintenanceWindow, Mesh, Node, RemediationSettings, Settings
from macfleet.judge.model import Refusal
from macfleet.judge.reboot import RebootPlan, preflight

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)  # Monday noon
OFF = FdesetupFacts(filevault_on=False, status_line="FileVault is Off.")
ON = FdesetupFacts(filevault_on=True, status_line="FileVault is On.")


def mesh(windows=()) -> Mesh:
    s = Settings(remediation=RemediationSettings(windows=list(windows)))
    return Mesh(name="m", nodes=(Node(name="a", mesh="m", address="a"), Node(name="b", mesh="m", address="b")),
                settings=s)


def run(fv, *, cred=None, holder=None, windows=(), respect=False):
    return preflight(mesh(windows), ["a", "b"], fv, credential=cred, lock_holder=holder, now=NOW, reason="test",
                     respect_windows=respect)


@pytest.mark.parametrize(
    ("fv", "kw", "refused_with"),
    [
        ({"a": OFF, "b": OFF}, {}, None),
        ({"a": OFF, "b": ON}, {}, None),  # a usable credential (None = no problem with it)
        ({"a": OFF, "b": ON}, {"cred": "no FileVault credential is stored"}, "FileVault is on on b"),
        ({"a": OFF, "b": "unreachable: no route"}, {}, "could not read FileVault on b"),
        ({"a": OFF}, {}, "could not read FileVault on b"),
        ({"a": OFF, "b": OFF}, {"holder": "rollout exo (pid 1)"}, "locked by rollout exo"),
        ({"a": OFF, "b": OFF}, {"respect": True, "windows": [MaintenanceWindow(days=["sat"])]},
         "outside the maintenance window"),
        ({"a": OFF, "b": OFF}, {"respect": False, "windows": [MaintenanceWindow(days=["sat"])]}, None),
    ],
)
def test_preflight(fv, kw, refused_with):
    got = run(fv, **kw)
    if refused_with is None:
        assert isinstance(got, RebootPlan)
        assert {n.node: n.method for n in got.nodes} == {n: "authrestart" if fv[n] is ON else "shutdown" for n in fv}
    else:
        assert isinstance(got, Refusal) and refused_with in got.reason and got.reason
