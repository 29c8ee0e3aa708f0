"""doctor's log signatures, judged on the held-out set of real exo/MLX outputs (tests/fixtures/exo-log), on the
message texts of MLX's own JACCL source, and on made-up lines only to prove that no JACCL error is silent."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from macfleet.facts.exo import log_since_start
from macfleet.judge.exolog import SIGNATURES, UNRECOGNISED, is_jaccl_error, match_signature, shown
from tests.conftest import assert_held_out_set
from tests.judge.test_health import FIXTURES, IDS, NODES, exo_facts, verdict

LOGS = FIXTURES / "exo-log"
EXPECTED: dict[str, list[str]] = json.loads((LOGS / "signatures.json").read_text(encoding="utf-8"))


def codes(lines: list[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        if (s := match_signature(line)) is not None and s.code not in out:
            out.append(s.code)
    return out


def test_every_real_output_kept_is_judged_and_cited() -> None:
    assert_held_out_set(LOGS, EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_outputs_are_named_by_their_signatures(name: str) -> None:
    lines = log_since_start((LOGS / name).read_text(encoding="utf-8"))
    assert codes(lines) == EXPECTED[name]
    no_runner_on_s1 = {f"r-{IDS[n]}": {"RunnerReady": {}} for n in ("s2", "s3")}  # exo gave up on it
    facts = exo_facts({n: NODES for n in NODES}, runners=no_runner_on_s1)
    facts["s1"] = facts["s1"].model_copy(update={"exo_log": lines})
    findings = verdict("exo-log", facts, "s1")
    assert len(findings) == len(EXPECTED[name])
    by_code = {s.code: s for s in (*SIGNATURES, UNRECOGNISED)}
    for f, code in zip(findings, EXPECTED[name], strict=True):
        assert f.fix == by_code[code].fix
    ready = exo_facts({n: NODES for n in NODES})  # its runner is ready again: the errors are history
    assert verdict("exo-log", {**ready, "s1": ready["s1"].model_copy(update={"exo_log": lines})}, "s1") == []


# Message texts as MLX's JACCL source prints them (mlx 846d176 mlx/distributed/jaccl/lib/jaccl/, and v0.31.2 for
# the older queue-pair text), for the forms no tracker shows verbatim.
SOURCE_FORMS = {
    "[jaccl] Changing queue pair to RTR failed with errno 60": "rtr-errno-60",
    "[jaccl] Changing queue pair to RTR failed with errno 16": "rtr-errno-16",
    "[jaccl] Changing queue pair to INIT failed with errno 22": "qp-state",
    "[jaccl] Changing queue pair to RTS failed with errno 5": "qp-state",
    "[jaccl] Creating the queue pair failed with 'Device or resource busy (16)'.": "qp-exhausted",
    "[jaccl] Creating the queue pair failed with 'Cannot allocate memory (12)'.": "qp-create",
    "[jaccl] Couldn't create queue pair": "qp-create",
    "[jaccl] Send failed with errno=32": "side-channel",
    "[jaccl] Recv failed with error code 12": "rdma-transfer",
    "[jaccl] Could not find device rdma_en4 (0 available)": "no-device",
    "[jaccl] Could not open device rdma_en2": "no-device",
    "[jaccl] Couldn't allocate protection domain": "no-pd",
    "[jaccl] Couldn't create completion queue": "unrecognised",
    "[jaccl] Register memory region failed": "unrecognised",
    "[jaccl] The JACCL mesh supports up to 8 peers but 9 were provided.": "unrecognised",
}


@pytest.mark.parametrize("line, code", SOURCE_FORMS.items())
def test_jaccl_source_messages(line: str, code: str) -> None:
    exo_line = f"[ 2026-04-24 09:03:32.966 | WARNING  | x ] Runner r crashed with critical exception {line}"
    for text in (line, exo_line, f"RuntimeError: {line}"):
        sig = match_signature(text)
        assert sig is not None and sig.code == code


def test_an_unknown_jaccl_line_is_a_finding_quoted_and_escaped() -> None:
    weird = "RuntimeError: [jaccl] Something new \x1b[31mred\x1b[0m happened"
    facts = exo_facts({n: NODES for n in NODES}, runners={f"r-{IDS['s2']}": {"RunnerReady": {}}})
    facts["s1"] = facts["s1"].model_copy(update={"exo_log": ["Starting EXO", weird, weird]})
    [f] = verdict("exo-log", facts, "s1")
    assert f.message.startswith("exo's log on s1 since its last start: unrecognised JACCL error: RuntimeError: "
                                "[jaccl] Something new \\x1b[31mred\\x1b[0m happened (2 lines)")
    assert "\x1b" not in f.message and "\x1b" not in f.evidence


def test_unknown_lines_are_named_one_by_one_up_to_three() -> None:
    lines = [f"[jaccl] new failure number {i}" for i in range(5)]
    facts = exo_facts({n: NODES for n in NODES}, runners={f"r-{IDS['s2']}": {"RunnerReady": {}}})
    facts["s1"] = facts["s1"].model_copy(update={"exo_log": lines})
    found = verdict("exo-log", facts, "s1")
    assert [f.message.split(": ", 2)[2].split(" (")[0] for f in found] == lines[:3]
    assert "2 more unrecognised JACCL lines" in found[0].message


@pytest.mark.parametrize("line", [
    "[jaccl] Connection attempt 1 waiting 1000 ms",  # JACCL's progress line (mlx rdma.cpp:355)
    "[ 05:21:08.1972AM | INFO    ] rank 0 MLX_IBV_DEVICES: ./hosts_c8_0.json with devices: [[null, \"rdma_en4\"]]",
    "[ 05:21:08.1972AM | INFO    ] rank 0 MLX_JACCL_COORDINATOR: 0.0.0.0:54364",
    "  libjaccl.dylib    jaccl::MeshGroup::allocate_buffers()",
])
def test_lines_that_are_not_errors(line: str) -> None:
    assert match_signature(line) is None


@pytest.mark.parametrize("line", [
    "libibverbs: Warning: couldn't load driver 'rdma'",
    "ibv_open_device failed for rdma_en3",
    "Error: jaccl::MeshGroup::initialize threw",
])
def test_ibverbs_error_lines_are_findings_even_without_the_tag(line: str) -> None:
    assert match_signature(line) is UNRECOGNISED


@given(st.text(max_size=80), st.text(max_size=80))
def test_no_jaccl_tagged_line_is_silent(before: str, after: str) -> None:
    line = f"{before}[jaccl]{after}"
    if is_jaccl_error(line):
        assert match_signature(line) is not None
    else:  # only JACCL's own progress line is not an error
        assert "Connection attempt" in line


@given(st.text(max_size=200))
def test_any_text_is_judged_without_error_and_shown_safely(line: str) -> None:
    match_signature(line)
    out = shown(line)
    assert len(out) <= 200 and all(c.isprintable() for c in out)
