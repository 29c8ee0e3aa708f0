"""Each fact stated once (issue 26 item 4; architecture.md §3 items 5-8): exo's port, llama.cpp's rpc port, the
models directory, exo's LaunchDaemon label, the pmset defaults, Homebrew's bin directory, the controller's state
paths and the command timeout are defined in macfleet/constants.py (or, for a controller path, one function) and
derived everywhere else.

Two tests: the playbook side's copies (role defaults, their argument specs and playbooks/vars/defaults.yml, which
plain ansible-playbook needs) equal the Python source, fact by fact; and no other file of macfleet/ or
playbooks/ writes a literal of one of them. Markdown (READMEs, docs) is prose and not scanned.

The lab's stand-ins imitate programs that are not ours: a stand-in may state that program's own default (exo's
API port, rpc-server's port) where it cites it, as the real program does, because a stand-in is copied onto a
node and runs there without macfleet (lab/exo/standin.py is copied into every lab build). Every other lab file
derives from macfleet/constants.py like the product. Those few places are listed below, each with its reason.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import jinja2
import pytest
import yaml

from macfleet import constants as C
from macfleet.facts.kinds import DEFAULT_TIMEOUT_S

ROOT = Path(__file__).resolve().parent.parent
ROLES = ROOT / "playbooks" / "roles"
SOURCE = "macfleet/constants.py"

# fact -> the pattern of its literal (not a derivation: `{{ exo_label }}`, `EXO_PORT`)
LITERALS: dict[str, str] = {
    "exo's API port": r"(?<![\d.])52415(?![\d])",
    "llama.cpp's rpc port": r"(?<![\d.])50052(?![\d])",
    "the models directory": r"\.exo/models",
    "exo's LaunchDaemon label": r"org\.macfleet\.exo\b(?!-)",
    "rpc-server's label prefix": r"org\.macfleet\.llama-rpc",
    "the IP plan's pool": r"10\.213\.0\.0/16",
    "the pmset defaults": r"disksleep\W{0,4}0\b",
    "the wired-memory reserve": r"reserve\w*\W{1,6}16384",
    "Homebrew's bin directory": r"/opt/homebrew/bin",
    "the history file": r"history\.jsonl",
    "the per-inventory state tag": r"blake2b\(str\((?:Path\()?(?:inventory_)?root",
    "the command timeout": r"timeout_s: float = 15\b|TIMEOUT_S = 15\b",
}

# The playbook side's copies, checked equal to the source by test_playbook_copies_equal_the_python_source.
PARITY_FILES = {
    *(f"playbooks/roles/{r}/{f}"
      for r in ("exo", "exo_service", "pf", "llama_rpc", "pmset", "sudoers", "homebrew", "gpu")
      for f in ("defaults/main.yml", "meta/argument_specs.yml")),
    "playbooks/vars/defaults.yml",
}

# (facts, file glob, the line it may be on (None: any), why): the places that may state a fact besides its source
ALLOWED: list[tuple[str | tuple[str, ...], str, str | None, str]] = [
    (("exo's API port", "the models directory"), "macfleet/lab/exo/standin.py", None,
     "exo's own defaults and behaviour (cited there); the stand-in is copied into builds and runs without macfleet"),
    ("exo's API port", "macfleet/lab/exo/build.py", '"--api-port"',
     "the lab source's main.py imitates exo's src/exo/main.py argparse line (cited) for act/build.py to read"),
    ("llama.cpp's rpc port", "macfleet/lab/llama/rpc_server.py", None,
     "rpc-server's own default and help text (cited); the stand-in runs on a node without macfleet"),
    ("Homebrew's bin directory", "macfleet/lab/exo/standin.py", "EXTRA_PATH = ",
     "the stand-in is copied into builds and runs without macfleet: its PATH imitates a Mac's"),
    ("Homebrew's bin directory", "macfleet/lab/macos/*.py", None,
     "the macOS stand-ins run on a lab node with only macfleet/lab/ on their path (lab/control.py standin_wrapper)"),
    ("the per-inventory state tag", "macfleet/paths.py", None, "the one function naming an inventory's state files"),
    ("the history file", "macfleet/paths.py", None, "the one function naming an inventory's state files"),
    ("the command timeout", "macfleet/facts/kinds.py", "DEFAULT_TIMEOUT_S = ", "the one default command timeout"),
]


def _allowed(fact: str, rel: str, line: str) -> bool:
    return any(fact in _facts(f) and fnmatch.fnmatch(rel, glob) and (on is None or on in line)
               for f, glob, on, _why in ALLOWED)


def _facts(f: str | tuple[str, ...]) -> tuple[str, ...]:
    return (f,) if isinstance(f, str) else f


def _scanned() -> list[Path]:
    files = [*(ROOT / "macfleet").rglob("*.py"), *(ROOT / "playbooks").rglob("*")]
    return sorted(p for p in files if p.is_file() and p.suffix != ".md" and "__pycache__" not in p.parts
                  and p.suffix not in (".pyc",))


def literals_outside_their_source() -> dict[str, list[str]]:
    """fact -> every `file:line` writing it outside the source, the parity-checked copies and ALLOWED."""
    found: dict[str, list[str]] = {fact: [] for fact in LITERALS}
    for path in _scanned():
        rel = path.relative_to(ROOT).as_posix()
        if rel == SOURCE or rel in PARITY_FILES:
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for fact, pattern in LITERALS.items():
                if re.search(pattern, line) and not _allowed(fact, rel, line):
                    found[fact].append(f"{rel}:{n}")
    return {fact: where for fact, where in found.items() if where}


def test_no_fact_is_written_outside_its_one_source() -> None:
    found = literals_outside_their_source()
    assert not found, "written again instead of derived from macfleet/constants.py:\n" + "\n".join(
        f"  {fact}: {', '.join(where)}" for fact, where in found.items())


def test_every_allowed_place_still_states_its_fact() -> None:
    """The exceptions only shrink: one no longer needed is removed from ALLOWED."""
    for facts, glob, on, _why in ALLOWED:
        lines = [line for p in ROOT.glob(glob) for line in p.read_text().splitlines() if on is None or on in line]
        assert any(re.search(LITERALS[fact], line) for fact in _facts(facts) for line in lines), (
            f"{glob} no longer states {facts}: drop it")


def test_the_scan_sees_a_literal_written_again(tmp_path: Path) -> None:
    line = 'port = meshes[0].settings.exo.port if meshes else 52415'
    assert re.search(LITERALS["exo's API port"], line)
    assert not re.search(LITERALS["exo's API port"], "port: int = Field(default=EXO_PORT)")
    assert re.search(LITERALS["exo's LaunchDaemon label"], "/Library/LaunchDaemons/org.macfleet.exo.plist")
    assert not re.search(LITERALS["exo's LaunchDaemon label"], "org.macfleet.exo-build")
    assert re.search(LITERALS["the pmset defaults"], "pmset.update(sleep=\"0\", disksleep=\"0\")")
    assert re.search(LITERALS["the pmset defaults"], "{'sleep': 0, 'disksleep': 0}")


def _yaml(rel: str) -> dict:
    return yaml.safe_load((ROOT / rel).read_text()) or {}


def _defaults(role: str) -> dict:
    return _yaml(f"playbooks/roles/{role}/defaults/main.yml")


def _spec_default(role: str, option: str) -> object:
    return _yaml(f"playbooks/roles/{role}/meta/argument_specs.yml")["argument_specs"]["main"]["options"][option][
        "default"]


def _render(text: str, **values: object) -> str:
    return jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(text).render(**values)


# (where, what it says, what it must equal): every copy the playbook side keeps of a fact
PARITY: list[tuple[str, object, object]] = [
    ("exo defaults exo_port", _defaults("exo")["exo_port"], C.EXO_PORT),
    ("exo spec exo_port", _spec_default("exo", "exo_port"), C.EXO_PORT),
    ("exo defaults exo_models_dir", _render(_defaults("exo")["exo_models_dir"], exo_home="~"), C.EXO_MODELS_DIR),
    ("exo defaults exo_install_root", _defaults("exo")["exo_install_root"], C.EXO_INSTALL_ROOT),
    ("exo defaults exo_label", _defaults("exo")["exo_label"], C.EXO_LABEL),
    ("exo spec exo_label", _spec_default("exo", "exo_label"), C.EXO_LABEL),
    ("exo defaults exo_plist", _render(_defaults("exo")["exo_plist"], exo_label=C.EXO_LABEL), C.EXO_PLIST),
    ("exo defaults exo_path, first", _defaults("exo")["exo_path"].split(":")[0], C.HOMEBREW_BIN),
    ("exo_service defaults label", _defaults("exo_service")["exo_service_label"], C.EXO_LABEL),
    ("exo_service spec label", _spec_default("exo_service", "exo_service_label"), C.EXO_LABEL),
    ("sudoers defaults sudoers_exo_label", _defaults("sudoers").get("sudoers_exo_label"), C.EXO_LABEL),
    ("homebrew defaults homebrew_brew", _defaults("homebrew")["homebrew_brew"], f"{C.HOMEBREW_BIN}/brew"),
    ("pf defaults pf_tcp_ports", _defaults("pf")["pf_tcp_ports"], [C.EXO_PORT]),
    ("pf spec pf_tcp_ports", _spec_default("pf", "pf_tcp_ports"), [C.EXO_PORT]),
    ("pf defaults pf_mesh_tcp_ports", _defaults("pf")["pf_mesh_tcp_ports"], [C.LLAMA_RPC_PORT]),
    ("pf spec pf_mesh_tcp_ports", _spec_default("pf", "pf_mesh_tcp_ports"), [C.LLAMA_RPC_PORT]),
    ("llama_rpc defaults port", _defaults("llama_rpc")["llama_rpc_port"], C.LLAMA_RPC_PORT),
    ("llama_rpc spec port", _spec_default("llama_rpc", "llama_rpc_port"), C.LLAMA_RPC_PORT),
    ("llama_rpc defaults label prefix", _defaults("llama_rpc")["llama_rpc_label_prefix"], C.LLAMA_RPC_LABEL_PREFIX),
    ("llama_rpc spec label prefix", _spec_default("llama_rpc", "llama_rpc_label_prefix"), C.LLAMA_RPC_LABEL_PREFIX),
    ("sudoers defaults llama label prefix", _defaults("sudoers").get("sudoers_llama_label_prefix"),
     C.LLAMA_RPC_LABEL_PREFIX),
    ("sudoers spec llama label prefix", _spec_default("sudoers", "sudoers_llama_label_prefix"),
     C.LLAMA_RPC_LABEL_PREFIX),
    ("sudoers spec exo label", _spec_default("sudoers", "sudoers_exo_label"), C.EXO_LABEL),
    ("gpu defaults wired reserve", _defaults("gpu")["gpu_wired_reserve_mb"], C.WIRED_RESERVE_MB),
    ("gpu spec wired reserve", _spec_default("gpu", "gpu_wired_reserve_mb"), C.WIRED_RESERVE_MB),
    ("pmset defaults pmset_settings", _defaults("pmset")["pmset_settings"], dict(C.PMSET_DEFAULTS)),
    ("pmset spec pmset_settings", _spec_default("pmset", "pmset_settings"), dict(C.PMSET_DEFAULTS)),
]


@pytest.mark.parametrize(("where", "says", "source"), PARITY, ids=[p[0] for p in PARITY])
def test_playbook_copies_equal_the_python_source(where: str, says: object, source: object) -> None:
    assert says == source, f"{where}: {says!r}, but macfleet/constants.py says {source!r}"


def test_the_plays_defaults_equal_the_inventory_models() -> None:
    """playbooks/vars/defaults.yml: what the plays use where the inventory leaves a setting out."""
    from macfleet.inventory.model import ExoSettings, IpPlanSettings, LlamaSettings, PowerSettings

    d = _yaml("playbooks/vars/defaults.yml")["macfleet_defaults"]
    exo, power = ExoSettings(), PowerSettings()
    assert d["exo"] == {"port": exo.port, "models_dir": exo.models_dir, "install_root": exo.install_root,
                        "label": C.EXO_LABEL}
    assert d["power"] == {"pmset": power.pmset, "wired_limit_mb": power.wired_limit_mb,
                          "wired_reserve_mb": power.wired_reserve_mb}
    assert d["llama"] == {"rpc_port": LlamaSettings().rpc_port, "label_prefix": C.LLAMA_RPC_LABEL_PREFIX}
    assert d["ipplan"] == {"pool": str(IpPlanSettings().pool)}
    assert (exo.port, exo.models_dir, power.pmset, LlamaSettings().rpc_port, str(IpPlanSettings().pool)) == (
        C.EXO_PORT, C.EXO_MODELS_DIR, dict(C.PMSET_DEFAULTS), C.LLAMA_RPC_PORT, C.IP_POOL)


def test_the_collectors_default_timeout_is_the_kinds() -> None:
    from macfleet.collect.commands import CommandSpec

    assert CommandSpec("x", ("true",)).timeout_s == DEFAULT_TIMEOUT_S


def test_an_inventorys_state_files_share_one_tag_and_one_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    """architecture.md §3 item 7: the per-inventory tag was computed twice (act/lock.py, watch/loop.py), the
    history file derived from the lock's name by string replacement and written in two schemas (a reboot's
    entries had no action and no healthy, so `rollout history` showed them blank and unhealthy)."""
    from types import SimpleNamespace

    from macfleet.act.lock import ClusterLock, lock_path, read_history
    from macfleet.flow import reboot as flow_reboot
    from macfleet.flow.models import transfer_cache
    from macfleet.paths import cluster_dir, history_file, inventory_tag, model_cache_dir, state_dir
    from macfleet.watch.loop import watch_paths

    monkeypatch.setenv("MACFLEET_STATE_DIR", str(tmp_path / "state"))
    inv = tmp_path / "inventories" / "lab"
    inv.mkdir(parents=True)
    tag = inventory_tag(inv)
    fleet = SimpleNamespace(root=inv)
    assert lock_path(inv).parent == history_file(inv).parent == cluster_dir(inv) and cluster_dir(inv).name == tag
    assert {p.parent for p in watch_paths(fleet)} == {cluster_dir(inv)}
    assert transfer_cache(fleet) == model_cache_dir() == state_dir() / "models"

    lock = ClusterLock(lock_path(inv))
    held = lock.acquire("reboot", "rdma wedged")
    result = flow_reboot.RebootResult(mesh="m", result="ok", reason="rdma wedged")
    flow_reboot._finish(inv, lock, held, result, SimpleNamespace(name="m"), "rdma wedged", "t0")
    from macfleet.flow.rollout import _history
    _history(fleet, {"action": "rollback", "from": "b", "to": "a", "healthy": True})
    entries = read_history(inv)
    assert [(e["action"], e["healthy"]) for e in entries] == [("reboot", True), ("rollback", True)]
    assert all("time" in e for e in entries)
