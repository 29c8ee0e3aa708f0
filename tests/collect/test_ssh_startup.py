"""What the collector imports at start-up, and that what it leaves out still works when asked for."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _fresh_python(code: str) -> str:
    """Run `code` in a new interpreter (imports as at a CLI's start), return its stdout."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_collector_and_doctors_command_table_import_no_parser_and_no_invoke() -> None:
    out = _fresh_python("""
        import sys
        import macfleet.collect.gather, macfleet.flow.doctor
        print(sorted(m for m in sys.modules if m == "invoke" or m.startswith(("macfleet.facts.", "macfleet.judge"))))
    """)
    assert out == "['macfleet.facts.commands', 'macfleet.facts.kinds']"  # the command tables, no parser


def test_an_ssh_config_match_exec_still_runs_through_invoke(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text('Match exec "test -d /"\n  User fromexec\nHost *\n  Port 2222\n')
    out = _fresh_python(f"""
        from pathlib import Path
        from macfleet.collect import ssh
        cfg = ssh._read_config(Path({str(config)!r}), "node-1")
        print(cfg.lookup("mac-1").get("user"), cfg.lookup("mac-1").get("port"))
    """)
    assert out == "fromexec 2222"


def test_doctors_command_imports_no_console_until_it_prints() -> None:
    """rich's Console is made on first use: `doctor --json` dials its Macs before paying for it."""
    out = _fresh_python("""
        import sys
        import macfleet.cli.app, macfleet.cli.doctor
        from macfleet.render import output
        before = "rich.console" in sys.modules
        output.info("probing")
        print(before, "rich.console" in sys.modules, output.err_console is output.err_console)
    """)
    assert out == "False True True"
