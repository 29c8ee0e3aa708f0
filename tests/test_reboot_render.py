"""The reboot's live board and summary, rendered to plain text."""

from __future__ import annotations

from rich.console import Console

from macfleet.render.reboot import RebootBoard, progress_line, render_reboot


def _text(renderable) -> str:
    console = Console(width=120, record=True, color_system=None, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_board_shows_every_node_with_its_latest_status_and_when() -> None:
    clock = Clock()
    board = RebootBoard(["studio-1", "studio-2"], clock=clock)
    clock.now = 103.0
    board.update("studio-1", "rebooting", "reboot issued")
    clock.now = 121.0
    board.update("studio-1", "back", "back (booted { sec = 1, usec = 0 })")
    text = _text(board)
    assert "studio-1" in text and "back" in text and "21" in text
    assert "studio-2" in text and "pending" in text
    assert "rebooting" not in text  # only the latest status is kept


def test_what_a_node_said_is_shown_as_it_is_never_as_markup() -> None:
    board = RebootBoard(["studio-1"])
    board.update("studio-1", "waiting", "down: [bold red]boom[/] \x1b[2J")
    text = _text(board)
    assert "[bold red]boom[/]" in text
    assert "[bold red]" in _text(progress_line("studio-1", "waiting", "[bold red]x[/]"))


def test_summary_lists_a_node_that_did_not_come_back() -> None:
    payload = {"mesh": "mesh1", "result": "failed", "reason": "wedge", "refusal": None, "plan": [], "steps": [],
               "phases": [{"name": "wait for nodes", "took_s": 30.0, "ok": False, "detail": "not back"}],
               "nodes": {"studio-1": {"back": True, "took_s": 12.5, "last_seen": "back"},
                         "studio-2": {"back": False, "took_s": None, "last_seen": "down: timed out"}},
               "lock": "released"}
    text = _text(render_reboot(payload))
    assert "NO" in text and "down: timed out" in text and "FAILED" in text


def test_terminal_controls_from_a_node_never_reach_the_terminal() -> None:
    board = RebootBoard(["studio-1"])
    board.update("studio-1", "waiting", "down: \x1b[2J gone")
    assert "\x1b" not in _text(board)
    assert "\x1b" not in _text(progress_line("studio-1", "waiting", "\x1b]0;title\x07"))


def test_check_with_a_hung_node_shows_the_plan_and_the_refusal(example_inventory) -> None:
    """sysadmin-walk: `reboot --dry-run` with a hung Mac printed only `refused: could not read FileVault…`."""
    from macfleet.act.reboot import BeforeReboot
    from macfleet.facts.system import FdesetupFacts
    from macfleet.flow.reboot import reboot_mesh
    from macfleet.inventory.load import load_inventory

    fleet = load_inventory(example_inventory)
    mesh = fleet.meshes[0]
    hung, *rest = mesh.node_names
    before = BeforeReboot(filevault={hung: "timed out after 30 s", **{n: FdesetupFacts(
        filevault_on=False, status_line="FileVault is Off.") for n in rest}})
    r = reboot_mesh(fleet, mesh, list(mesh.node_names), "wedged", dry_run=True, sessions=object(), before=before)
    assert r.result == "refused" and f"could not read FileVault on {hung}" in r.refusal
    assert [p["method"] for p in r.plan] == ["unknown", *["shutdown"] * len(rest)]
    assert "power-cycle it at the rack" in r.plan[0]["why"] and r.steps
    shown = _text(render_reboot(r.payload()))
    assert "refused:" in shown and "plan" in shown and "power-cycle" in shown
