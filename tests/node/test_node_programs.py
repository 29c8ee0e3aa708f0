"""The node programs (macfleet/node) run here as a Mac runs them: the text `program` sends, given to a python3
with `-c` and the same argv and stdin, against a temporary directory. The interpreter is this machine's
/usr/bin/python3 where it exists (as on a Mac), else the one running the tests."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from macfleet.node import HERE, program

PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
PROGRAMS = sorted(p.stem for p in HERE.glob("*.py") if p.name != "__init__.py")


def run(name: str, *argv: str, stdin: str | bytes = "", env: dict | None = None, check: bool = True):
    data = stdin.encode() if isinstance(stdin, str) else stdin
    p = subprocess.run([PYTHON, "-c", program(name), *argv], input=data, capture_output=True, timeout=60,
                       env={**os.environ, **(env or {})})
    if check:
        assert p.returncode == 0, p.stderr.decode()
    return p


def last_json(p) -> object:
    return json.loads(p.stdout.decode().strip().splitlines()[-1])


def blake(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=32).hexdigest()


@pytest.mark.parametrize("name", PROGRAMS)
def test_each_program_is_python_3_9_and_the_standard_library_only(name: str) -> None:
    """macOS's /usr/bin/python3 is 3.9 (the Command Line Tools'): no newer syntax, nothing to install."""
    tree = ast.parse(program(name), feature_version=(3, 9))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)


@pytest.mark.parametrize("name", PROGRAMS)
def test_each_program_is_ascii(name: str) -> None:
    """It travels in an ssh command line and argv: no byte a remote locale could read otherwise."""
    assert program(name).isascii()


def test_a_shared_module_is_put_in_place_once() -> None:
    text = program("push_session")  # imports land and preflight, which both import digest
    assert "from macfleet" not in text
    assert text.count("def digest(") == 1 and text.count("def land_files(") == 1
    assert text == program("push_session")  # the same bytes each time


def test_a_program_importing_a_shared_module_otherwise_is_refused(tmp_path: Path, monkeypatch) -> None:
    from macfleet import node
    monkeypatch.setattr(node, "HERE", tmp_path)
    (tmp_path / "bad.py").write_text("from macfleet.node.digest import (\n    digest,\n)\n")
    with pytest.raises(ValueError, match="on one line"):
        node._expand("bad", set())


def _manifest(files: dict[str, bytes], executable: tuple[str, ...] = ()) -> dict:
    return {"files": [{"path": k, "size": len(v), "digest": blake(v), "executable": k in executable}
                      for k, v in files.items()]}


def test_land_moves_what_matches_removes_a_whole_wrong_file_and_keeps_a_partial(tmp_path: Path) -> None:
    staging, final = tmp_path / "staging", tmp_path / "final"
    files = {"a.bin": os.urandom(3000), "d/b.bin": b"bee" * 100, "c.bin": b"c" * 10, "e.bin": b"e" * 50}
    for rel, data in files.items():
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        (staging / rel).write_bytes(data)
    (staging / "c.bin").write_bytes(b"x" * 10)  # whole size, wrong bytes
    (staging / "e.bin").write_bytes(b"e" * 20)  # partial: rsync continues it
    man = _manifest(files, executable=("a.bin",))
    check = last_json(run("push_land", "check", str(staging), str(final), stdin=json.dumps(man)))
    assert check == {"ok": [], "bad": {k: "absent" for k in files}}
    out = last_json(run("push_land", "land", str(staging), str(final), stdin=json.dumps(man)))
    assert out == {"ok": ["a.bin", "d/b.bin"], "bad": {"c.bin": "digest differs", "e.bin": "size 20, expected 50"}}
    assert (final / "d" / "b.bin").read_bytes() == files["d/b.bin"] and os.access(final / "a.bin", os.X_OK)
    assert not (staging / "c.bin").exists() and (staging / "e.bin").exists()


def test_preflight_reports_final_staged_and_free_space(tmp_path: Path) -> None:
    models = tmp_path / "models"
    (models / "m").mkdir(parents=True)
    (models / "m" / "w.bin").write_bytes(b"w" * 100)
    (models / ".macfleet-staging" / "m").mkdir(parents=True)
    (models / ".macfleet-staging" / "m" / "x.bin").write_bytes(b"x" * 7)
    man = _manifest({"w.bin": b"w" * 100, "x.bin": b"x" * 30})
    out = last_json(run("push_preflight", str(models), "m", stdin=json.dumps(man)))
    assert out["have"] == {"w.bin": [100, blake(b"w" * 100)]} and out["staged"] == {"x.bin": 7}
    assert out["final"] == str(models / "m") and out["df_rc"] == 0 and "Filesystem" in out["df"]
    gone = last_json(run("push_preflight", str(tmp_path / "none" / "models"), "m", stdin=json.dumps(man)))
    assert gone["have"] == {} and gone["df_rc"] == 0  # df of the nearest directory that exists


def test_the_feed_continues_a_staged_part_and_answers_each_files_digest(tmp_path: Path) -> None:
    dest = tmp_path / "staging"
    (dest / "d").mkdir(parents=True)
    whole = os.urandom(5000)
    (dest / "d" / "f.bin").write_bytes(whole[:1200] + b"tail that goes")
    frames = json.dumps({"dir": str(dest), "path": "d/f.bin", "offset": 1200, "size": 5000}).encode() + b"\n"
    frames += whole[1200:]
    frames += json.dumps({"dir": str(dest), "path": "g.bin", "offset": 0, "size": 3}).encode() + b"\nabc"
    p = run("push_feed", stdin=frames)
    answers = [json.loads(line) for line in p.stdout.decode().splitlines()]
    assert answers == [{"path": "d/f.bin", "digest": blake(whole)}, {"path": "g.bin", "digest": blake(b"abc")}]
    assert (dest / "d" / "f.bin").read_bytes() == whole
    bad = run("push_feed", stdin=json.dumps({"dir": str(dest), "path": "../x", "offset": 0, "size": 1}) + "\n",
              check=False)
    assert bad.returncode == 1 and b"bad frame" in bad.stderr and not (tmp_path / "x").exists()


def test_the_session_answers_each_request_by_its_id(tmp_path: Path) -> None:
    known = tmp_path / "home" / ".macfleet" / "known_hosts_mesh"
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "f").write_bytes(b"12345")
    reqs = [{"id": 1, "op": "known_hosts", "text": "10.0.0.2 ssh-ed25519 AAAA\n"},
            {"id": 2, "op": "size", "dirs": [str(tmp_path / "src")]},
            {"id": 3, "op": "nope"},
            {"id": 4, "op": "land", "mode": "check", "staging": str(tmp_path / "s"), "final": str(tmp_path / "src"),
             "manifest": _manifest({"f": b"12345"})}]
    # as the controller does: the answers read before stdin closes (the session ends with it)
    p = subprocess.Popen([PYTHON, "-c", program("push_session"), json.dumps(["true"]), str(known),
                          "/opt/homebrew/bin"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write("".join(json.dumps(r) + "\n" for r in reqs))
    p.stdin.flush()
    answers = {a.pop("id"): a for a in (json.loads(p.stdout.readline()) for _ in reqs)}
    p.stdin.close()
    assert p.wait(30) == 0
    assert answers == {1: {}, 2: {"bytes": 5}, 3: {"error": "unknown op"}, 4: {"ok": ["f"], "bad": {}}}
    assert known.read_text() == "10.0.0.2 ssh-ed25519 AAAA\n" and oct(known.parent.stat().st_mode & 0o777) == "0o700"
    assert oct(known.stat().st_mode & 0o777) == "0o600"


def test_flip_points_current_at_a_release_and_read_sees_it(tmp_path: Path) -> None:
    root = tmp_path / "exo"
    for n in ("v1-aaa", "v2-bbb"):
        (root / "releases" / n).mkdir(parents=True)
    (root / "releases" / ".staging-v3").mkdir()
    bin_dir = tmp_path / "bin"  # launchctl: a job not loaded (this machine has no launchd)
    bin_dir.mkdir()
    (bin_dir / "launchctl").write_text("#!/bin/sh\nexit 113\n")
    (bin_dir / "launchctl").chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    assert last_json(run("exo_read", str(root), "org.example.exo", env=env)) == {
        "current": None, "releases": sorted(["v1-aaa", "v2-bbb"], key=lambda n: (
            (root / "releases" / n).stat().st_mtime, n)), "running": False}
    run("exo_flip", str(root), "v2-bbb")
    assert os.readlink(root / "current") == "releases/v2-bbb"
    assert last_json(run("exo_read", str(root), "org.example.exo", env=env))["current"] == "v2-bbb"
    missing = run("exo_flip", str(root), "v9", check=False)
    assert missing.returncode == 1 and b"release v9 is not on this node" in missing.stderr


def test_knock_says_which_address_accepted(tmp_path: Path) -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            closed = probe.getsockname()[1]  # bound, not listening: refused
            out = last_json(run("llama_knock", json.dumps([["127.0.0.1", port], ["127.0.0.1", closed]])))
    assert out[f"127.0.0.1:{port}"] is None and "refused" in out[f"127.0.0.1:{closed}"].lower()


def test_ports_files_of_each_release(tmp_path: Path) -> None:
    from macfleet.node.release_files import PORTS_FILE
    (tmp_path / "releases" / "a").mkdir(parents=True)
    (tmp_path / "releases" / "a" / PORTS_FILE).write_text('{"tcp": [52414]}\n')
    assert last_json(run("build_ports", str(tmp_path), "a", "b")) == {"a": '{"tcp": [52414]}\n', "b": None}


def test_preflight_says_df_did_not_start_and_answers_the_rest(tmp_path: Path) -> None:
    (tmp_path / "models" / "m").mkdir(parents=True)
    (tmp_path / "models" / "m" / "a").write_bytes(b"a")
    out = last_json(run("push_preflight", str(tmp_path / "models"), "m", stdin=json.dumps(_manifest({"a": b"a"})),
                        env={"PATH": str(tmp_path / "empty")}))  # no df on the PATH
    assert out["df_rc"] == 126 and out["df"] == "" and out["have"] == {"a": [1, blake(b"a")]}
