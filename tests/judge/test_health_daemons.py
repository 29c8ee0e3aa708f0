"""doctor's exo-models-dir and exo-networksetup checks on the one read of the two LaunchDaemons (facts/daemons):
exo's own job's environment against exo.models_dir, and exo's app's io.exo.networksetup daemon."""

from __future__ import annotations

import pytest

from macfleet.errors import FactsParseError
from macfleet.facts.daemons import parse_exo_daemons
from macfleet.judge.health import NodeFacts, Unknown
from tests.judge.test_health_probes import verdict


def plist(env: dict[str, str]) -> str:
    import plistlib

    return plistlib.dumps({"Label": "org.macfleet.exo", "EnvironmentVariables": env}).decode()


LOADED = """system/io.exo.networksetup = {
\tactive count = 0
\tpath = /Library/LaunchDaemons/io.exo.networksetup.plist
\tstate = not running
\truns = 7
\tlast exit code = 0
}
exit 0"""
NOT_LOADED = 'Bad request.\nCould not find service "io.exo.networksetup" in domain for system\nexit 113'


def read(env: dict[str, str] | None = None, *, present: bool = False, job: str = NOT_LOADED,
         disabled: str = "disabled services = {\n}\nexit 0") -> str:
    exo = plist(env) if env is not None else "(unreadable: no such file)"
    return (f"--- exo-plist\n{exo}\n--- networksetup-plist\n{'present' if present else 'absent'}\n"
            f"--- networksetup-job\n{job}\n--- disabled\n{disabled}\n")


def facts(text: str) -> NodeFacts:
    return NodeFacts(exo_daemons=parse_exo_daemons(text))


HOME = {"HOME": "/Users/admin"}


def test_exo_looks_where_rollout_puts_the_models() -> None:
    # the default models_dir (~/.exo/models) and a daemon that sets it, or leaves exo's own default
    assert verdict("exo-models-dir", facts(read({**HOME, "EXO_DEFAULT_MODELS_DIR": "/Users/admin/.exo/models/"}))) == []
    assert verdict("exo-models-dir", facts(read(HOME))) == []
    [f] = verdict("exo-models-dir", facts(read({**HOME, "EXO_DEFAULT_MODELS_DIR": "/Volumes/M/exo.noindex"})))
    assert f.severity == "error" and "/Volumes/M/exo.noindex" in f.message and "/Users/admin/.exo/models" in f.message
    assert "macfleet bootstrap" in f.fix
    out = verdict("exo-models-dir", facts(read(None)))
    assert isinstance(out, Unknown) and "could not be read" in out.reason


def test_exos_network_daemon_loaded_or_due_at_boot_is_a_finding() -> None:
    assert verdict("exo-networksetup", facts(read(HOME))) == []  # never installed
    [f] = verdict("exo-networksetup", facts(read(HOME, present=True, job=LOADED)))
    assert f.severity == "error" and "7 runs" in f.message and "DHCP" in f.message
    assert "launchctl disable system/io.exo.networksetup" in f.fix
    [w] = verdict("exo-networksetup", facts(read(HOME, present=True)))  # installed, not disabled
    assert w.severity == "warning" and "next boot" in w.message
    off = 'disabled services = {\n\t"io.exo.networksetup" => disabled\n}\nexit 0'
    assert verdict("exo-networksetup", facts(read(HOME, present=True, disabled=off))) == []
    unread = verdict("exo-networksetup", facts(read(HOME, present=True, disabled="Operation not permitted\nexit 1")))
    assert isinstance(unread, Unknown)


def test_a_read_missing_a_section_or_an_odd_exit_is_refused() -> None:
    with pytest.raises(FactsParseError):
        parse_exo_daemons("--- exo-plist\n(unreadable)\n")
    with pytest.raises(FactsParseError):
        parse_exo_daemons(read(HOME, job="exit 5"))
    out = verdict("exo-networksetup", NodeFacts(problems={"exo-daemons": "no answer"}))
    assert isinstance(out, Unknown)
