"""`exo status` per node when a read goes wrong: exo's API is asked through a stand-in object (the flow's
`api_on` replaced), so a command that gives no answer, or a release that cannot be parsed, is the node's
problem text, never a traceback."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from macfleet.collect.commands import exo_specs
from macfleet.collect.ssh import CommandTimeout, Raw
from macfleet.flow import exo as flow
from macfleet.inventory.model import Fleet, Settings
from macfleet.render.exo import render_status
from tests.judge.builders import mesh

STATE = json.dumps({"topology": {"nodes": ["a" * 32], "connections": {}}, "instances": {}, "runners": {}})


class Session:
    def __init__(self, release):
        self.release = release

    def run(self, spec, **_):
        if isinstance(self.release, Exception):
            raise self.release
        return Raw(stdout=self.release, stderr="", rc=0, took_s=0.1)


class Api:
    def __init__(self, release):
        self.session = Session(release)

    def json(self, method: str, path: str, **_):
        return json.dumps("a" * 32) if path == "/node_id" else STATE


def _status(monkeypatch: pytest.MonkeyPatch, release):
    m = mesh("s1")
    fleet = Fleet(root=Path("/nonexistent"), meshes=(m,), settings=Settings())

    @contextlib.contextmanager
    def api_on(fleet, m, node=None):
        yield Api(release)

    monkeypatch.setattr(flow, "api_on", api_on)
    return flow.status(fleet)


def test_a_release_read_that_times_out_is_the_nodes_problem_not_a_traceback(monkeypatch) -> None:
    spec = next(s for s in exo_specs() if s.key == "exo-release")
    report = _status(monkeypatch, CommandTimeout(spec, 6))
    [n] = report.nodes
    assert n.running and n.release is None and n.reachable
    assert "exo release could not be read" in n.problem and "gave no answer within 6 s" in n.problem
    console = Console(width=200, record=True, color_system=None, file=io.StringIO())
    console.print(render_status(report))
    shown = " ".join(console.export_text().split())
    assert "yes; its exo release could not be read" in shown


def test_a_release_that_cannot_be_parsed_says_why_it_is_unknown(monkeypatch) -> None:
    [n] = _status(monkeypatch, "").nodes
    assert n.running and n.release is None and n.problem.startswith("its exo release could not be read: ")
