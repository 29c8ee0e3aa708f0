"""The service files that ship in docs/watch start the real `macfleet watch` command with valid options, the
Grafana dashboard reads only metrics watch exports, and the status page escapes what it shows."""

from __future__ import annotations

import json
import plistlib
import re
import shlex
from pathlib import Path

from typer.testing import CliRunner

from macfleet.cli.app import app
from macfleet.render.watch import render_status_page
from macfleet.watch.metrics import Metrics

DOCS = Path(__file__).resolve().parent.parent / "docs" / "watch"


def _help_ok(argv: list[str]) -> None:
    assert Path(argv[0]).name == "macfleet" and argv[1] == "watch"
    r = CliRunner().invoke(app, [*argv[1:], "--help"])
    assert r.exit_code == 0, r.output
    # every option the unit passes is one `watch` knows
    for opt in (a for a in argv[2:] if a.startswith("--")):
        assert opt in r.output


def test_systemd_unit_runs_watch():
    text = (DOCS / "macfleet-watch.service").read_text()
    exec_start = re.search(r"^ExecStart=(.+)$", text, re.M).group(1)
    _help_ok(shlex.split(exec_start))
    assert "MACFLEET_INVENTORY=" in text and "Restart=on-failure" in text
    # the healer's cluster state is the default every operator's command uses, shared by group (issue 28)
    state = re.search(r"^StateDirectory=(.+)$", text, re.M).group(1)
    assert Path("/var/lib") / state == Path("/var/lib/macfleet") and "StateDirectoryMode=2770" in text
    assert re.search(r"^Group=\S+$", text, re.M) and "UMask=0007" in text


def test_launchd_plist_runs_watch():
    plist = plistlib.loads((DOCS / "org.macfleet.watch.plist").read_bytes())
    assert plist["Label"] == "org.macfleet.watch" and plist["RunAtLoad"] is True
    _help_ok(plist["ProgramArguments"])
    assert "MACFLEET_INVENTORY" in plist["EnvironmentVariables"]
    assert plist["GroupName"] and plist["Umask"] == 0o007  # the cluster state is shared by group (issue 28)


def test_dashboard_uses_only_exported_metrics():
    exported = set()
    for metric in Metrics().registry.collect():
        exported |= {s.name for s in metric.samples} | {metric.name}
    dash = json.loads((DOCS / "grafana-dashboard.json").read_text())
    used = {m for p in dash["panels"] for t in p["targets"] for m in re.findall(r"macfleet_[a-z_]+", t["expr"])}
    # counters appear with their _total sample name once incremented; the family name is the same
    assert used and all(u in exported or u.removesuffix("_total") in exported for u in used), used - exported


def test_status_page_escapes_what_nodes_say():
    page = render_status_page({"updated": "now", "meshes": {"m": {"nodes": {"studio-1": ["rdma: <b>x</b>"]},
                                                                 "breaker": None, "paused": False,
                                                                 "decision": "<script>"}},
                               "audit": [{"time": "t", "decision": "a & b"}]})
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page and "<script>" not in page
    assert "a &amp; b" in page and "<script" not in page.lower()
