"""exo's `/state` and `/instance/previews` with a wrong shape anywhere (a list where exo sends an object, a
number where it sends a list...): the parsers give facts or FactsParseError, never another exception. Every
value of a well-formed answer is replaced in turn by each wrong shape."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable, Iterator

import pytest

from macfleet.errors import FactsParseError
from macfleet.facts.discovery import parse_coordinators
from macfleet.facts.exo import parse_exo_state
from macfleet.facts.exoapi import parse_cluster, parse_previews
from tests.judge.test_placement import MODEL, A, B, _instance

WRONG: list[object] = [[], {}, 5, "x", None, True, [1, "y"], {"k": 1}]

STATE = {
    "topology": {"nodes": [A, B], "connections": {A: {B: [{"sourceRdmaIface": "rdma_en2"}]}}},
    "nodeIdentities": {A: {"friendlyName": "studio-1", "osBuildVersion": "25G5"}, B: {"friendlyName": "studio-2"}},
    "downloads": {A: [{"DownloadCompleted": {"shardMetadata": {"PipelineShardMetadata": {
        "modelCard": {"modelId": MODEL}}}}}]},
    "nodeNetwork": {A: {"interfaces": [{"ipAddress": "10.0.0.11"}]}},
    "instances": {"i-1": _instance("MlxJaccl", [A, B])},
    "runners": {"r-a": {"RunnerReady": {}}, "r-b": {"RunnerFailed": {"errorMessage": "[jaccl] boom"}}},
    "nodeThunderboltBridge": {A: {"enabled": False}},
    "nodeRdmaCtl": {A: {"enabled": True}},
}
PREVIEWS = {"previews": [{"model_id": MODEL, "sharding": "Pipeline", "instance_meta": "MlxJaccl",
                          "instance": _instance("MlxJaccl", [A, B]), "memory_delta_by_node": {A: 10, B: 10},
                          "error": None}]}


def _paths(value: object, path: tuple = ()) -> Iterator[tuple]:
    yield path
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        yield from _paths(child, (*path, key))


def _with(doc: object, path: tuple, value: object) -> str:
    if not path:
        return json.dumps(value)
    out = copy.deepcopy(doc)
    here = out
    for key in path[:-1]:
        here = here[key]
    here[path[-1]] = value
    return json.dumps(out)


def _facts_or_parse_error(parser: Callable[[str], object], body: str) -> None:
    with contextlib.suppress(FactsParseError):
        parser(body)


@pytest.mark.parametrize(("parser", "doc"), [(parse_cluster, STATE), (parse_exo_state, STATE),
                                             (parse_coordinators, STATE), (parse_previews, PREVIEWS)],
                         ids=["cluster", "exo_state", "coordinators", "previews"])
def test_answers_of_any_shape_are_facts_or_a_parse_error(parser: Callable[[str], object], doc: object) -> None:
    for path in _paths(doc):
        for wrong in WRONG:
            try:
                _facts_or_parse_error(parser, _with(doc, path, wrong))
            except Exception as e:
                raise AssertionError(f"{parser.__name__}: {path} = {wrong!r}: {e!r}") from e


@pytest.mark.parametrize(("path", "wrong"), [
    (("downloads",), []), (("instances",), []), (("nodeNetwork", A, "interfaces"), 5),
    (("instances", "i-1", "MlxJaccl" + "Instance", "shardAssignments", "nodeToRunner", A), ["r-a"]),
])
def test_the_shapes_seen_in_review_are_read_as_nothing_there(path: tuple, wrong: object) -> None:
    cluster = parse_cluster(_with(STATE, path, wrong))
    assert cluster.nodes == [A, B]
    memory = parse_previews(_with(PREVIEWS, ("previews", 0, "memory_delta_by_node"), []))
    assert memory[0].memory == {} and memory[0].nodes == [A, B]


def test_doctor_reads_one_state_once_and_reduces_it_three_ways(monkeypatch) -> None:
    """/state can be megabytes on a large mesh: the exo-state probe loads it once (facts/exo.py `load_state`)
    for the health facts, the coordinators and the cluster."""
    from macfleet.collect.gather import Gathered
    from macfleet.collect.ssh import Raw
    from macfleet.flow.checks import NodeAnswers
    from macfleet.judge.checks.catalogue import PROBES

    body = json.dumps(STATE)
    loaded: list[str] = []
    real = json.loads
    monkeypatch.setattr(json, "loads", lambda s, *a, **k: (loaded.append(s), real(s, *a, **k))[1])
    answers = NodeAnswers(Gathered(outputs={"n": {"exo-state": Raw(stdout=body, stderr="", rc=0, took_s=0.1)}}), "n")
    facts = PROBES["exo-state"].facts(answers)
    assert loaded.count(body) == 1 and not answers.problems
    assert facts["exo_state"] == parse_exo_state(body) and facts["exo_cluster"] == parse_cluster(body)
    assert facts["exo_coordinators"] == parse_coordinators(body)
