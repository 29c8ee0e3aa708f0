"""Developer-tools stand-ins: `xcode-select`, `xcrun` (no Xcode: its Metal toolchain is never there), `softwareupdate`
(list and install, the Command Line Tools among them), `/usr/bin/python3` (the Command Line Tools stub until the
tools are installed) and Homebrew's `brew` (`list`, `install` of rsync and iperf3). Messages follow those widely
quoted from Macs without the tools; the exact `softwareupdate --install` progress lines, the CLT label and brew's
outputs are guesses (docs/lab.md lists them).

The Command Line Tools are "installed" when /Library/Developer/CommandLineTools/usr/bin/python3 exists (the
node's own /Library), a link to the Python the lab runs. The node's /usr/bin/python3 is a shell script
(`python3_stub`) so an installed node pays no Python start-up twice per Ansible module.
"""

from __future__ import annotations

import os
import sys

from .common import Node, err, is_root

CLT_DIR = "/Library/Developer/CommandLineTools"
CLT_PYTHON = CLT_DIR + "/usr/bin/python3"
# The file Homebrew's installer touches so that `softwareupdate --list` offers the tools without the dialog.
PLACEHOLDER = "/tmp/.com.apple.dt.CommandLineTools.installondemand.in-progress"
CLT_LABEL = "Command Line Tools for Xcode-26.0"
CLT_TITLE = "Command Line Tools for Xcode, Version: 26.0, Size: 905210KiB, Recommended: YES, "
NO_TOOLS = (
    "xcode-select: note: No developer tools were found, requesting install.\n"
    "If developer tools are located at a non-default location on disk, use `sudo xcode-select --switch "
    "path/to/Xcode.app` to specify the Xcode that you wish to use for command line developer tools, and cancel "
    "the installation dialog.\n"
    "See `man xcode-select` for more details.\n"
)


# Sources (issue 31; samples = shared/samples, GUESS = listed in docs/lab.md "Guesses"):
# - /usr/bin/python3 without the Command Line Tools prints xcode-select's note and exits 1: NO_TOOLS, widely
#   quoted (no capture here): GUESS for the exact text
def python3_stub() -> str:
    """The node's /usr/bin/python3: the tools' Python once installed, else the stub's note and exit 1."""
    return (
        "#!/bin/sh\n"
        "# macfleet lab: /usr/bin/python3 of a Mac, a stub until the Command Line Tools are installed\n"
        f'if [ -x {CLT_PYTHON} ]; then exec {CLT_PYTHON} "$@"; fi\n'
        f"cat >&2 <<'EOF'\n{NO_TOOLS}EOF\n"
        "exit 1\n"
    )


def clt_installed() -> bool:
    return os.access(CLT_PYTHON, os.X_OK)


# macOS allows a process 16 supplementary groups: NGROUPS_MAX is 16 (apple-oss-distributions/xnu
# bsd/sys/syslimits.h, "max supplemental group id's") and so is sysconf(_SC_NGROUPS_MAX) (samba-team/samba#210:
# "On MacOS sysconf(_SC_NGROUPS_MAX) always returns 16"). CPython checks a group list against that limit in the
# parent, before it forks: subprocess's extra_groups in Modules/_posixsubprocess.c (`num_groups > MAX_GROUPS` ->
# ValueError "too many groups", MAX_GROUPS = NGROUPS_MAX; python/cpython@0036a126, 3.9 has the same check),
# os.setgroups in Modules/posixmodule.c. A stock macOS admin is in 18 groups (uutils/coreutils#2416, lab/control.py
# gives the lab's admin as many), so a Python on a Mac that passes all of them fails (cpython#84195,
# gravitational/teleport#31132). Linux allows 65536, so the Command Line Tools' Python of a lab node carries the
# Mac's limit: this module, loaded at start-up by a .pth file in that Python's own site-packages (the tools' Python
# is a venv-style link with a pyvenv.cfg, so no other Python on the host sees it, and -I does not skip it).
NGROUPS_MAX = 16
LIMITS_MODULE = "_macfleet_lab_ngroups"
LIMITS_SOURCE = f'''"""macfleet lab: macOS's limit of {NGROUPS_MAX} supplementary groups (lab/macos/devtools.py)."""
import os
import _posixsubprocess

NGROUPS_MAX = {NGROUPS_MAX}
_sysconf, _setgroups, _fork_exec = os.sysconf, os.setgroups, _posixsubprocess.fork_exec


def sysconf(name):
    if name in ("SC_NGROUPS_MAX", os.sysconf_names["SC_NGROUPS_MAX"]):
        return NGROUPS_MAX
    return _sysconf(name)


def setgroups(groups):
    if len(groups) > NGROUPS_MAX:
        raise ValueError("too many groups")
    return _setgroups(groups)


def fork_exec(*args):
    # CPython 3.11+: (..., gid, extra_groups, uid, child_umask, preexec_fn, allow_vfork), 23 arguments
    if len(args) != 23:
        raise RuntimeError("macfleet lab: unknown _posixsubprocess.fork_exec signature; update " + __file__)
    if args[18] is not None and len(args[18]) > NGROUPS_MAX:
        raise ValueError("too many groups")
    return _fork_exec(*args)


os.sysconf, os.setgroups, _posixsubprocess.fork_exec = sysconf, setgroups, fork_exec
'''


def _python_version(real_python: str) -> str:
    import re

    m = re.search(r"python(\d+\.\d+)$", os.path.realpath(real_python))
    if m:
        return m.group(1)
    import subprocess

    return subprocess.run([real_python, "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True, check=True).stdout.strip()


def install_clt(real_python: str, root: str = "/") -> None:
    """What the installer leaves (also used by `lab up` for a prepared Mac, with `root` the node's filesystem): the
    tools' python3, a link to the lab's Python, and beside it the pyvenv.cfg and site-packages that give it the
    Mac's group limit (LIMITS_SOURCE)."""
    usr = os.path.join(root, CLT_DIR.lstrip("/"), "usr")
    python = os.path.join(usr, "bin", "python3")
    site = os.path.join(usr, "lib", f"python{_python_version(real_python)}", "site-packages")
    os.makedirs(os.path.dirname(python), mode=0o755, exist_ok=True)
    os.makedirs(site, mode=0o755, exist_ok=True)
    with open(os.path.join(usr, "pyvenv.cfg"), "w") as fh:
        fh.write(f"home = {os.path.dirname(os.path.realpath(real_python))}\ninclude-system-site-packages = true\n")
    with open(os.path.join(site, LIMITS_MODULE + ".py"), "w") as fh:
        fh.write(LIMITS_SOURCE)
    with open(os.path.join(site, LIMITS_MODULE + ".pth"), "w") as fh:
        fh.write(f"import {LIMITS_MODULE}\n")
    if not os.path.lexists(python):
        os.symlink(real_python, python)


# - `-p`, `--install`, `-v`: xcode-select(1); `-p`'s error without the tools: GUESS (docs/lab.md)
def xcode_select(node: Node, args: list[str]) -> int:
    if args[:1] in (["-p"], ["--print-path"]):
        if clt_installed():
            sys.stdout.write(CLT_DIR + "\n")
            return 0
        err("xcode-select: error: unable to get active developer directory. Use `sudo xcode-select --switch "
            "path/to/Xcode.app` to select the Xcode that you wish to use for command line developer tools.")
        return 2
    if args[:1] == ["--install"]:
        if clt_installed():
            err("xcode-select: note: Command line tools are already installed. Use \"Software Update\" in "
                "System Settings or the softwareupdate command line interface to install updates")
            return 1
        err("xcode-select: note: install requested for command line developer tools")
        return 0
    if args[:1] in (["-v"], ["--version"]):
        sys.stdout.write("xcode-select version 2409.\n")
        return 0
    err("xcode-select: error: invalid argument (only -p, --install and -v are simulated by the macfleet lab)")
    return 1


# Tools only full Xcode has (its Metal toolchain); the lab's Macs never have Xcode, only the Command Line Tools.
XCODE_ONLY_TOOLS = ("metal", "metallib", "xcodebuild")


def xcrun(node: Node, args: list[str]) -> int:
    """xcrun(1): `xcrun -f|--find TOOL` prints TOOL's path in the active developer directory, `xcrun TOOL ARGS`
    runs it. The lab has the Command Line Tools at most, never Xcode: a tool only Xcode has is "unable to find
    utility" (the words MLX's install docs quote under "Metal not found"; exit 72 is a guess, docs/lab.md), and
    without the tools xcrun says the active developer path is invalid (widely quoted after macOS updates). Other
    tools are not simulated."""
    if not clt_installed():
        err(f"xcrun: error: invalid active developer path ({CLT_DIR}), missing xcrun at: {CLT_DIR}/usr/bin/xcrun")
        return 1
    words = [a for a in args if a not in ("-f", "--find", "-sdk", "macosx")]
    tool = words[0] if words else ""
    if tool in XCODE_ONLY_TOOLS:
        err(f'xcrun: error: unable to find utility "{tool}", not a developer tool or in PATH')
        return 72
    err(f"xcrun: only {', '.join(XCODE_ONLY_TOOLS)} (absent: no Xcode) are simulated by the macfleet lab")
    return 1


# - the tools offered while /tmp/.com.apple.dt.CommandLineTools.installondemand.in-progress exists: Homebrew's
#   installer (github.com/Homebrew/install install.sh, clt_placeholder)
def _offers_clt(node: Node, *, listed: bool = False) -> bool:
    """The catalogue offers the tools while the placeholder exists (in the node's own /tmp), and to an install
    that follows a listing that saw them."""
    if clt_installed() or node.persist.get("clt_unavailable"):
        return False
    return os.path.exists(PLACEHOLDER) or (listed and bool(node.boot.get("clt_listed")))


# ------------------------------------------------------------------------------------ macOS updates
# An update the lab offers a node (the `update-offered` fault: persist["offered_update"]) is listed and installed
# as softwareupdate(8) does on Apple silicon. Shapes: the `* Label: NAME-BUILD` and tab-indented `Title: …,
# Version: …, Size: …KiB, Recommended: YES, Action: restart,` lines of a real `softwareupdate --list` with a macOS
# update pending (tests/fixtures/probes/public/softwareupdate_bigsur_pending.txt, from
# https://github.com/WaveBirdDash/install-or-defer/issues/47; "KiB" as macOS 26 prints the size:
# tests/fixtures/probes/README.md). Installing it needs an owner's credentials on Apple silicon: softwareupdate(8)
# on macOS 11 and later, `--user <username>` ("Local username to authenticate as an owner. Apple Silicon only")
# and `--stdinpass` ("Password to authenticate as an owner. Apple Silicon only"); `-R`/`--restart` restarts when
# the update needs it. The progress lines, the refusal without credentials and the failure's words are guesses
# (docs/lab.md). The install takes the offer's seconds (half before the restart, half while the Mac restarts
# into the new build: lab/faults.py on_boot and boot_seconds), and can fail half-way (`update-fails`) or bring
# RDMA back disabled (`update-rdma-off`).
OFFER_SIZE_KIB = 3693075


def macos_offer(node: Node) -> dict | None:
    """The macOS update offered to the node, unless it already runs that build (or has it staged)."""
    offer = node.persist.get("offered_update")
    build = (node.persist.get("os") or {}).get("build")
    if not offer or offer.get("build") == build or node.persist.get("staged_update"):
        return None
    return offer


def offer_label(offer: dict) -> str:
    return f"macOS Tahoe {offer['version']}-{offer['build']}"


def _check_owner(node: Node, user: str | None, password: str) -> bool:
    """The admin's password, checked against the node's own record (control.py's admin-password.hash)."""
    import hashlib
    import hmac

    if user != node.lab.spec.get("user"):
        return False
    try:
        with open(node.dir / "admin-password.hash") as f:
            _algo, rounds, salt, digest = f.read().split("$")
    except (OSError, ValueError):
        return False
    mine = hashlib.pbkdf2_hmac("sha256", password.encode(), bytes.fromhex(salt), int(rounds)).hex()
    return hmac.compare_digest(mine, digest.strip())


def _install_macos(node: Node, offer: dict, options: dict) -> int:
    import time

    label = offer_label(offer)
    if options.get("user") is None or not options.get("stdinpass"):
        err(f"{label}: installing a macOS update on Apple silicon needs an owner's credentials: "
            "--user USER --stdinpass (a guess of the words; softwareupdate(8))")
        return 1
    password = sys.stdin.readline().rstrip("\n")
    if not _check_owner(node, options["user"], password):
        err(f"Failed to authenticate user {options['user']}")  # a guess
        return 1
    half = float(offer.get("seconds", 0)) / 2
    sys.stdout.write(f"Downloading {label}\n")
    sys.stdout.flush()
    time.sleep(half / 2)
    if node.persist.get("lab_update_fails"):
        err(f"Failed to prepare {label}: an error occurred while installing the update")  # a guess
        return 1
    sys.stdout.write(f"Downloaded {label}\nPreparing {label}\n")
    sys.stdout.flush()
    time.sleep(half / 2)
    staged = {"version": offer["version"], "build": offer["build"], "seconds": half,
              "rdma_off": bool(node.persist.get("lab_update_rdma_off"))}
    node.update("persist", lambda p: p.__setitem__("staged_update", staged))
    if not options.get("restart"):
        sys.stdout.write(f"Done with {label}\nYou have installed one or more updates that requires that you restart "
                         "your computer. Please restart immediately.\n")  # applied at the next boot
        return 0
    sys.stdout.write(f"Done with {label}\nRestarting...\n")
    sys.stdout.flush()
    from .system import request

    return request(node, "reboot")


def _install_options(args: list[str]) -> tuple[list[str], dict]:
    labels: list[str] = []
    options: dict = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--user" and i + 1 < len(args):
            options["user"] = args[i + 1]
            i += 1
        elif a == "--stdinpass":
            options["stdinpass"] = True
        elif a in ("-R", "--restart"):
            options["restart"] = True
        elif not a.startswith("-"):
            labels.append(a)
        i += 1
    return labels, options


# - `--list` / `--install LABEL`: softwareupdate(8); progress lines, the label `Command Line Tools for
#   Xcode-26.0` and its title line: GUESS (docs/lab.md); the `* Label:` / tab `Title:` shape:
#   tests/fixtures/probes/public/softwareupdate_bigsur_pending.txt
def softwareupdate(node: Node, args: list[str]) -> int:
    if any(a in ("-l", "--list") for a in args):
        err("Software Update Tool\n\nFinding available software")
        listed = []
        if _offers_clt(node):
            node.update("boot", lambda b: b.__setitem__("clt_listed", True))
            listed.append(f"* Label: {CLT_LABEL}\n\tTitle: {CLT_TITLE}\n")
        if (offer := macos_offer(node)) is not None:
            listed.append(f"* Label: {offer_label(offer)}\n\tTitle: macOS Tahoe {offer['version']}, Version: "
                          f"{offer['version']}, Size: {OFFER_SIZE_KIB}KiB, Recommended: YES, Action: restart,\n")
        if listed:
            sys.stdout.write("Software Update found the following new or updated software:\n" + "".join(listed))
        else:
            sys.stdout.write("No new software available.\n")
        return 0
    if args[:1] in (["-i"], ["--install"]):
        if not is_root():
            err("softwareupdate: This operation requires root privileges.")  # a guess
            return 1
        labels, options = _install_options(args[1:])
        err("Software Update Tool\n\nFinding available software")
        offer = macos_offer(node)
        if offer is not None and labels == [offer_label(offer)]:
            return _install_macos(node, offer, options)
        if labels != [CLT_LABEL] or not _offers_clt(node, listed=True):
            err(f"No updates are available.{' (' + ', '.join(labels) + ')' if labels else ''}")
            return 1
        for step in ("Downloading", "Downloaded", "Installing", "Done with"):
            sys.stdout.write(f"{step} {CLT_LABEL}\n")
        install_clt(os.path.realpath(sys.executable))
        sys.stdout.write("Done.\n")
        return 0
    err("softwareupdate: only --list and --install are simulated by the macfleet lab")
    return 1


BREW_PREFIX = "/opt/homebrew"
SYSTEM_RSYNC = "/usr/bin/rsync"  # Debian's rsync stands in for Homebrew's (macOS's own is openrsync)
IPERF3_COPY = "iperf3"  # in the lab's userland/: Debian's iperf3, which the nodes' /usr/bin hides (no iperf3 on a Mac)
# The formulae the lab's brew knows: version, and the files `brew list NAME` prints (under the keg).
FORMULAE = {
    "rsync": ("3.4.1", ("bin/rsync", "share/man/man1/rsync.1", "share/man/man1/rsync-ssl.1",
                        "share/man/man5/rsyncd.conf.5")),
    "iperf3": ("3.19.1", ("bin/iperf3", "include/iperf_api.h", "lib/libiperf.0.dylib", "lib/libiperf.a",
                          "lib/libiperf.dylib", "share/man/man1/iperf3.1", "share/man/man3/libiperf.3")),
}


def formula_installed(name: str, prefix: str = BREW_PREFIX) -> bool:
    return os.path.lexists(f"{prefix}/bin/{name}")


def install_formula(name: str, prefix: str, userland: str) -> None:
    """What `brew install NAME` leaves: the keg's binary and its link in PREFIX/bin (rsync: a link to Debian's)."""
    version, _ = FORMULAE[name]
    if name == "rsync":
        os.symlink(SYSTEM_RSYNC, f"{prefix}/bin/rsync")
        return
    keg_bin = f"{prefix}/Cellar/{name}/{version}/bin"
    os.makedirs(keg_bin, exist_ok=True)
    import shutil

    shutil.copy2(os.path.join(userland, IPERF3_COPY), f"{keg_bin}/{name}")
    os.symlink(f"../Cellar/{name}/{version}/bin/{name}", f"{prefix}/bin/{name}")


# - GUESS: every `brew` output (docs/lab.md lists them); refused as root: Homebrew's own check (brew.sh)
def _brew_list(args: list[str]) -> int:
    names = [a for a in args if not a.startswith("-")]
    if "--versions" in args:  # one "name version" line per installed formula; exit 1 if any named is not
        shown = names or sorted(n for n in FORMULAE if formula_installed(n))
        for n in shown:
            if n in FORMULAE and formula_installed(n):
                sys.stdout.write(f"{n} {FORMULAE[n][0]}\n")
        return 0 if all(n in FORMULAE and formula_installed(n) for n in shown) else 1
    if not names:
        for n in sorted(n for n in FORMULAE if formula_installed(n)):
            sys.stdout.write(f"{n}\n")
        return 0
    for n in names:
        if n not in FORMULAE or not formula_installed(n):
            err(f"Error: No such keg: {BREW_PREFIX}/Cellar/{n}")
            return 1
        version, files = FORMULAE[n]
        for f in files:
            sys.stdout.write(f"{BREW_PREFIX}/Cellar/{n}/{version}/{f}\n")
    return 0


def _brew_install(node: Node, names: list[str]) -> int:
    for n in names:
        if n not in FORMULAE:
            err(f"Warning: No available formula with the name \"{n}\".\n"
                "Error: No formulae or casks found for " + repr(n).replace("'", '"') + ".")
            return 1
    for n in names:
        version, files = FORMULAE[n]
        if formula_installed(n):
            err(f"Warning: {n} {version} is already installed and up-to-date.\nTo reinstall {version}, run:\n"
                f"  brew reinstall {n}")
            continue
        sys.stdout.write(f"==> Fetching downloads for: {n}\n==> Pouring {n}--{version}.arm64_tahoe.bottle.tar.gz\n"
                         f"\U0001f37a  {BREW_PREFIX}/Cellar/{n}/{version}: {len(files)} files, 796.6KB\n")
        install_formula(n, BREW_PREFIX, str(node.lab.dir / "userland"))
    return 0


def brew(node: Node, args: list[str]) -> int:
    if is_root():
        err("Error: Running Homebrew as root is extremely dangerous and no longer supported.\n"
            "As Homebrew does not drop privileges on installation you would be giving all build scripts full "
            "access to your system.")
        return 1
    if args[:1] == ["--prefix"]:
        sys.stdout.write(f"{BREW_PREFIX}\n")
        return 0
    if args[:1] == ["list"]:
        return _brew_list(args[1:])
    if args[:1] == ["install"] and len(args) > 1:
        return _brew_install(node, [a for a in args[1:] if not a.startswith("-")])
    err("Error: only `brew install`, `brew list [--versions]` and `brew --prefix` are simulated by the macfleet lab")
    return 1
