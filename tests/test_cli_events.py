"""`--events` (docs/cli.md "Events"): one JSON object per line on stdout, from one emitter (render/events.py):
`started` first, `finished` last whatever ended the command, `progress` and `node` between."""

from __future__ import annotations

import json

from macfleet.cli.options import node_progress
from macfleet.render import events
from tests.conftest import EXAMPLE_INVENTORY

EXAMPLE = str(EXAMPLE_INVENTORY)


def _lines(result) -> list[dict]:
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert all({"event", "time", "command"} <= set(line) for line in lines), lines
    assert lines[0]["event"] == "started" and lines[-1]["event"] == "finished", lines
    assert [x["event"] for x in lines].count("finished") == 1
    return lines


def test_an_error_is_the_finished_line(cli, tmp_path) -> None:
    result = cli("doctor", "--events", "-i", str(tmp_path / "nowhere"), env={"MACFLEET_INVENTORY": None})
    assert result.exit_code == 2
    started, finished = _lines(result)
    assert started["command"] == "macfleet doctor"
    assert finished["exit_code"] == 2 and finished["error"]["code"] == "usage"
    assert "nowhere" in finished["error"]["message"]


def test_a_usage_error_before_the_command_runs_is_still_one_stream(cli) -> None:
    result = cli("reboot", "--events", "--no-such-option")
    assert result.exit_code == 2
    assert _lines(result)[-1]["error"]["code"] == "usage"


def test_reboot_streams_each_node_and_ends_with_the_result(cli, monkeypatch) -> None:
    """The flow's progress (node, status, detail) and its messages become events; the result is in `finished`."""
    from macfleet.flow import reboot as flow

    class Done:
        result = "ok"
        refusal = None

        @staticmethod
        def payload() -> dict:
            return {"mesh": "mesh1", "result": "ok", "nodes": {"studio-1": {"back": True}}}

    def fake(fleet, target, names, reason, *, dry_run, progress, say):
        say("stopping exo")
        progress("studio-1", "rebooting", "reboot issued")
        progress("studio-1", "back", "up 12 s")
        return Done()

    monkeypatch.setattr(flow, "reboot_mesh", fake)
    result = cli("reboot", "-i", EXAMPLE, "--mesh", "mesh1", "--events")
    lines = _lines(result)
    assert result.exit_code == 0, result.output
    assert any(x["event"] == "progress" and x.get("message") == "stopping exo" for x in lines)
    assert any(x["event"] == "progress" and x.get("node") == "studio-1" and x["status"] == "rebooting"
               for x in lines)
    assert any(x["event"] == "node" and x["node"] == "studio-1" and x["status"] == "back" for x in lines)
    assert lines[-1]["result"]["result"] == "ok" and lines[-1]["exit_code"] == 0


def test_node_progress_shows_and_streams(capsys) -> None:
    shown: list[tuple[str, str, str]] = []
    events.reset()
    events.start("macfleet test")
    try:
        update = node_progress(lambda *a: shown.append(a))
        update("a", "waiting", "")
        update("a", "done", "on 25C56")
        events.result({"ok": True})
        events.finished(0)
    finally:
        events.reset()
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert shown == [("a", "waiting", ""), ("a", "done", "on 25C56")]
    assert [x["event"] for x in lines] == ["started", "progress", "node", "finished"]
    assert lines[2] == {**lines[2], "node": "a", "status": "done", "detail": "on 25C56"}
    assert lines[3]["result"] == {"ok": True}


def test_nothing_is_written_without_events(capsys) -> None:
    events.reset()
    events.progress("x")
    events.node_status("a", "done")
    events.finished(0)
    assert capsys.readouterr().out == ""


def test_topology_watch_json_is_its_stream_of_changes(cli, monkeypatch) -> None:
    """A live command has no single result: its --json is the event stream, the final check in `finished`."""
    from types import SimpleNamespace

    from macfleet.flow import topology

    def watch(fleet, mesh, *, interval_s, timeout_s, on_look):
        plugged = SimpleNamespace(kind="plugged", model_dump=lambda **_: {"kind": "plugged", "link": {"a": "x"}})
        on_look(SimpleNamespace(report=None, events=[plugged], missing_changed=False))
        return SimpleNamespace(clean=True, links=[1], findings=[], json_payload=lambda: {"nodes": [], "links": [],
                                                                                          "findings": []})

    monkeypatch.setattr(topology, "watch_topology", watch)
    result = cli("topology", "watch", "-i", EXAMPLE, "--json")
    lines = _lines(result)
    assert result.exit_code == 0, result.output
    assert any(x.get("change") == {"kind": "plugged", "link": {"a": "x"}} for x in lines)
    assert lines[-1]["result"] == {"nodes": [], "links": [], "findings": []}
