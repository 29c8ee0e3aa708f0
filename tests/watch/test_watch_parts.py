"""The loop's I/O parts on their own: reconnect backoff, the webhook's retries off the loop's thread."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from macfleet.collect.ssh import SshTarget, Unreachable
from macfleet.watch.notify import Notifier
from macfleet.watch.probe import BACKOFF_FIRST_S, KeptSession


def test_reconnect_backs_off_then_retries(tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("")
    kept = KeptSession(SshTarget(node="n", host="127.0.0.1", port=1, user=None, key_files=(), known_hosts=(known,),
                                 connect_timeout_s=2))
    with pytest.raises(Unreachable):
        kept.get()
    assert kept.backoff_s == BACKOFF_FIRST_S
    with pytest.raises(Unreachable, match="next attempt in"):
        kept.get()  # within the backoff: no new connection attempt
    kept.next_try = 0
    with pytest.raises(Unreachable):
        kept.get()
    assert kept.backoff_s == 2 * BACKOFF_FIRST_S
    kept.retry_now()
    assert kept.backoff_s == 0 and kept.next_try == 0


def test_webhook_retries_without_blocking():
    got, calls, answered = [], [], []
    release = threading.Event()  # the hook answers nothing until the caller's notify() has returned

    class Flaky(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            calls.append(1)
            release.wait(10)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if len(calls) < 3:
                self.send_response(500)
            else:
                got.append(json.loads(body))
                self.send_response(204)
            self.end_headers()
            answered.append(1)

        def log_message(self, *a):
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    errors = []
    n = Notifier(f"http://127.0.0.1:{server.server_address[1]}/", on_error=errors.append, backoff_s=0.05)
    n.notify({"action": "reboot"})
    assert not answered  # queued, not sent inline: sent inline, notify() would have waited for an answer
    release.set()
    n.close(wait_s=20)
    server.shutdown()
    assert got == [{"action": "reboot"}] and len(calls) == 3 and n.sent == 1 and not errors


def test_webhook_gives_up_and_says_so():
    errors = []
    n = Notifier("http://127.0.0.1:1/", on_error=errors.append, backoff_s=0.01)
    n.notify({"action": "page"})
    n.close(wait_s=20)
    assert n.failed == 1 and "failed after 4 attempts" in errors[0]
