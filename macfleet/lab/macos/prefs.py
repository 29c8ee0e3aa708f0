"""Preference stand-ins: `mdutil` (Spotlight indexing per volume, persisted) and `defaults` for the Software Update
preferences (read, write -bool, delete: the node's state answers, defaults(1)) and loginwindow's autoLoginUser
(LaunchAgents start at boot only for a user who logs in by himself, and automatic login is impossible while
FileVault is on). Shapes of `mdutil -s` and of `defaults read` for a missing key follow published outputs.

mdutil works on volumes (mdutil(1): `-i` sets the indexing status of the volumes given; "Turn on/off the
Spotlight indexing for a given volume", https://rndt.pages.dev/posts/2023-calendar/d11-macos-index/), so a path
that is not a volume's root is refused here. What a real mdutil does with a folder is not documented (an error,
or the setting of the volume holding it): the refusal and its words are a guess (docs/lab.md), the unkinder one.
The lab's volumes are `/`, `/System/Volumes/Data` and `/Volumes/NAME`."""

from __future__ import annotations

import os
import sys

from .common import Node, err, is_root

LOGINWINDOW = "/Library/Preferences/com.apple.loginwindow"
# The Software Update preferences (playbooks/roles/autoupdate), kept per node in persist["prefs"][domain] as
# key -> the value `defaults read` prints (a boolean as 1 or 0).
UPDATE_DOMAINS = ("/Library/Preferences/com.apple.SoftwareUpdate", "/Library/Preferences/com.apple.commerce")
# What a Mac set up with Setup Assistant's "automatic updates" on holds: every automatic action on. A guess
# (docs/lab.md): the unkinder starting point, so bootstrap must switch each off.
UPDATE_PREFS_FRESH = {
    UPDATE_DOMAINS[0]: {"AutomaticCheckEnabled": "1", "AutomaticDownload": "1", "AutomaticallyInstallMacOSUpdates": "1",
                        "ConfigDataInstall": "1", "CriticalUpdateInstall": "1"},
    UPDATE_DOMAINS[1]: {"AutoUpdate": "1"},
}


def _volume(path: str) -> bool:
    return path in ("/", "/System/Volumes/Data") or (path.startswith("/Volumes/") and path.count("/") == 2)


def _not_a_volume(path: str) -> int:
    err(f"{path}: not a volume. Error: unknown indexing state.")  # a guess (docs/lab.md)
    return 1


# Sources (issue 31; samples = shared/samples, GUESS = listed in docs/lab.md "Guesses"):
# - `-s PATH`, `-i on|off PATH`: mdutil(1) (indexing is per volume); a folder refused, and its message: GUESS
def mdutil(node: Node, args: list[str]) -> int:
    off = set(node.persist.get("spotlight_off") or [])
    if len(args) == 2 and args[0] == "-s":
        path = os.path.abspath(args[1])
        if not os.path.exists(path):
            err(f"Error: unknown indexing state. {path}: No such file or directory")
            return 1
        if not _volume(path):
            return _not_a_volume(path)
        sys.stdout.write(f"{path}:\n\tIndexing {'disabled' if path in off else 'enabled'}. \n")
        return 0
    if len(args) == 3 and args[0] == "-i" and args[1] in ("on", "off"):
        path = os.path.abspath(args[2])
        if not is_root():
            err("Error: unable to perform operation. (-400) Error: unknown indexing state.")
            return 1
        if not os.path.exists(path):
            err(f"Error: unknown indexing state. {path}: No such file or directory")
            return 1
        if not _volume(path):
            return _not_a_volume(path)
        want_off = args[1] == "off"

        def mutate(p: dict) -> None:
            paths = set(p.get("spotlight_off") or [])
            (paths.add if want_off else paths.discard)(path)
            p["spotlight_off"] = sorted(paths)

        node.update("persist", mutate)
        sys.stdout.write(f"{path}:\n\tIndexing {'disabled' if want_off else 'enabled'}. \n")
        return 0
    err("Usage: mdutil -s path | mdutil -i (on|off) path  (what the macfleet lab simulates)")
    return 1


def _update_domain(arg: str) -> str | None:
    """defaults(1): a domain is its name or a path to its plist, with or without ".plist"."""
    path = arg[:-6] if arg.endswith(".plist") else arg
    return path if path in UPDATE_DOMAINS else None


_BOOL = {"true": "1", "yes": "1", "1": "1", "false": "0", "no": "0", "0": "0"}


def _update_defaults(node: Node, domain: str, args: list[str]) -> int:
    """`defaults read DOMAIN [KEY]`, `defaults write DOMAIN KEY -bool true|false`, `defaults delete DOMAIN [KEY]`
    (defaults(1): read "Prints all of domain's defaults", or the value of one key; "-bool[ean] true|false|yes|no").
    The whole-domain print is the old-style property-list text ("{", one `    Key = value;` per key, sorted,
    "}"); the messages for a missing domain or key are those widely quoted from Macs; exit codes 1 as there."""
    verb, rest = args[0], args[2:]
    prefs = (node.persist.get("prefs") or {}).get(domain)
    if verb == "read":
        if prefs is None:
            err(f"\nDomain {domain} does not exist")
            return 1
        if rest:
            if rest[0] not in prefs:
                err(f"\nThe domain/default pair of ({domain}, {rest[0]}) does not exist")
                return 1
            sys.stdout.write(f"{prefs[rest[0]]}\n")
            return 0
        sys.stdout.write("{\n" + "".join(f"    {k} = {v};\n" for k, v in sorted(prefs.items())) + "}\n")
        return 0
    if verb in ("write", "delete"):
        if not is_root():
            err(f"Could not write domain {domain}; exiting")
            return 1
        if verb == "write" and (len(rest) != 3 or rest[1] not in ("-bool", "-boolean") or rest[2].lower() not in _BOOL):
            err("defaults: only `write DOMAIN KEY -bool true|false` is simulated by the macfleet lab here")
            return 1

        def mutate(p: dict) -> None:
            domains = p.setdefault("prefs", {})
            if verb == "write":
                domains.setdefault(domain, {})[rest[0]] = _BOOL[rest[2].lower()]
            elif rest:
                domains.get(domain, {}).pop(rest[0], None)
            else:
                domains.pop(domain, None)

        node.update("persist", mutate)
        return 0
    err(f"defaults: {verb}: not simulated by the macfleet lab")
    return 1


# - `read|write|delete DOMAIN KEY`: defaults(1); `The domain/default pair of (…) does not exist`: GUESS (widely
#   quoted); only loginwindow's autoLoginUser is modelled; FileVault forbidding automatic login:
#   apple_ssh_and_filevault(7)
def defaults(node: Node, args: list[str]) -> int:
    domain = args[1] if len(args) > 1 else ""
    if args and (update := _update_domain(domain)) is not None:
        return _update_defaults(node, update, args)
    if domain not in (LOGINWINDOW, LOGINWINDOW + ".plist", "com.apple.loginwindow") or len(args) < 3 \
            or args[2] != "autoLoginUser":
        err("defaults: only `defaults read|write|delete /Library/Preferences/com.apple.loginwindow autoLoginUser`"
            " is simulated by the macfleet lab")
        return 1
    verb, user = args[0], node.persist.get("auto_login_user")
    if verb == "read":
        if not user:
            err(f"\nThe domain/default pair of ({LOGINWINDOW}, autoLoginUser) does not exist")
            return 1
        sys.stdout.write(f"{user}\n")
        return 0
    if verb in ("write", "delete"):
        if not is_root():
            err(f"Could not write domain {LOGINWINDOW}; exiting")
            return 1
        value = [a for a in args[3:] if a != "-string"]
        if verb == "write" and len(value) != 1:
            err("defaults: write needs one value")
            return 1
        node.update("persist", lambda p: p.__setitem__("auto_login_user", value[0] if verb == "write" else None))
        return 0
    err(f"defaults: {verb}: not simulated by the macfleet lab")
    return 1
