"""exo's HTTP API on a node, reached the way doctor reads `/state`: `curl` on the node against
127.0.0.1:<exo port>, over the node's one SSH login (collect/ssh.py). exo's API has no authentication and
listens on every address (exo b5375f8 src/exo/api/main.py:334-341,1942); going through SSH needs no port
opened to the controller and keeps the packet filter as it is.

Request bodies go on curl's stdin (`--data-binary @-`), never in its argv: a prompt is the user's data.
Streamed answers (`/instance/await`, chat with `stream: true`) are read as they come. Parsing is facts/exoapi.py's.
"""

from __future__ import annotations

import itertools
import json
import shlex
import urllib.parse
from collections.abc import Iterator
from typing import TYPE_CHECKING

from macfleet.constants import CURL_REFUSED, CURL_TIMEOUT, EXO_PORT
from macfleet.errors import ExoApiError, UnreachableError
from macfleet.facts.exo import ExoHttp, parse_http_response
from macfleet.facts.exoapi import SseEvent, parse_api_error, sse_events

if TYPE_CHECKING:
    from macfleet.collect.ssh import SshSession

MAX_ANSWER = 8 * 1024 * 1024  # bytes of a whole (not streamed) answer read at most
MAX_LINE = 1024 * 1024  # bytes of one line of a streamed answer (one SSE event of exo's is a few hundred)
SSH_SLACK_S = 10.0  # the SSH side waits this much longer than curl's own --max-time
CALL_TIMEOUT_S = 20.0  # a whole (not streamed) answer of exo's API


def curl_argv(method: str, url: str, *, body: bool, max_time_s: float, stream: bool = False) -> list[str]:
    """curl on the node: status line and headers (-i), no progress (-s), the body on stdin when there is one.
    `Expect:` off, so curl sends a large body at once rather than waiting for `100 Continue`."""
    argv = ["curl", "-s", "-i", "--max-time", f"{max_time_s:g}", "-X", method]
    if stream:
        argv.append("-N")
    else:
        argv += ["--max-filesize", str(MAX_ANSWER)]
    if body:
        argv += ["-H", "Content-Type: application/json", "-H", "Expect:", "--data-binary", "@-"]
    return [*argv, url]


class ExoApi:
    """exo's API on the node `session` is logged in to."""

    def __init__(self, session: SshSession, *, port: int = EXO_PORT, node: str | None = None) -> None:
        self.session = session
        self.port = int(port)
        self.node = node or session.target.node

    def url(self, path: str, query: dict[str, str | int | float] | None = None) -> str:
        q = f"?{urllib.parse.urlencode(query)}" if query else ""
        return f"http://127.0.0.1:{self.port}{path}{q}"

    def _run(self, method: str, path: str, query: dict | None, body: dict | None, timeout_s: float,
             stream: bool) -> Iterator[bytes]:
        from macfleet.collect.ssh import CommandTimeout, RemoteExit, Unreachable

        argv = curl_argv(method, self.url(path, query), body=body is not None, max_time_s=timeout_s, stream=stream)
        data = json.dumps(body).encode() if body is not None else b""
        try:
            yield from self.session.stream(shlex.join(argv), stdin=data, timeout_s=timeout_s + SSH_SLACK_S)
        except RemoteExit as exc:
            if exc.rc == CURL_REFUSED:
                raise ExoApiError(f"{self.node}: exo is not answering on port {self.port} (connection refused)",
                                  hint="is exo running there? `macfleet doctor` says why not", node=self.node) from None
            if exc.rc == CURL_TIMEOUT:
                raise ExoApiError(f"{self.node}: exo gave no complete answer to {method} {path} within "
                                  f"{timeout_s:g} s", node=self.node) from None
            raise ExoApiError(f"{self.node}: curl {method} {path} failed ({exc})", node=self.node) from None
        except (Unreachable, CommandTimeout) as exc:
            raise UnreachableError({self.node: str(exc)}) from None

    def call(self, method: str, path: str, *, query: dict | None = None, body: dict | None = None,
             timeout_s: float = CALL_TIMEOUT_S) -> ExoHttp:
        """One whole answer (status, headers, body); ExoApiError when less came than its Content-Length."""
        raw = b"".join(self._run(method, path, query, body, timeout_s, stream=False))
        http = parse_http_response(raw.decode("utf-8", errors="replace"))
        declared, got = http.headers.get("content-length", ""), _body_bytes(raw)
        if declared.isdigit() and got < int(declared):
            raise ExoApiError(f"{self.node}: exo's answer to {method} {path} was cut off: {got} of {declared} "
                              "bytes came", node=self.node)
        return http

    def json(self, method: str, path: str, *, query: dict | None = None, body: dict | None = None,
             timeout_s: float = CALL_TIMEOUT_S, ok: tuple[int, ...] = (200,)) -> str:
        """The body of an answer whose status is in `ok`; ExoApiError with exo's own message otherwise."""
        http = self.call(method, path, query=query, body=body, timeout_s=timeout_s)
        if http.status not in ok:
            said = parse_api_error(http.body)
            raise ExoApiError(f"{self.node}: exo answered {method} {path} with {http.status}: {said}",
                              node=self.node, status=http.status, exo_says=said)
        return http.body

    def events(self, method: str, path: str, *, query: dict | None = None, body: dict | None = None,
               timeout_s: float = 300.0) -> Iterator[SseEvent]:
        """The server-sent events of a streamed answer, as they come; ExoApiError if exo refuses the request."""
        lines = _lines(self._run(method, path, query, body, timeout_s, stream=True), self.node)
        status = _head(lines)
        if status != 200:
            said = parse_api_error("".join(itertools.islice(lines, 1000))[:MAX_ANSWER])
            raise ExoApiError(f"{self.node}: exo answered {method} {path} with {status}: {said}",
                              node=self.node, status=status, exo_says=said)
        yield from sse_events(lines)


def _body_bytes(raw: bytes) -> int:
    """How many bytes of body `curl -i` printed after the headers' blank line."""
    for blank in (b"\r\n\r\n", b"\n\n"):
        if (at := raw.find(blank)) >= 0:
            return len(raw) - at - len(blank)
    return 0


def _lines(chunks: Iterator[bytes], node: str = "the node") -> Iterator[str]:
    """A streamed answer's lines as they come; a line longer than MAX_LINE is refused, not held."""
    buf = b""
    for chunk in chunks:
        buf += chunk
        *whole, buf = buf.split(b"\n")
        if len(buf) > MAX_LINE or any(len(line) > MAX_LINE for line in whole):
            raise ExoApiError(f"{node}: exo's streamed answer has a line over {MAX_LINE} bytes: not read further",
                              node=node)
        for line in whole:
            yield line.decode("utf-8", errors="replace") + "\n"
    if buf:
        yield buf.decode("utf-8", errors="replace")


def _head(lines: Iterator[str]) -> int:
    """Read the status line and headers of `curl -i`; the status (0 when there was none)."""
    status = 0
    for line in lines:
        text = line.strip()
        if text.startswith("HTTP/"):
            parts = text.split()
            status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        elif not text:
            return status
    return status
