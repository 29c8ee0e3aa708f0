"""Names only the lab provides: what the stand-ins serve, print, read or write that no real Mac and no real exo
does. The product (macfleet/ outside macfleet/lab/, and playbooks/) must never read any of them:
tests/test_lab_only.py scans it for each name. The exo stand-in declares its own (`standin.LAB_ONLY`, it is
copied verbatim onto the nodes and stays self-contained); the macOS stand-ins' are here, because their files
are shared with other work. A name on this list stays on it after the lab stops using it."""

from __future__ import annotations

from .exo.standin import LAB_ONLY as EXO_LAB_ONLY

MACOS_LAB_ONLY = frozenset({
    # a node's state files (macfleet/lab/macos/common.py); a Mac keeps its settings in configd/plists
    "persist.json", "boot.json", "jobs.json", "lab.json",
    "/run/macfleet-lab",  # the lab's state root
    "__netapply__",  # the lab's own call that re-applies persisted services (configd's job on a Mac)
    "afplay.log",  # afplay's record of what it was asked to play
    "clt_unavailable",  # a lab switch: softwareupdate offers no Command Line Tools
    "lab_no_authrestart",  # a lab switch: fdesetup refuses authrestart (the authrestart-unsupported fault)
})

LAB_ONLY = EXO_LAB_ONLY | MACOS_LAB_ONLY

GUESSED_EXIT_CODES = {"xcrun": 72, "networksetup": 14, "ibv_devinfo": 255}
"""Exit statuses the stand-ins give where no source says what a Mac gives (docs/lab.md, "Guesses"): the product
may see such a command fail, never branch on the number (tests/test_lab_only.py)."""
