"""Hypothesis: random text and mutated real captures give facts or FactsParseError, nothing else."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from macfleet.errors import FactsParseError
from macfleet.facts.registry import KINDS, detect_kind, parse

CAP = Path(__file__).resolve().parent.parent / "fixtures" / "captures"
SAMPLES: dict[str, list[str]] = {}
for p in sorted(CAP.glob("*/*")):
    if p.is_file() and not p.name.endswith(".expected.json"):
        SAMPLES.setdefault(p.parent.name, []).append(p.read_text(encoding="utf-8"))
SAMPLES.setdefault("nvram", ["rdma-enable\t1\n"])
ALL = [t for ts in SAMPLES.values() for t in ts]

FAST = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check(kind: str, text: str) -> None:
    with contextlib.suppress(FactsParseError):
        parse(kind, text)


@st.composite
def mutated(draw, kind: str) -> str:
    text = draw(st.sampled_from(SAMPLES[kind] + ALL[::5]))
    lines = text.split("\n")
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["cut", "drop", "dup", "swap", "insert", "chars", "tabs"]))
        if not lines:
            break
        i = draw(st.integers(0, max(0, len(lines) - 1)))
        if op == "cut":
            lines = [*lines[:i], lines[i][:draw(st.integers(0, len(lines[i])))]]
        elif op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "insert":
            lines.insert(i, draw(st.text(max_size=40)))
        elif op == "chars":
            s = lines[i]
            k = draw(st.integers(0, len(s)))
            lines[i] = s[:k] + draw(st.text(alphabet=':{}[]<>"(),=\t %0x-', max_size=5)) + s[k:]
        elif op == "tabs":
            lines[i] = lines[i].replace("  ", "\t")
    return "\n".join(lines)


@pytest.mark.parametrize("kind", sorted(KINDS))
@FAST
@given(text=st.text(max_size=300))
def test_random_text(kind: str, text: str) -> None:
    _check(kind, text)


@pytest.mark.parametrize("kind", sorted(KINDS))
@FAST
@given(data=st.data())
def test_mutated_captures(kind: str, data) -> None:
    _check(kind, data.draw(mutated(kind)))


@FAST
@given(text=st.text(max_size=300))
def test_detect_never_raises(text: str) -> None:
    assert detect_kind(text) in (None, *KINDS)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8)
    | st.sampled_from(["thunderboltusb4_bus_1", "receptacle_connected", "80 Gb/s", "Up to 120 Gb/s", "2"]),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(
        st.sampled_from(["_name", "_items", "receptacle_1_tag", "receptacle_id_key", "receptacle_status_key",
                         "current_speed_key", "domain_uuid_key", "services_title", "protocol_id_key", "mode_key",
                         "switch_uid_key", "device_name_key", "number_processors", "physical_memory"]),
        children, max_size=6),
    max_leaves=25,
)


@FAST
@given(tree=_json, top=st.sampled_from(["SPThunderboltDataType", "SPHardwareDataType"]))
def test_json_shapes(tree, top: str) -> None:
    import json

    text = json.dumps({top: tree})
    for kind in ("thunderbolt", "hardware"):
        _check(kind, text)
