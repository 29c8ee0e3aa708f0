"""No surprise updates: the Software Update preferences that must stay as bootstrap set them, and doctor's check
of them (`auto-updates`). The table is the one playbooks/roles/autoupdate/defaults/main.yml writes (each key's
source is cited there); tests/test_autoupdate.py keeps the two equal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from macfleet.facts.defaults import COMMERCE, SOFTWARE_UPDATE

if TYPE_CHECKING:
    from macfleet.facts.defaults import DefaultsFacts

# domain -> key -> the value bootstrap writes (a boolean, printed by `defaults read` as 1 or 0)
AUTO_UPDATE_PREFS: dict[str, dict[str, bool]] = {
    SOFTWARE_UPDATE: {
        "AutomaticallyInstallMacOSUpdates": False,  # installs an update and restarts by itself
        "AutomaticDownload": False,  # stages updates in the background
        "CriticalUpdateInstall": False,  # Rapid Security Responses: change the build, restart
        "ConfigDataInstall": True,  # XProtect/Gatekeeper data: no restart, no build change
    },
    COMMERCE: {
        "AutoUpdate": False,  # App Store app updates
    },
}


def short(domain: str) -> str:
    return domain.rsplit("/", 1)[-1]


def wrong_prefs(read: dict[str, DefaultsFacts]) -> list[str] | None:
    """`com.apple.SoftwareUpdate AutomaticDownload 1 (want 0)` for each key not as bootstrap set it (a key not set
    at all counts: macOS's own default applies), or None when a domain was not read."""
    out: list[str] = []
    for domain, keys in AUTO_UPDATE_PREFS.items():
        facts = read.get(domain)
        if facts is None:
            return None
        for key, want in keys.items():
            have = facts.values.get(key)
            if have != str(int(want)):
                out.append(f"{short(domain)} {key} {have if have is not None else 'unset'} (want {int(want)})")
    return out
