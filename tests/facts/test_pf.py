"""pf's rule listing read as pfctl prints it: the held-out set of real listings (tests/fixtures/pf-rules), then
generated rules in pfctl's printed grammar (pf.conf(5); pfctl_parser.c print_rule): a valid rule is never a
parse error, and what bears on exo's ports is read right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from macfleet.errors import FactsParseError
from macfleet.facts.pf import parse_pf_rules, tokens
from macfleet.judge.pf import exposure
from tests.conftest import assert_held_out_set

LISTINGS = Path(__file__).resolve().parent.parent / "fixtures" / "pf-rules"
EXPECTED: dict[str, dict] = json.loads((LISTINGS / "expected.json").read_text(encoding="utf-8"))


def test_every_listing_kept_is_judged_and_cited() -> None:
    assert_held_out_set(LISTINGS, EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_listings(name: str) -> None:
    text = (LISTINGS / name).read_text(encoding="utf-8")
    want = EXPECTED[name]
    if "error" in want:
        with pytest.raises(FactsParseError) as e:
            parse_pf_rules(text)
        assert e.value.found == want["error"]
        return
    facts = parse_pf_rules(text)
    assert (len(facts.rules), facts.other_lines) == (want["rules"], want["other_lines"])
    assert sum(len(r.unknown) for r in facts.rules) == want["unknown_words"] == 0
    assert exposure(facts, 52415, {"lo0", "en2", "en3"}) == want["exposure_tcp_52415"]


def test_words_of_a_rule() -> None:
    line = 'block return-rst(ttl 64) in log (all, user) quick on ! en0 proto { tcp udp } label "a (b) c"'
    assert tokens(line) == ["block", "return-rst(ttl 64)", "in", "log", "(all, user)", "quick", "on", "!", "en0",
                            "proto", "{ tcp udp }", "label", '"a (b) c"']


def test_every_part_of_a_full_rule() -> None:
    [r] = parse_pf_rules(
        "@7 block return-icmp in log (all) quick on ! en0 inet proto { tcp udp } from ! <lan> port 1000 >< 2000 "
        "os \"Windows\" to 10.0.0.1 - 10.0.0.9 port 52000:53000 user = 0 group unknown flags S/SA icmp-type echoreq "
        "code 0 tos 0x10 modulate state (max 10, source-track rule) fragment label \"x y\" tag T ! tagged U rtable 1"
        "\n").rules
    assert (r.action, r.direction, r.quick, r.interface, r.interface_negated, r.family, r.protos) == (
        "block", "in", True, "en0", True, "inet", ["tcp", "udp"])
    assert (r.source.negated, r.source.address, r.source.port.op, r.source.port.first, r.source.port.second) == (
        True, "<lan>", "><", "1000", "2000")
    assert (r.destination.address, r.destination.port.op) == ("10.0.0.1 - 10.0.0.9", ":")
    assert r.destination.port.matches(52415) and not r.destination.port.matches(51999)
    assert r.conditions == ['os "Windows"', "user = 0", "group unknown", "flags S/SA", "icmp-type echoreq code 0",
                            "tos 0x10", "! tagged U"]
    assert r.unknown == []


def test_a_service_name_port_is_read_not_guessed() -> None:
    [r] = parse_pf_rules("pass in quick proto tcp from any to any port = ssh flags S/SA keep state\n").rules
    assert r.destination.port.first == "ssh" and r.destination.port.matches(22) is None and r.port is None


@pytest.mark.parametrize("text", ["pfctl: Permission denied\n", "sudo: a password is required\n",
                                  "Segmentation fault: 11\n",
                                  'anchor "x" all {\npfctl: DIOCGETRULES: Invalid argument\n}\n'])
def test_what_is_not_a_listing_is_an_error_not_no_rules(text: str) -> None:
    with pytest.raises(FactsParseError):
        parse_pf_rules(text)


# ----------------------------------------------------------------------- generated rules in pfctl's grammar

_name = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
_iface = st.from_regex(r"(en|utun|bridge|lo|p2p|awdl)[0-9]{1,2}", fullmatch=True)
_num = st.integers(0, 65535).map(str)
_v4 = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t)))
_host = st.one_of(
    st.just("any"), _v4, _v4.map(lambda a: f"{a}/24"), st.just("fe80::1"), _name.map(lambda n: f"<{n}>"),
    _iface.map(lambda i: f"({i})"), _iface.map(lambda i: f"({i}:network)"), st.just("self"), st.just("no-route"),
    st.just("urpf-failed"), st.tuples(_v4, _v4).map(lambda t: f"{t[0]} - {t[1]}"),
    st.lists(_v4, min_size=1, max_size=3).map(lambda xs: "{ " + " ".join(xs) + " }"))
_op = st.one_of(
    st.tuples(st.sampled_from(["=", "!=", "<", "<=", ">", ">="]), st.one_of(_num, st.sampled_from(["ssh", "domain"])))
    .map(lambda t: f"{t[0]} {t[1]}"),
    st.tuples(_num, st.sampled_from(["><", "<>"]), _num).map(" ".join), st.tuples(_num, _num).map(":".join))


@st.composite
def rules(draw) -> tuple[str, dict]:
    action = draw(st.sampled_from(["pass", "block"]))
    parts = [action]
    if action == "block":
        parts += draw(st.sampled_from([[], ["drop"], ["return"], ["return-rst"], ["return-rst(ttl 64)"],
                                       ["return-icmp"], ["return-icmp6"], ["return-icmp(port-unr)"]]))
    direction = draw(st.sampled_from([None, "in", "out"]))
    parts += [direction] if direction else []
    parts += draw(st.sampled_from([[], ["log"], ["log", "(all)"], ["log", "(all, user)"], ["log", "(to pflog1)"]]))
    quick = draw(st.booleans())
    parts += ["quick"] if quick else []
    iface = draw(st.one_of(st.none(), _iface))
    if iface:
        parts += ["on", iface] if draw(st.booleans()) else ["on", "!", iface]
    parts += draw(st.sampled_from([[], ["route-to", "(utun4 any)"], ["reply-to", "(en0 10.0.0.1)"], ["fastroute"]]))
    parts += draw(st.sampled_from([[], ["inet"], ["inet6"]]))
    protos = draw(st.sampled_from([[], ["tcp"], ["udp"], ["icmp"], ["tcp", "udp"], ["6"]]))
    if protos:
        parts += ["proto", protos[0] if len(protos) == 1 else "{ " + " ".join(protos) + " }"]
    port = None
    if draw(st.booleans()):
        parts.append("all")
    else:
        for side in ("from", "to"):
            parts.append(side)
            parts += ["!"] if draw(st.booleans()) else []
            parts.append(draw(_host))
            if protos and draw(st.booleans()):
                op = draw(_op)
                parts += ["port", op]
                port = op if side == "to" else port
            if side == "from" and draw(st.booleans()):
                parts += ["os", '"Linux 2.6"']
    for _ in range(draw(st.integers(0, 4))):
        parts += draw(st.sampled_from([
            ["user", "=", "0"], ["user", "unknown"], ["group", "1000", "><", "2000"], ["flags", "S/SA"],
            ["flags", "any"], ["flags", "/SA"], ["icmp-type", "echoreq"], ["icmp6-type", "neighbrsol", "code", "0"],
            ["tos", "0x10"], ["no", "state"], ["keep", "state"], ["modulate", "state"], ["synproxy", "state"],
            ["keep", "state", "(max 10, if-bound)"], ["probability", "50%"], ["fragment"], ["no-df"],
            ["random-id"], ["allow-opts"], ["min-ttl", "5"], ["max-mss", "1400"], ["label", '"a label (x)"'],
            ["queue", "(q1, q2)"], ["queue", "std"], ["tag", "T1"], ["tagged", "T2"], ["!", "tagged", "T3"],
            ["rtable", "1"]]))
    return " ".join(parts), {"action": action, "direction": direction, "quick": quick, "interface": iface,
                             "protos": protos, "port": port}


@settings(max_examples=300, deadline=None)
@given(rules())
def test_a_valid_rule_is_never_a_parse_error_and_is_read_right(rule: tuple[str, dict]) -> None:
    line, want = rule
    [r] = parse_pf_rules(f"{line}\n").rules
    assert (r.action, r.direction, r.quick, r.interface, r.protos) == (
        want["action"], want["direction"], want["quick"], want["interface"], want["protos"])
    assert r.unknown == []
    got = r.destination.port
    assert (None if got is None else (f"{got.first}:{got.second}" if got.op == ":" else
                                      f"{got.first} {got.op} {got.second}" if got.second else
                                      f"{got.op} {got.first}")) == want["port"]


@given(st.lists(st.sampled_from(["scrub in all no-df fragment reassemble", 'anchor "com.apple/*" all',
                                 'rdr-anchor "com.apple/*" all', "nat on en0 from 10.0.0.0/8 to any -> (en0)",
                                 'nat-anchor "x/*" all', "rdr pass on lo0 proto tcp from any to any port 80 -> "
                                 "127.0.0.1 port 8080", "binat on en0 from 10.0.0.1 to any -> 1.2.3.4",
                                 "no nat on en0 from 10.0.0.1 to any", 'dummynet-anchor "x" all', "}",
                                 "  [ Evaluations: 1  Packets: 0  Bytes: 0  States: 0 ]",
                                 "No ALTQ support in kernel"]), max_size=8))
def test_other_statements_are_counted_not_refused(lines: list[str]) -> None:
    facts = parse_pf_rules("\n".join(lines) + "\n")
    assert facts.rules == [] and facts.other_lines == len(lines)
