"""The healer under attack and accident (issue 25, hostile.md rows 1-6, 9, 10, 14, 16, 19): node text, idle
clients, its own files, a hung exo, a failure a restart does not fix, a held lock, a dripping webhook; and its
restart of exo ending, as a reboot does, with the models placed again and answering (issue 27).
Real objects where it matters (the state and audit files on disk, the cluster lock, the HTTP server, a real
`macfleet watch` process with a descriptor limit, the models step itself); only what the nodes say is handed in:
the probe as a report, exo stopping and starting, the verification of exo's /state, exo's API (a script)."""

from __future__ import annotations

import errno
import http.server
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import ClassVar

import pytest

from macfleet.act import statedir
from macfleet.act.reboot import ExoStop
from macfleet.errors import UsageError
from macfleet.flow import placed
from macfleet.inventory.load import load_inventory
from macfleet.inventory.model import KeepPlaced, ModelToStage, RemediationSettings
from macfleet.judge.health import CheckResult, HealthFinding, HealthReport, HealthSummary
from macfleet.judge.remediation import Observation, State, after, step
from macfleet.watch import loop
from macfleet.watch.metrics import Metrics, exposed, read_token, serve
from macfleet.watch.notify import Notifier, redact
from tests.test_inference_flow import FakeApi

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
NODES = ("studio-1", "studio-2", "studio-3", "studio-4")


# ------------------------------------------------------------------------------------------ helpers


def report(findings: dict[str, dict[str, str]] | None = None, unknown: dict[str, dict[str, str]] | None = None,
           checks: tuple[str, ...] = ("reachable", "rdma", "exo-running", "exo-runners")) -> HealthReport:
    """A probe's report: findings/unknown as {check: {node: message or reason}}; everything else ok."""
    findings, unknown = findings or {}, unknown or {}
    results, found = [], []
    for c in checks:
        for n in NODES:
            if n in findings.get(c, {}):
                found.append(HealthFinding(node=n, check=c, severity="error", message=findings[c][n], fix="f"))
                results.append(CheckResult(check=c, node=n, result="finding", reason=findings[c][n]))
            elif n in unknown.get(c, {}):
                results.append(CheckResult(check=c, node=n, result="unknown", reason=unknown[c][n]))
            else:
                results.append(CheckResult(check=c, node=n, result="ok"))
    return HealthReport(findings=found, checks=results, summary=HealthSummary(
        nodes=4, checks=len(results), ok=0, findings=len(found), unknown=0, errors=0, warnings=0, unreachable=[],
        healthy=not found, checked_at="t"))


HEALTHY = report()
RUNNER = report({"exo-runners": {"studio-3": "exo's runner on studio-3 failed: plain crash"}})
HUNG = report(unknown={"exo-running": {"studio-2": "exo: no answer within 4 s"},
                       "exo-runners": {"studio-2": "exo-state: no answer within 4 s"}})


class Harness:
    """A real Watcher on the example inventory (state and audit under tmp), its probe handed `reports`."""

    def __init__(self, inv: Path, tmp: Path, monkeypatch, models: tuple[ModelToStage, ...] = (), **policy):
        monkeypatch.setenv("MACFLEET_STATE_DIR", str(tmp / "state"))
        fleet = load_inventory(inv)
        mesh = fleet.meshes[0]
        remediation = RemediationSettings(**{"debounce": 1, "settle_s": 0, **policy})
        mesh = mesh.model_copy(update={"settings": mesh.settings.model_copy(update={
            "remediation": remediation, "models": list(models)})})
        self.fleet = fleet.model_copy(update={"meshes": (mesh,)})
        self.mesh = mesh
        self.said: list[str] = []
        self.reports: list[HealthReport] = []
        self.watcher = loop.Watcher(self.fleet, [mesh], interval_s=1, say=self.said.append)
        self.watcher.probe = lambda m, now, preflight=False: (self.reports.pop(0), None)
        self.restarts: list[dict | None] = []
        self.steps: list[str] = []  # what was done to exo, in order, and who held the cluster lock meanwhile
        self.exo_back = (True, "clean")  # what verifying exo's /state after its start finds
        self.api = FakeApi()  # exo's API after the restart: nothing placed (exo lost its instances)

        def holder() -> str | None:
            from macfleet.act.lock import ClusterLock, lock_path

            rec = ClusterLock(lock_path(self.fleet.root)).read()
            return rec and rec.owner

        self.stops: dict[str, ExoStop] = {}  # how exo's stop went where it did not go cleanly

        def restart(sessions, nodes):  # what the node sees; the lock file says who holds the cluster
            self.restarts.append(holder() and {"owner": holder()})
            self.steps.append(f"stop ({holder()})")
            return {n: self.stops.get(n, ExoStop(pid=100)) for n in nodes}

        class ExoVerified:  # the reboot's `verify exo /state`, as the nodes would answer it
            def __init__(v, fleet, mesh, sessions, checks):
                assert checks == loop.VERIFY_EXO and sessions is self.watcher.probers[mesh.name]

            def verify(v, deadline_s, all_back_at=0.0):
                self.steps.append(f"verify exo ({holder()})")
                return (*self.exo_back, HEALTHY)

        place = self.api.place

        def placing(model, timeout_s):
            self.steps.append(f"place {model.name} ({holder()})")
            return place(model, timeout_s)

        self.api.place = placing
        monkeypatch.setattr(loop.act_reboot, "stop_exo_on", restart)
        monkeypatch.setattr(loop.act_reboot, "start_exo_on",
                            lambda sessions, nodes: self.steps.append(f"start {','.join(nodes)}"))
        monkeypatch.setattr(loop, "Verifier", ExoVerified)
        monkeypatch.setattr(placed, "api_for", lambda fleet, mesh: self.api)

    def tick(self, rep: HealthReport):
        self.reports.append(rep)
        return self.watcher.tick()[0]

    def audit(self) -> list[dict]:
        return [json.loads(x) for x in self.watcher.audit.path.read_text().splitlines()]

    def close(self):
        self.watcher.close()


@pytest.fixture
def harness(example_inventory, tmp_path, monkeypatch):
    made = []

    def make(**policy) -> Harness:
        h = Harness(example_inventory, tmp_path, monkeypatch, **policy)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


# ------------------------------------------------------------------------ 1. text from a node is data


def test_runner_text_with_markup_esc_and_bidi_is_printed_as_text(harness, capsys):
    """hostile #1, #16: `boom [/bold] x` made watch exit with MarkupError; ESC and U+202E reached stderr."""
    from macfleet.cli.watch import say

    h = harness(ladder={"rdma": ["reboot"]})  # exo-runners not in the ladder: paged, with the text
    h.watcher.say = say
    h.watcher.troubles.say = say
    evil = "boom [/bold] x \x1b[31mred\x1b[0m \u202eevil"
    s = h.tick(report({"exo-runners": {"studio-3": evil}}))
    err = capsys.readouterr().err
    assert s.action == "page" and "boom [/bold] x" in err
    assert "\x1b" not in err and "\u202e" not in err and "\ufffd[31mred" in err
    assert h.audit()[-1]["decision"].count("boom [/bold] x") == 1  # the audit log keeps the text as it was
    assert "\ufffd" in h.watcher.page() and "\u202e" not in h.watcher.page() and "\x1b" not in h.watcher.page()


# -------------------------------------------------------------------------- 3. its own files


def test_state_with_wrong_types_opens_the_breaker_and_is_kept_aside(harness):
    """hostile #6: `"streak": {"rdma": "x"}` was a ValueError: internal error."""
    h = harness()
    h.watcher.state_path.parent.mkdir(parents=True, exist_ok=True)
    h.watcher.state_path.write_text(json.dumps({"meshes": {h.mesh.name: {"streak": {"rdma": "x"}}}}))
    s = h.tick(report({"rdma": {"studio-1": "RDMA wedged"}}))
    assert s.action == "none" and "circuit breaker open" in s.reason and "damaged" in s.reason
    assert "--reset" in s.reason
    assert "state-read" in h.watcher.troubles.current and "damaged" in h.watcher.page()
    assert list(h.watcher.state_path.parent.glob("*.damaged-*"))  # the evidence kept
    saved = loop.load_states(h.watcher.state_path)[h.mesh.name]
    assert saved.breaker_open_since and "damaged" in saved.breaker_reason
    assert h.watcher.metrics.errors.labels("state-read")._value.get() >= 1


def test_truncated_state_never_drops_an_open_breaker_or_the_reboots(harness):
    """hostile #5: a truncated file read as empty: breaker and reboot history gone, watch willing to reboot."""
    h = harness(ladder={"rdma": ["reboot"]}, reboot_breaker_limit=1)
    loop.save_states(h.watcher.state_path, {h.mesh.name: State(reboots=(datetime.now(UTC).isoformat(),),
                                                               breaker_open_since=datetime.now(UTC).isoformat())})
    raw = h.watcher.state_path.read_bytes()
    h.watcher.state_path.write_bytes(raw[: len(raw) // 2])
    for _ in range(2):
        s = h.tick(report({"rdma": {"studio-1": "RDMA wedged"}}))
        assert s.action == "none" and "circuit breaker open" in s.reason
    assert any("damaged" in line and "--reset" in line for line in h.said)


def test_audit_log_that_cannot_be_written_is_reported_and_caught_up(harness, monkeypatch):
    """hostile #6: a directory in the audit log's place ended in IsADirectoryError: internal error. ENOSPC
    (a full disk) likewise. Healing goes on; the entries are written once the log can be."""
    h = harness()
    path = h.watcher.audit.path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir()
    h.tick(HEALTHY)
    h.tick(report({"exo-running": {"studio-2": "exo does not answer"}}))  # debounce 1: restart
    assert len(h.restarts) == 1 and "audit-write" in h.watcher.troubles.current
    assert h.watcher.metrics.errors.labels("audit-write")._value.get() == 2
    path.rmdir()

    class FullDisk:  # every write of the audit log fails with ENOSPC (a link to /dev/full is no longer followed)
        def __getattr__(self, name):
            return getattr(os, name)

        def write(self, fd, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as m:
        m.setattr(statedir, "os", FullDisk())  # the shared directory's append (act/statedir.py) writes it
        h.tick(HEALTHY)
    assert "No space left" in h.watcher.troubles.current["audit-write"]
    path.unlink()
    h.tick(HEALTHY)
    got = h.audit()
    assert [e["action"] for e in got] == ["none", "restart-exo", "none", "none"]
    assert "audit-write" not in h.watcher.troubles.current and any("audit-write: recovered" in x for x in h.said)


def test_state_file_that_cannot_be_written_keeps_the_state_in_memory(harness, monkeypatch):
    """A state that could not be saved is not forgotten: the reboot it recorded still counts toward the
    breaker (re-reading the old file would have reopened the way to a second reboot)."""
    h = harness(ladder={"rdma": ["reboot"]}, reboot_breaker_limit=1)
    from macfleet.flow.reboot import RebootResult

    monkeypatch.setattr(loop, "reboot_mesh", lambda *a, **k: RebootResult(mesh=h.mesh.name, result="ok", reason="r"))
    h.tick(HEALTHY)  # the file exists: what this process wrote
    blocker = h.watcher.state_path.with_name(f".{h.watcher.state_path.name}.{os.getpid()}.tmp")
    blocker.mkdir()  # every save fails from now on
    wedged = report({"rdma": {"studio-1": "RDMA wedged"}})
    assert h.tick(wedged).action == "reboot"
    assert "state-write" in h.watcher.troubles.current
    assert h.tick(HEALTHY).action == "none"
    s = h.tick(wedged)
    assert s.action == "page" and "circuit breaker tripped" in s.reason


# ------------------------------------------------------------------------------ 4. a hung exo


def test_a_hung_exo_is_not_healthy_and_is_restarted_past_the_debounce(harness):
    """hostile #3: SIGSTOP, 500 or garbage: every check unknown, and `healthy → nothing done`."""
    h = harness(debounce=2)
    first = h.tick(HUNG)
    assert first.action == "none" and "debouncing" in first.reason and "exo-running 1/2" in first.reason
    assert "could not tell" in h.watcher.page() and "studio-2" in h.audit()[-1]["node"]
    second = h.tick(HUNG)
    assert second.action == "restart-exo" and second.check == "exo-running"
    assert "could not tell (exo: no answer within 4 s)" in second.reason


def test_a_check_not_judged_because_another_found_a_problem_is_not_counted_twice():
    rep = report({"exo-running": {"studio-2": "refused"}},
                 unknown={"exo-runners": {"studio-2": "not judged: exo-running found a problem first"}})
    assert set(loop._problems(rep, _mesh())) == {"exo-running"}


def _mesh():
    from ..judge.builders import mesh

    return mesh(*NODES)


# ------------------------------------------------------- 5. a failure a restart does not fix climbs


def _run(policy, probes, every_s=10.0, outcome="done"):
    state, out = State(), []
    for i, obs in enumerate(probes):
        now = T0 + timedelta(seconds=i * every_s)
        s = step(policy, state, obs, now)
        out.append(s)
        state = after(policy, s, outcome, now)
    return out, state


RUNNERS = Observation(problems={"exo-runners": ["studio-3: exo's runner on studio-3 failed: plain crash"]})
REFUSED = Observation(problems={"exo-running": ["studio-3: exo does not answer (refused)"]})


def test_the_probe_after_a_restart_does_not_reset_the_rung():
    """hostile #4: 7 mesh-wide restarts in 100 s, every one `rung 1 of 2`: the probe just after the restart
    read exo refusing (exo-runners not judged), and that reset the ladder."""
    policy = RemediationSettings(debounce=2, settle_s=0)
    steps, _ = _run(policy, [RUNNERS, RUNNERS, REFUSED, RUNNERS, RUNNERS, RUNNERS, RUNNERS])
    assert [s.action for s in steps] == ["none", "restart-exo", "none", "none", "reboot", "none", "page"]


def test_the_mesh_settles_after_an_action_before_it_is_judged():
    policy = RemediationSettings(debounce=2, settle_s=30)
    steps, _ = _run(policy, [RUNNERS, RUNNERS, REFUSED, Observation(), RUNNERS, RUNNERS, RUNNERS], every_s=10)
    assert [s.action for s in steps] == ["none", "restart-exo", "none", "none", "none", "reboot", "none"]
    assert "settling" in steps[2].reason and "healthy so far" in steps[3].reason


def test_restarts_are_limited_per_window_and_the_ladder_ends_in_a_page():
    """A runner that crashes a while after each restart (each time after a healthy probe) is restarted at most
    restart_limit times per window; then the ladder climbs past the restart, and ends in a page."""
    policy = RemediationSettings(debounce=1, settle_s=0, restart_limit=2, ladder={"exo-runners": ["restart-exo"]})
    steps, _ = _run(policy, [RUNNERS, Observation()] * 4)
    # each new episode past the limit is paged (once per episode), never restarted
    assert [s.action for s in steps][::2] == ["restart-exo", "restart-exo", "page", "page"]
    assert "the limit is 2" in steps[4].reason and "stop and page" in steps[4].reason
    laddered = RemediationSettings(debounce=1, settle_s=0, restart_limit=1)
    steps, _ = _run(laddered, [RUNNERS, Observation(), RUNNERS])
    assert [s.action for s in steps] == ["restart-exo", "none", "reboot"]


# ------------------------------------------------- 6. only actions carried out count; the lock


def test_a_refused_reboot_uses_no_rung_and_does_not_count_toward_the_breaker():
    """hostile #10: the reboot was counted and the rung moved before act() ran."""
    policy = RemediationSettings(debounce=1, settle_s=0, reboot_breaker_limit=1, ladder={"rdma": ["reboot"]})
    wedge = Observation(problems={"rdma": ["studio-1: RDMA wedged"]})
    steps, state = _run(policy, [wedge] * 5, outcome="refused")
    assert [s.action for s in steps] == ["reboot"] * 5 and state.reboots == () and state.breaker_open_since is None


def test_exo_is_restarted_under_the_cluster_lock_and_not_while_another_holds_it(harness):
    """hostile #9: Watcher.act restarted exo without the cluster lock (a rollout mid-switch raced)."""
    from macfleet.act.lock import ClusterLock, lock_path

    h = harness(debounce=1)
    lock = ClusterLock(lock_path(h.fleet.root))
    held = lock.acquire("rollout exo", "switching releases")  # this live process holds it
    bad = report({"exo-running": {"studio-2": "exo does not answer"}})
    s = h.tick(bad)
    assert s.action == "restart-exo" and h.restarts == []
    assert h.audit()[-1]["result"].startswith("refused: the cluster is locked by rollout exo")
    assert h.watcher.metrics.actions.labels(h.mesh.name, "restart-exo")._value.get() == 0
    assert loop.load_states(h.watcher.state_path)[h.mesh.name].restarts == ()
    paged = []
    h.watcher.notifier.notify = paged.append
    h.tick(bad)  # refused again: audited, not paged again
    assert h.restarts == [] and paged == []
    lock.release(held)
    h.tick(bad)
    assert h.restarts == [{"owner": "watch"}] and lock.read() is None  # held while it ran, released after
    assert h.audit()[-1]["result"] == ("exo restarted on every node (under the cluster lock); no model declared "
                                       "or placed")


# --------------------------------------------- 6b. a restart ends with the models placed again and answering

LLAMA = "mlx-community/Llama-3.2-1B-Instruct-4bit"
QWEN = "mlx-community/Qwen3-0.6B-4bit"
DECLARED = (ModelToStage(name=LLAMA, place=KeepPlaced(sharding="pipeline", transport="ring")),)
EXO_DOWN = report({"exo-running": {"studio-2": "exo does not answer"}})


def test_a_restart_of_exo_places_the_declared_models_again_and_waits_until_they_answer(harness):
    """Issue 27: exo loses its instances when it restarts; the healer's restart, like its reboot, waits until
    exo's /state verifies, places the declared models again and asks every placed model for a token (the script's
    exo also lists an undeclared model: it is asked too, never placed), all under the cluster lock, and says so
    in its result."""
    h = harness(models=DECLARED)
    h.api.have = [QWEN]
    s = h.tick(EXO_DOWN)
    assert s.action == "restart-exo"
    assert h.steps == ["stop (watch)", f"start {','.join(NODES)}", "verify exo (watch)", f"place {LLAMA} (watch)"]
    assert h.api.placed == [(LLAMA, "pipeline", "ring")] and sorted(h.api.asked) == [LLAMA, QWEN]
    result = h.audit()[-1]["result"]
    assert result.startswith(f"exo restarted on every node (under the cluster lock); placed again: {LLAMA}; "
                             f"answering: {QWEN}: 4 token(s) in 0.5 s; {LLAMA}: 4 token(s)"), result
    assert any(line == f"{h.mesh.name}: restart-exo: placing {LLAMA} (pipeline, over ring)…" for line in h.said)
    assert loop.load_states(h.watcher.state_path)[h.mesh.name].restarts != ()  # carried out: its rung is used


def test_a_restart_whose_model_is_not_placed_again_fails_and_the_ladder_climbs_to_the_reboot(harness,
                                                                                             monkeypatch):
    """A model exo refuses to place again (or that gives no token) after the restart: the rung is `failed` with
    exo's reason, audited and paged; the problem still seen at the next probe climbs to the reboot."""
    from macfleet.flow.reboot import RebootResult

    h = harness(models=DECLARED, ladder={"model-placed": ["restart-exo", "reboot"]},
                checks=["reachable", "exo-running", "model-placed"])
    h.api.refuse = {LLAMA: "No cycles found with sufficient memory"}
    paged = []
    h.watcher.notifier.notify = paged.append
    rebooted = []
    monkeypatch.setattr(loop, "reboot_mesh", lambda *a, **k: rebooted.append(a) or RebootResult(
        mesh=h.mesh.name, result="ok", reason="r"))
    lost = report({"model-placed": {"studio-1": f"{LLAMA} is declared but exo has no instance of it"}},
                  checks=("reachable", "exo-running", "model-placed"))
    assert h.tick(lost).action == "restart-exo"
    result = h.audit()[-1]["result"]
    assert result.startswith("failed: exo restarted on every node, but models placed and answering: "), result
    assert "placing it failed: No cycles found with sufficient memory" in result
    assert paged and paged[-1]["result"] == result and h.api.asked == []  # nothing placed: nothing to ask
    assert h.tick(lost).action == "reboot" and rebooted


def test_a_restart_after_which_exo_does_not_verify_fails_without_placing_anything(harness):
    h = harness(models=DECLARED)
    h.exo_back = (False, "exo-peers: studio-3 is cut off from the mesh")
    h.tick(EXO_DOWN)
    assert h.steps == ["stop (watch)", f"start {','.join(NODES)}", "verify exo (watch)"] and h.api.placed == []
    assert h.audit()[-1]["result"] == ("failed: exo restarted on every node, but exo's /state was not verified "
                                       "within 120 s: exo-peers: studio-3 is cut off from the mesh")


def test_an_exo_that_did_not_stop_is_not_a_restart_and_is_named(harness):
    """exo still running where the stop could not end it (a process left in uninterruptible wait) keeps what it
    had, its instances too: the healer says the restart failed there, and starts exo again only on the others."""
    h = harness(models=DECLARED)
    stuck = {"pid": 4242, "command": "python exo", "state": "U"}
    h.stops = {"studio-3": ExoStop(pid=4242, ignored_term=[stuck], survived_kill=[stuck])}
    h.tick(EXO_DOWN)
    assert h.steps == ["stop (watch)", "start studio-1,studio-2,studio-4"] and h.api.placed == []
    result = h.audit()[-1]["result"]
    assert result.startswith("failed: exo did not stop on studio-3: pid 4242 (python exo, state U) did not exit on "
                             "SIGTERM and is still there after SIGKILL in state U"), result
    assert result.endswith("; started again on the others"), result


# -------------------------------------------------------------------- 7. the webhook


class _Hook(http.server.BaseHTTPRequestHandler):
    got: ClassVar[list] = []
    drip = False

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).got.append((self.path, self.headers.get("Authorization")))
        if type(self).drip:  # one byte at a time: each read within its timeout, the whole never done
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            for _ in range(100):
                self.wfile.write(b"X")
                self.wfile.flush()
                time.sleep(0.3)
            return
        self.send_response(204)
        self.end_headers()

    def log_message(self, *a):
        return


def _hook_server(drip: bool):
    handler = type("H", (_Hook,), {"got": [], "drip": drip})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, handler


def test_a_dripping_webhook_meets_a_deadline_and_failures_are_counted():
    """hostile #14: one byte every 4 s held the sender 40 s and more, silently."""
    server, _ = _hook_server(drip=True)
    counts, errors = [], []
    n = Notifier(f"http://127.0.0.1:{server.server_address[1]}/hook", on_error=errors.append, backoff_s=0.01,
                 count=counts.append, deadline_s=1.0)
    t0 = time.monotonic()
    n.notify({"action": "page"})
    n.close(wait_s=30)
    took = time.monotonic() - t0
    server.shutdown()
    assert took < 4 * 1.0 + 2, took  # four attempts, each cut at its deadline
    assert counts == ["retried", "retried", "retried", "failed"] and n.failed == 1
    assert "no complete answer within 1 s" in errors[0]


def test_a_webhook_url_with_user_and_password_is_sent_with_basic_auth_and_never_shown():
    server, handler = _hook_server(drip=False)
    port = server.server_address[1]
    n = Notifier(f"http://ops:s%3Acret@127.0.0.1:{port}/hook?x=1", count=lambda r: None)
    n.notify({"action": "page"})
    n.close(wait_s=10)
    server.shutdown()
    assert handler.got == [("/hook?x=1", "Basic b3BzOnM6Y3JldA==")] and n.sent == 1  # ops:s:cret
    assert redact(f"http://ops:s%3Acret@127.0.0.1:{port}/") == f"http://***@127.0.0.1:{port}/"


def test_a_webhook_url_that_cannot_be_sent_is_refused_at_start(example_inventory):
    fleet = load_inventory(example_inventory)
    mesh = fleet.meshes[0]
    bad = RemediationSettings(webhook="http://u:p@hooks.example.com:99999/x")
    mesh = mesh.model_copy(update={"settings": mesh.settings.model_copy(update={"remediation": bad})})
    with pytest.raises(UsageError, match="webhook") as exc:
        loop.validate_policy(mesh)
    assert "u:p" not in exc.value.message


# -------------------------------------------------------------------- 2. the page


def _get(port: int, path: str = "/metrics", token: str | None = None) -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_page_and_metrics_want_the_token_when_one_is_set(tmp_path):
    refused = []
    server = serve("127.0.0.1:0", Metrics(), lambda: "page", token="t" * 32, on_refused=refused.append)
    port = server.server_address[1]
    try:
        assert _get(port) == 401 and _get(port, "/") == 401 and _get(port, token="x" * 32) == 401
        assert _get(port, token="t" * 32) == 200 and _get(port, "/", token="t" * 32) == 200
        assert refused == ["unauthorized"] * 3
    finally:
        server.shutdown()
        server.server_close()
    secret = tmp_path / "token"
    secret.write_text("t" * 32 + "\n")
    secret.chmod(0o644)
    with pytest.raises(UsageError, match="readable by others"):
        read_token(secret)
    secret.chmod(0o600)
    assert read_token(secret) == "t" * 32
    secret.write_text("short\n")
    with pytest.raises(UsageError, match="16 to"):
        read_token(secret)
    assert not exposed("127.0.0.1:9464") and not exposed("[::1]:9464") and not exposed("localhost:1")
    assert exposed("0.0.0.0:9464") and exposed("10.0.0.5:9464") and exposed("mon.example.com:9464")


def test_a_client_dripping_its_headers_is_cut_at_the_deadline_and_a_full_server_answers_503():
    refused = []
    server = serve("127.0.0.1:0", Metrics(), lambda: "page", on_refused=refused.append, limit=2, deadline_s=1.0)
    port = server.server_address[1]
    try:
        slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        for s in slow:
            s.sendall(b"GET / HTTP/1.0\r\n")  # and never the rest
        waited = time.monotonic() + 10
        while len(server.active) < 2 and time.monotonic() < waited:  # both accepted: the server is full
            time.sleep(0.02)
        with socket.create_connection(("127.0.0.1", port)) as third:
            assert third.recv(100).startswith(b"HTTP/1.0 503")
        t0 = time.monotonic()
        for s in slow:
            s.settimeout(5)
            while s.recv(100):  # the server shuts it at its deadline
                pass
            s.close()
        assert time.monotonic() - t0 < 8  # 1 s deadline, checked every 0.5 s (slack for a loaded machine)
        assert "busy" in refused and refused.count("deadline") >= 2
        assert _get(port) == 200
    finally:
        server.shutdown()
        server.server_close()


def _lower_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))  # macOS launchd's default


def test_idle_clients_do_not_kill_the_healer(example_inventory, tmp_path):
    """hostile #2: 300 idle connections under a 256-descriptor limit: `Too many open files` saving the state,
    exit 1. A real `macfleet watch` (nodes that refuse SSH at once) keeps probing and saving."""
    (example_inventory / "hosts.yml").write_text(
        "macfleet:\n  children:\n    mesh1:\n      hosts:\n" + "".join(
            f"        studio-{i}:\n          ansible_host: 127.0.0.{i}\n          ansible_port: 1\n"
            f"          macfleet_model: \"Mac15,14\"\n" for i in (1, 2)))
    (example_inventory / "group_vars" / "all" / "watch.yml").write_text(
        "macfleet_remediation:\n  checks: [reachable]\n  debounce: 1\n  ladder: {}\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MACFLEET_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.Popen([sys.executable, "-m", "macfleet", "watch", "-i", str(example_inventory), "--interval",
                             "0.2", "--listen", f"127.0.0.1:{port}"], env=env, preexec_fn=_lower_fd_limit,
                            stderr=subprocess.PIPE, text=True)
    clients = []
    try:
        audit = None
        deadline = time.monotonic() + 30
        while audit is None and time.monotonic() < deadline:
            audit = next(iter(Path(os.environ["MACFLEET_CLUSTER_STATE_DIR"]).glob("*/audit.jsonl")), None)
            time.sleep(0.1)
        assert audit is not None
        for _ in range(300):
            try:
                clients.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:
                break
        before = len(audit.read_text().splitlines())
        state = next(Path(os.environ["MACFLEET_CLUSTER_STATE_DIR"]).glob("*/watch-state.json"))
        mtime = state.stat().st_mtime_ns
        time.sleep(3)
        assert proc.poll() is None, proc.stderr.read()
        assert len(audit.read_text().splitlines()) >= before + 5  # still probing...
        assert state.stat().st_mtime_ns != mtime  # ...and saving its state
        assert len(os.listdir(f"/proc/{proc.pid}/fd")) < 100
        assert "Too many open files" not in (proc.stderr.peek() if hasattr(proc.stderr, "peek") else "")
    finally:
        for c in clients:
            c.close()
        proc.terminate()
        out = proc.communicate(timeout=30)[1]
    assert proc.returncode == 0 and "internal error" not in out and "Too many open files" not in out, out[-2000:]


def test_enospc_is_a_reported_error_not_a_crash(tmp_path):
    from macfleet.watch.audit import AuditLog

    errors = []
    log = AuditLog(tmp_path / "a.jsonl", on_error=errors.append)
    real = os.write
    calls = {"n": 0}

    def full(fd, data):
        calls["n"] += 1
        if calls["n"] == 1:
            real(fd, bytes(data[:5]))  # a part went in before the disk filled
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    os.write = full
    try:
        assert log.append({"n": 1}) is False
    finally:
        os.write = real
    assert "No space left" in errors[0] and (tmp_path / "a.jsonl").read_text() == ""  # no half line
    assert log.append({"n": 2}) is True
    assert [json.loads(x)["n"] for x in (tmp_path / "a.jsonl").read_text().splitlines()] == [1, 2]


def test_the_token_file_is_checked_before_anything_starts(cli, example_inventory, tmp_path):
    loose = tmp_path / "token"
    loose.write_text("t" * 32)
    loose.chmod(0o644)
    r = cli("watch", "-i", str(example_inventory), "--listen-token-file", str(loose))
    assert r.exit_code == 2 and "--listen-token-file needs --listen" in r.output
    r = cli("watch", "-i", str(example_inventory), "--listen", "127.0.0.1:1", "--listen-token-file", str(loose))
    assert r.exit_code == 2 and "readable by others" in r.output
    assert "t" * 32 not in r.output


def test_a_reboot_s_clean_verification_ends_the_episode_at_once(harness, monkeypatch):
    """The reboot waited for every node and verified the mesh: that look is the settled one (the healer does
    not wait out settle_s to say the mesh recovered)."""
    from macfleet.flow.reboot import RebootResult

    h = harness(ladder={"rdma": ["reboot"]}, settle_s=600)
    monkeypatch.setattr(loop, "reboot_mesh", lambda *a, **k: RebootResult(
        mesh=h.mesh.name, result="ok", reason="r", verification=[HEALTHY]))
    h.tick(report({"rdma": {"studio-1": "RDMA wedged"}}))
    assert [e["decision"].split(" (")[0] for e in h.audit()][-1] == "healthy"
    assert h.audit()[-1]["decision"] == "healthy (recovered from rdma)"


def test_a_dead_switch_s_lock_is_not_taken_over_by_an_exo_restart(harness):
    """A rollout killed mid-switch left its lock with the phase its rerun repairs: restarting exo would start a
    release that never passed the health gate, and taking the lock over would throw the repair record away."""
    import socket as socket_
    from dataclasses import asdict

    from macfleet.act.lock import ClusterLock, LockRecord, lock_path

    h = harness(debounce=1)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = lock_path(h.fleet.root)
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = LockRecord(owner="rollout exo", pid=dead.pid, host=socket_.gethostname(),
                     created=datetime.now(UTC).isoformat(), ttl_s=3600, reason="r", phase={"phase": "switching"})
    path.write_text(json.dumps(asdict(rec)))
    h.tick(report({"exo-running": {"studio-2": "exo does not answer"}}))
    assert h.restarts == [] and "unfinished step (switching) of rollout exo" in h.audit()[-1]["result"]
    assert ClusterLock(path).read().phase == {"phase": "switching"}


def test_reset_clears_a_damaged_state(harness):
    h = harness()
    h.watcher.state_path.parent.mkdir(parents=True, exist_ok=True)
    h.watcher.state_path.write_text('{"meshes": {"mesh1": {"streak"')
    said = []
    loop.reset(h.fleet, [h.mesh], said.append)
    assert loop.load_states(h.watcher.state_path) == {} and "breaker closed" in said[-1]
    assert "the state file was damaged" in h.audit()[-1]["decision"]
    assert h.tick(HEALTHY).reason == "healthy"  # the running watcher takes the reset
