"""What `macfleet bootstrap` leaves on a Mac, for a prepared lab node: the same files, rendered from the same
role templates (playbooks/roles/*/templates) with the same values, so a prepared lab is a bootstrapped mesh
and cannot drift from what the playbook writes (tests/lab/test_bootstrap_lab.py compares them).

Reading the templates is reading data shipped with macfleet, not importing the core.
"""

from __future__ import annotations

import sys
from pathlib import Path

from macfleet.constants import EXO_LABEL, EXO_MODELS_DIR, IP_POOL, WIRED_RESERVE_MB

WIRED_LABEL = "org.macfleet.wired-limit"
PF_LABEL = "org.macfleet.pf"
PF_ANCHOR_FILE = "/etc/pf.anchors/macfleet"
SUDOERS_FILE = "macfleet"  # in /etc/sudoers.d
DEFAULT_POOL = IP_POOL


def _roles_dir() -> Path:
    checkout = Path(__file__).resolve().parents[2] / "playbooks" / "roles"
    return checkout if checkout.is_dir() else Path(sys.prefix) / "share" / "macfleet" / "playbooks" / "roles"


def render(role: str, template: str, **values: object) -> str:
    """A role template as Ansible's template module renders it (trim_blocks on), over the role's defaults."""
    import jinja2
    import yaml

    roles = _roles_dir()
    defaults = yaml.safe_load((roles / role / "defaults" / "main.yml").read_text()) or {}
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined,
                             autoescape=False)
    return env.from_string((roles / role / "templates" / template).read_text()).render(**{**defaults, **values})


def update_prefs() -> dict[str, dict[str, str]]:
    """The Software Update preferences as bootstrap's autoupdate role leaves them (its defaults: domain -> key ->
    bool), as the lab's `defaults` keeps them (key -> "1"/"0"), on a Mac that started with every automatic action
    on (lab/macos/prefs.py)."""
    import yaml

    from .macos.prefs import UPDATE_PREFS_FRESH

    wanted = yaml.safe_load((_roles_dir() / "autoupdate" / "defaults" / "main.yml").read_text())["autoupdate_prefs"]
    out = {d: dict(keys) for d, keys in UPDATE_PREFS_FRESH.items()}
    for domain, keys in wanted.items():
        out.setdefault(domain, {}).update({k: str(int(bool(v))) for k, v in keys.items()})
    return out


def files(*, user: str, home: str, memory_bytes: int, controller: str, interfaces: list[str],
          exo_env: dict[str, str]) -> dict[str, tuple[str, int]]:
    """{path on the node: (content, mode)} for everything bootstrap writes."""
    target_mb = memory_bytes // 1048576 - WIRED_RESERVE_MB
    return {
        f"/etc/sudoers.d/{SUDOERS_FILE}": (render("sudoers", "macfleet.sudoers.j2", sudoers_user=user), 0o440),
        f"/Library/LaunchDaemons/{WIRED_LABEL}.plist": (
            render("gpu", "wired-limit.plist.j2", gpu_target_mb=target_mb), 0o644),
        f"/Library/LaunchDaemons/{PF_LABEL}.plist": (render("pf", "pf.plist.j2"), 0o644),
        PF_ANCHOR_FILE: (render("pf", "macfleet.pf.j2", pf_sources=[DEFAULT_POOL, controller],
                                pf_interfaces=interfaces), 0o644),
        f"/Library/LaunchDaemons/{EXO_LABEL}.plist": (
            render("exo", "exo.plist.j2", exo_user=user, exo_home=home, exo_env=exo_env,
                   exo_models_dir=EXO_MODELS_DIR.replace("~", home, 1)), 0o644),
    }
