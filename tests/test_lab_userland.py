"""The stand-ins' cheap paths give what the costly ones gave: the marshal twin of a state file reads back what
json reads (and a stale or missing twin falls back to the JSON), rtnetlink's addresses and routes are `ip -j`'s,
system_profiler's JSON writer writes json.dumps's bytes, and a stand-in is a `python3.11 -SE` script. No lab, no
root (the rtnetlink test reads the host's own namespace, Linux only)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess

import pytest

from macfleet.lab.macos import common, profiler

STATE = {"power": "on", "ids": [1, 2.5, None, True], "nested": {"b": {}, "a": []}, "text": 'é"\n\u2028'}


def test_state_twin_round_trip(tmp_path):
    path = tmp_path / "persist.json"
    common.write_json(path, STATE)
    assert (tmp_path / ".persist.json.marshal").exists()
    assert common.read_json(path) == json.loads(path.read_text()) == STATE
    assert path.read_text() == json.dumps(STATE, indent=1)  # the JSON file itself is what it always was


def test_state_twin_is_json_read_back(tmp_path):
    """Tuples and int keys come back as json gives them (lists, str keys), not as marshal would keep them."""
    path = tmp_path / "boot.json"
    common.write_json(path, {"pair": (1, 2), 7: "seven"})
    assert common.read_json(path) == {"pair": [1, 2], "7": "seven"}


def test_state_twin_stale_or_broken_falls_back_to_json(tmp_path):
    path = tmp_path / "boot.json"
    common.write_json(path, {"power": "on"})
    path.write_text(json.dumps({"power": "off"}))  # written by hand, as a test or an old lab would
    assert common.read_json(path) == {"power": "off"}
    (tmp_path / ".boot.json.marshal").write_bytes(b"not marshal data")
    assert common.read_json(path) == {"power": "off"}
    os.unlink(tmp_path / ".boot.json.marshal")
    assert common.read_json(path) == {"power": "off"}
    assert common.read_json(tmp_path / "missing.json", {"d": 1}) == {"d": 1}


def test_profiler_json_writer_matches_json_dumps():
    cases = [
        [],
        [{}],
        [{"a": [], "b": {}, "c": None, "d": True, "e": False, "f": 1, "g": -2.5, "h": 1e100, "i": float("nan"),
          "j": float("inf"), "k": float("-inf")}],
        [{profiler.SERVICE_KEY_RDMA: 'x"y\\z\n\t\r\b\f\x00\x1f\x7f\u2028é', "n": [[1, [2, {"z": 1, "a": 2}]], (3, 4)]}],
        [{1: "a key json turns into a string"}],
    ]
    for items in cases:
        want = json.dumps({"SPThunderboltDataType": items}, indent=2, sort_keys=True, separators=(",", " : "),
                          ensure_ascii=False)
        assert profiler._json("SPThunderboltDataType", items) == want


@pytest.mark.skipif(platform.system() != "Linux" or not shutil.which("ip"), reason="rtnetlink: Linux with ip")
def test_rtnetlink_reads_what_ip_reports():
    from macfleet.lab.macos import rtnl

    def ip(*args: str) -> list:
        return json.loads(subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=True).stdout)

    want_addrs = {x["ifname"]: [(a["local"], a["prefixlen"]) for a in x.get("addr_info", [])
                                if a.get("family") == "inet"] for x in ip("-4", "addr", "show")}
    assert rtnl.ipv4_addresses() == {k: v for k, v in want_addrs.items() if v}
    want_routes = [{k: r[k] for k in ("dst", "gateway", "dev") if k in r} for r in ip("-4", "route", "show", "table",
                                                                                       "main")]
    assert rtnl.ipv4_routes() == want_routes


def test_standin_is_a_python_script(tmp_path):
    from macfleet.lab import control
    from macfleet.lab.state import NODE_PYTHON

    text = control.standin_wrapper(tmp_path / "userland", tmp_path / "nodes" / "studio-1", "pmset")
    first = text.splitlines()[0]
    assert first == f"#!{NODE_PYTHON} -SE"  # Linux passes one shebang argument: the flags in one word
    compile(text, "pmset", "exec")
    assert repr(str(tmp_path / "nodes" / "studio-1")) in text and "'pmset'" in text


def test_standins_import_only_cheap_modules():
    """What keeps a stand-in call near the interpreter's start: importing the stand-ins (each command's module)
    loads none of the stdlib modules whose imports cost milliseconds; a function that needs one imports it."""
    import sys

    from macfleet.lab.state import NODE_PYTHON

    python = NODE_PYTHON if os.path.exists(NODE_PYTHON) else sys.executable
    lab_dir = os.path.join(os.path.dirname(common.__file__), os.pardir)
    mods = "cli, devtools, launchd, network, pf, ping, prefs, profiler, rdma, rtnl, sound, system, tools"
    code = (f"import sys; sys.path.insert(0, {lab_dir!r}); from macos import {mods}; "
            "print(' '.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([python, "-S", "-E", "-c", code], capture_output=True, text=True,
                                check=True).stdout.split())
    costly = {"json", "re", "enum", "subprocess", "contextlib", "pathlib", "plistlib", "shutil", "socket", "hashlib",
              "ipaddress", "importlib", "collections", "functools", "datetime", "tempfile"}
    assert not loaded & costly
