"""act/exoapi.py: exo's API through curl as it runs on a node. The node is stood in for by a local shell (the
session's `stream` runs the same command line here) and exo by the lab's stand-in, in process, on 127.0.0.1;
what is proven: the curl command line, bodies on stdin, SSE read as it comes, exo's refusals as ExoApiError."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from macfleet.act.exoapi import ExoApi, curl_argv
from macfleet.collect.ssh import RemoteExit
from macfleet.errors import ExoApiError
from macfleet.facts.exoapi import parse_await, parse_chat_chunk, parse_cluster, parse_previews, parse_stats
from tests import test_lab_exo_standin as standin
from tests.test_lab_exo_instances import MODEL, _model_on
from tests.test_lab_exo_standin import _get, _rdma_pairs, _wait

start_mesh = standin.start_mesh  # the fixture


class LocalShell:
    """A session whose node is this machine: `stream` runs the command line with sh, stdin given."""

    target = SimpleNamespace(node="node-a")

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.stdins: list[bytes] = []

    def stream(self, command_line: str, *, stdin: bytes = b"", timeout_s: float) -> Iterator[bytes]:
        self.lines.append(command_line)
        self.stdins.append(stdin)
        proc = subprocess.Popen(["sh", "-c", command_line], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        proc.stdin.write(stdin)
        proc.stdin.close()
        yield from iter(lambda: proc.stdout.read1(65536), b"")
        if proc.wait(timeout_s) != 0:
            raise RemoteExit(proc.returncode, proc.stderr.read().decode())


def test_curl_reads_headers_keeps_bodies_off_argv_and_streams():
    argv = curl_argv("POST", "http://127.0.0.1:52415/v1/chat/completions", body=True, max_time_s=30, stream=True)
    assert argv[:3] == ["curl", "-s", "-i"] and "-N" in argv and argv[-2:] == ["@-", argv[-1]]
    assert "Expect:" in argv  # no `100 Continue` before the status line
    assert "--max-filesize" in curl_argv("GET", "http://127.0.0.1:52415/state", body=False, max_time_s=5)


def test_client_places_awaits_streams_and_reports_refusals(start_mesh, tmp_path: Path):
    _model_on(tmp_path, range(2))
    _mesh, apps = start_mesh(2)
    shell = LocalShell()
    api = ExoApi(shell, port=apps[0].port)
    _wait(lambda: len(_rdma_pairs(_get(apps[0].port, "/state")[2])) == 2
          and len(_get(apps[0].port, "/state")[2]["nodeMemory"]) == 2)

    previews = parse_previews(api.json("GET", "/instance/previews", query={"model_id": MODEL}))
    assert any(p.kind == "MlxJaccl" and len(p.nodes) == 2 and p.error is None for p in previews)
    api.json("POST", "/place_instance", body={"model_id": MODEL, "sharding": "Pipeline",
                                              "instance_meta": "MlxJaccl", "min_nodes": 2})
    ready = [parse_await(e.data) for e in api.events("GET", "/instance/await",
                                                     query={"model_id": MODEL, "timeout_seconds": 20}) if e.data]
    assert ready[0][0] == "ready"
    cluster = _wait(lambda: (c := parse_cluster(api.json("GET", "/state"))) and c.instances
                    and c.instances[0].ready and c)
    inst = cluster.instances[0]
    assert inst.instance_id == ready[0][1] and inst.kind == "MlxJaccl" and inst.sharding == "Pipeline"
    assert sorted(inst.nodes) == sorted(cluster.nodes) and cluster.models[inst.nodes[0]] == [MODEL]

    prompt = "a prompt that is nobody's business"
    events = list(api.events("POST", "/v1/chat/completions", body={
        "model": MODEL, "messages": [{"role": "user", "content": prompt}], "stream": True, "max_tokens": 20}))
    assert all(prompt not in line for line in shell.lines) and prompt.encode() in shell.stdins[-1]
    pieces = [parse_chat_chunk(e.data) for e in events if e.data is not None]
    assert "".join(p.text for p in pieces).endswith(prompt) and pieces[-1].completion_tokens == 16
    stats = next(s for e in events if e.comment and (s := parse_stats(e.comment)))
    assert stats.generation_tokens == 16 and events[-1].done

    with pytest.raises(ExoApiError) as e:
        list(api.events("POST", "/v1/chat/completions", body={"model": "acme/absent", "messages": [], "stream": True}))
    assert e.value.status == 404 and "No instance found for model acme/absent" in e.value.message
    with pytest.raises(ExoApiError) as e:
        api.json("DELETE", "/instance/no-such-instance")
    assert "Instance not found" in e.value.message


def test_nothing_listening_is_said_so():
    api = ExoApi(LocalShell(), port=9)  # the discard port: nothing listens
    with pytest.raises(ExoApiError) as e:
        api.json("GET", "/state")
    assert "not answering on port 9" in e.value.message


def test_a_streamed_line_is_bounded() -> None:
    """Hostile input: a node (or what answers on exo's port) that streams one endless line is refused once the line
    passes MAX_LINE, not held in memory until the deadline."""
    from macfleet.act.exoapi import MAX_LINE, _lines
    from macfleet.errors import ExoApiError

    fine = list(_lines(iter([b"HTTP/1.1 200 OK\r\n\r\ndata: {}", b"\n"])))
    assert fine == ["HTTP/1.1 200 OK\r\n", "\r\n", "data: {}\n"]
    endless = (b"x" * 65536 for _ in range(MAX_LINE // 65536 + 2))
    with pytest.raises(ExoApiError, match="a line over"):
        list(_lines(endless, "studio-1"))


class Answer:
    """A session whose `stream` gives back one canned `curl -i` output (the body cut or whole)."""

    target = SimpleNamespace(node="node-a")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def stream(self, command_line: str, *, stdin: bytes = b"", timeout_s: float) -> Iterator[bytes]:
        yield self.raw


def test_an_answer_shorter_than_its_content_length_is_refused_not_parsed():
    body = b'{"instances": {}, "topology": {"nodes": []}}'
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
    assert ExoApi(Answer(head + body)).json("GET", "/state") == body.decode()
    with pytest.raises(ExoApiError, match=rf"GET /state was cut off: 20 of {len(body)} bytes came"):
        ExoApi(Answer(head + body[:20])).json("GET", "/state")
