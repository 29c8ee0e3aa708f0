"""Developer-tools stand-ins: `xcode-select`, `softwareupdate` (list and install, the Command Line Tools
among them), `/usr/bin/python3` (the Command Line Tools stub until the tools are installed) and Homebrew's
`brew` (install rsync). Messages follow those widely quoted from Macs without the tools; the exact
`softwareupdate --install` progress lines and the CLT label are guesses (docs/lab.md lists them).

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


def install_clt(real_python: str) -> None:
    """What the installer leaves (also used by `lab up` for a prepared Mac)."""
    os.makedirs(os.path.dirname(CLT_PYTHON), mode=0o755, exist_ok=True)
    if not os.path.lexists(CLT_PYTHON):
        os.symlink(real_python, CLT_PYTHON)


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


def _offers_clt(node: Node, *, listed: bool = False) -> bool:
    """The catalogue offers the tools while the placeholder exists (in the node's own /tmp), and to an install
    that follows a listing that saw them."""
    if clt_installed() or node.persist.get("clt_unavailable"):
        return False
    return os.path.exists(PLACEHOLDER) or (listed and bool(node.boot.get("clt_listed")))


def softwareupdate(node: Node, args: list[str]) -> int:
    if any(a in ("-l", "--list") for a in args):
        err("Software Update Tool\n\nFinding available software")
        if _offers_clt(node):
            node.update("boot", lambda b: b.__setitem__("clt_listed", True))
            sys.stdout.write(f"Software Update found the following new or updated software:\n* Label: {CLT_LABEL}\n"
                             f"\tTitle: {CLT_TITLE}\n")
        else:
            sys.stdout.write("No new software available.\n")
        return 0
    if args[:1] in (["-i"], ["--install"]):
        if not is_root():
            err("softwareupdate: This operation requires root privileges.")  # a guess
            return 1
        labels = [a for a in args[1:] if not a.startswith("-")]
        err("Software Update Tool\n\nFinding available software")
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


BREW_RSYNC = "/opt/homebrew/bin/rsync"
SYSTEM_RSYNC = "/usr/bin/rsync"  # Debian's rsync stands in for Homebrew's (macOS's own is openrsync)


def brew(node: Node, args: list[str]) -> int:
    if is_root():
        err("Error: Running Homebrew as root is extremely dangerous and no longer supported.\n"
            "As Homebrew does not drop privileges on installation you would be giving all build scripts full "
            "access to your system.")
        return 1
    if args[:1] == ["--prefix"]:
        sys.stdout.write("/opt/homebrew\n")
        return 0
    if args[:1] == ["list"]:
        if os.path.lexists(BREW_RSYNC):
            sys.stdout.write("rsync\n")
        return 0
    if args[:2] == ["install", "rsync"]:
        if os.path.lexists(BREW_RSYNC):
            err("Warning: rsync 3.4.1 is already installed and up-to-date.\nTo reinstall 3.4.1, run:\n"
                "  brew reinstall rsync")
            return 0
        sys.stdout.write("==> Fetching rsync\n==> Pouring rsync--3.4.1.arm64_tahoe.bottle.tar.gz\n"
                         "🍺  /opt/homebrew/Cellar/rsync/3.4.1: 10 files, 796.6KB\n")
        os.symlink(SYSTEM_RSYNC, BREW_RSYNC)
        return 0
    err("Error: only `brew install rsync`, `brew list` and `brew --prefix` are simulated by the macfleet lab")
    return 1
