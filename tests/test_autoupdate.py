"""No surprise updates (issue 29 item 1): the Software Update preferences bootstrap's autoupdate role writes are the
ones doctor's `auto-updates` check judges; `defaults read` parsed; the check reports a key back on, and a domain
that could not be read is unknown, never fine."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from macfleet.errors import FactsParseError
from macfleet.facts.defaults import COMMERCE, SOFTWARE_UPDATE, parse_defaults_read
from macfleet.judge.autoupdate import AUTO_UPDATE_PREFS
from macfleet.judge.health import NodeFacts, Unknown
from tests.judge.test_health_probes import verdict

ROOT = Path(__file__).resolve().parent.parent
PROBES = ROOT / "tests" / "fixtures" / "probes"


def test_the_role_writes_what_doctor_judges() -> None:
    role = yaml.safe_load((ROOT / "playbooks/roles/autoupdate/defaults/main.yml").read_text())
    assert role["autoupdate_prefs"] == AUTO_UPDATE_PREFS
    read = [c[2] for c in role["autoupdate_reads"]["commands"]]
    assert sorted(read) == sorted(AUTO_UPDATE_PREFS)


def test_defaults_read_of_a_domain() -> None:
    su = parse_defaults_read((PROBES / "defaults_softwareupdate_fresh.txt").read_text())
    assert su.exists and su.values["AutomaticallyInstallMacOSUpdates"] == "1" and len(su.values) == 5
    missing = parse_defaults_read("", f"\nDomain {COMMERCE} does not exist\n", 1)
    assert not missing.exists and missing.values == {}
    with pytest.raises(FactsParseError):
        parse_defaults_read("", "defaults: Operation not permitted", 1)
    with pytest.raises(FactsParseError):
        parse_defaults_read("AutoUpdate = 1;\n")


def _prefs(su: str, commerce: str) -> dict:
    return {SOFTWARE_UPDATE: parse_defaults_read(su), COMMERCE: parse_defaults_read(commerce)}


def test_auto_updates_back_on_is_an_error_naming_each_key() -> None:
    fresh = (PROBES / "defaults_softwareupdate_fresh.txt").read_text()
    off = (PROBES / "defaults_commerce_off.txt").read_text()
    [f] = verdict("auto-updates", NodeFacts(update_prefs=_prefs(fresh, off)))
    assert f.severity == "error" and "AutomaticallyInstallMacOSUpdates 1 (want 0)" in f.message
    assert "CriticalUpdateInstall" in f.message and "ConfigDataInstall" not in f.message
    assert "macfleet bootstrap" in f.fix


def test_auto_updates_as_bootstrap_leaves_them_pass_and_unread_is_unknown() -> None:
    su = "{\n" + "".join(f"    {k} = {int(v)};\n" for k, v in AUTO_UPDATE_PREFS[SOFTWARE_UPDATE].items()) + "}\n"
    assert verdict("auto-updates", NodeFacts(update_prefs=_prefs(su, "{\n    AutoUpdate = 0;\n}\n"))) == []
    unset = {SOFTWARE_UPDATE: parse_defaults_read(su), COMMERCE: parse_defaults_read("", "Domain x does not exist", 1)}
    [f] = verdict("auto-updates", NodeFacts(update_prefs=unset))
    assert "AutoUpdate unset (want 0)" in f.message
    out = verdict("auto-updates", NodeFacts(problems={"auto-updates": "exit 1: sudo"}))
    assert isinstance(out, Unknown) and "sudo" in out.reason
