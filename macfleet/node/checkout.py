"""What the builder reads of the checkout before building (Python 3.9 on a Mac: no tomllib, so pyproject.toml is
read by its table headers and keys, enough for the two facts below; a pyproject it cannot read has neither).
- `[project.optional-dependencies]` has `mlx`: exo moved MLX into that extra at exo 4466cd532 (pyproject.toml);
  `uv sync` installs no extra unless asked, so the build gets `--extra mlx` through $MACFLEET_UV_EXTRAS.
- `[tool.uv.sources]` gives `mlx` a `git` source: uv builds MLX from source on the builder, which compiles its
  Metal kernels with Xcode's `metal` (exo README: Xcode "provides the Metal ToolChain required for MLX
  compilation"; in every exo since v1.0.71 at least, and at b5375f8, pyproject.toml's mlx source is a git fork).
  Then the builder must have full Xcode selected (`xcode-select -p` under an .app, not the Command Line Tools,
  which have no metal: MLX's install docs, "Metal not found") and a `metal` that runs (Xcode 26 ships the
  Metal toolchain as a separate component: "cannot execute tool 'metal' due to missing Metal Toolchain; use:
  xcodebuild -downloadComponent MetalToolchain", actions/runner-images#13094). If not, nothing is built and
  the answer says what each check gave (judge/build.toolchain_refusal words it)."""

import os
import re
import subprocess


def _toml_tables(text):
    # {table: {key: the text of its value, continuation lines included}}, for keys at the start of a line
    tables, table, key = {}, "", None
    for raw in text.splitlines():
        stripped = raw.strip()
        if raw.startswith("[") and stripped.endswith("]"):
            table, key = stripped.strip("[]").strip(), None
        elif raw[:1] not in (" ", "\t", "#", "", "]") and "=" in raw:
            key = raw.split("=", 1)[0].strip().strip('"')
            tables.setdefault(table, {})[key] = raw.split("=", 1)[1]
        elif key is not None:
            tables[table][key] += "\n" + raw
    return tables


def read_checkout(release):
    out = {"extras": [], "mlx_from_git": False}
    try:
        with open(os.path.join(release, "pyproject.toml"), encoding="utf-8") as f:
            tables = _toml_tables(f.read(1 << 20))
    except (OSError, ValueError):
        return out
    if "mlx" in tables.get("project.optional-dependencies", {}):
        out["extras"].append("mlx")
    out["mlx_from_git"] = re.search(r"\bgit\s*=", tables.get("tool.uv.sources", {}).get("mlx", "")) is not None
    return out


# exo's peer ports, from the command-line defaults in its src/exo/main.py: `--zenoh-port` (TCP, 52414) and
# `--discovery-port` (UDP, 52413) since exo 09f9ea313; `--libp2p-port` before (TCP, default 0: the OS picks a
# port, which no rule can name, so nothing is listed). The API port is macfleet's own setting (exo.port).
PORT_OPTIONS = {"zenoh-port": "tcp", "discovery-port": "udp", "libp2p-port": "tcp"}


def read_ports(release):
    try:
        with open(os.path.join(release, "src", "exo", "main.py"), encoding="utf-8") as f:
            text = f.read(1 << 20)
    except (OSError, ValueError):
        return None
    ports = {"tcp": [], "udp": []}
    for option, proto in PORT_OPTIONS.items():
        m = re.search(r"[\"']--" + option + r"[\"']", text)
        if m is None:
            continue
        call = re.split(r"add_argument\s*\(", text[m.end():m.end() + 600])[0]
        d = re.search(r"\bdefault\s*=\s*(\d+)", call)
        if d and 0 < int(d.group(1)) < 65536:
            ports[proto].append(int(d.group(1)))
    return ports


def toolchain(path_env):
    def run(argv):
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=dict(os.environ, PATH=path_env))
            return {"rc": p.returncode, "out": (p.stdout.strip() + "\n" + p.stderr.strip()).strip()[-500:]}
        except Exception as exc:  # not there, not runnable, too slow: that check's failure
            return {"rc": -1, "out": str(exc)[-500:]}
    checks = {"xcode-select -p": run(["xcode-select", "-p"])}
    selected = checks["xcode-select -p"]
    if selected["rc"] == 0 and ".app/Contents/Developer" in selected["out"]:
        checks["xcrun -f metal"] = run(["xcrun", "-f", "metal"])
        if checks["xcrun -f metal"]["rc"] == 0:
            checks["xcrun metal --version"] = run(["xcrun", "metal", "--version"])
    ok = selected["rc"] == 0 and ".app/Contents/Developer" in selected["out"] and all(
        c["rc"] == 0 for c in checks.values()) and len(checks) == 3
    return ok, checks
