"""The check catalogue is declared once (judge/checks): each check names probes that exist, depends on checks
judged before it, and is fixed by a playbook that exists; each probe is read by a check and runs the command it
files its answer under. A new check is one declaration there, and these hold for it without another edit."""

from __future__ import annotations

from pathlib import Path

import pytest

from macfleet.inventory.load import load_inventory
from macfleet.judge.checks.base import Scope
from macfleet.judge.checks.catalogue import BY_CODE, CHECK_CODES, CHECKS, PROBES, select_checks
from tests.conftest import EXAMPLE_INVENTORY

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.code)
def test_a_check_reads_declared_probes_and_depends_on_earlier_checks(check) -> None:
    assert set(check.reads) <= set(PROBES), set(check.reads) - set(PROBES)
    assert all(d in BY_CODE and BY_CODE[d].order < check.order for d in (*check.depends, *check.peers_depend))
    assert not check.peers_depend or check.mesh_wide  # only a check across the mesh looks at its peers
    assert check.fix is None or (PLAYBOOKS / f"{check.fix}.yml").is_file()


def test_codes_and_places_are_each_used_once() -> None:
    assert len(set(CHECK_CODES)) == len(CHECKS) and len({c.order for c in CHECKS}) == len(CHECKS)
    assert CHECK_CODES[0] == "reachable" and [c.code for c in select_checks(["disk"])] == ["reachable", "disk"]


def test_every_probe_is_read_by_a_check() -> None:
    read = {k for c in CHECKS for k in c.reads}
    assert set(PROBES) <= read, set(PROBES) - read


@pytest.mark.parametrize("key", sorted(PROBES))
def test_a_probe_files_its_answer_under_its_key(key: str) -> None:
    """A plain probe (one parser) runs one command, filed under the probe's key; a probe of several commands
    (its peers' pings, the preference domains) files each under its key and what it asks."""
    fleet = load_inventory(EXAMPLE_INVENTORY)
    mesh = fleet.meshes[0]
    mesh = mesh.model_copy(update={"settings": mesh.settings.model_copy(update={
        "llama": mesh.settings.llama.model_copy(update={"enabled": True})})})
    probe = PROBES[key]
    specs = probe.command(Scope(fleet=fleet, mesh=mesh, node=mesh.node_names[0]))
    assert specs
    if probe.parse is not None:
        assert [s.key for s in specs] == [key]
    else:
        assert all(s.key == key or s.key.startswith(f"{key}:") for s in specs)


def _facts_read(fn, seen: set | None = None) -> set[str]:
    """The NodeFacts fields `fn` and the catalogue's functions it calls name (`f.pmset`, `facts[n].exo_state`)."""
    import ast
    import inspect
    import textwrap

    from macfleet.judge.checks.base import NodeFacts

    seen = set() if seen is None else seen
    if fn in seen:
        return set()
    seen.add(fn)
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    out = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in NodeFacts.model_fields}
    for n in ast.walk(tree):
        called = fn.__globals__.get(n.id) if isinstance(n, ast.Name) else None
        if inspect.isfunction(called) and called.__module__.startswith("macfleet.judge.checks."):
            out |= _facts_read(called, seen)
    return out


# Not probes: whether the node answered at all, and the notes every fact may carry.
PASS_FIELDS = {"reachable", "unreachable_reason", "timed_out", "problems", "ages"}


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.code)
def test_a_check_reads_no_fact_its_declaration_does_not_name(check) -> None:
    """What a check's judgement reads (its own function and the catalogue's functions it calls) is filled by
    the probes it declares: a fact read from an undeclared probe would be "could not tell", or silently
    absent, wherever the check runs alone (the healer, reboot's verification, `doctor --only`)."""
    by_field = {f: key for key, p in PROBES.items() for f in p.fields}
    read = _facts_read(check.judge) - PASS_FIELDS
    assert read <= set(by_field), read - set(by_field)
    undeclared = {by_field[f] for f in read} - set(check.reads)
    assert not undeclared, f"{check.code} reads {sorted(undeclared)} but does not declare them"
