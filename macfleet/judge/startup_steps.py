"""What the person at the rack does to switch RDMA on, as data: one checklist per Mac family.

RDMA over Thunderbolt can only be switched on from macOS Recovery (Apple TN3205, "Low-latency
communication with RDMA over Thunderbolt"; MLX's distributed docs: "cannot be done remotely even with
sudo"). Reaching Recovery on Apple silicon: shut down, press and hold the power button until "Loading
startup options" appears, then Options → Continue (Apple support, "Start up your Mac in macOS
Recovery"). Only where the power button is differs between families.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    title: str  # "Mac Studio"
    power_button: str  # where the operator finds it
    needs_display: bool  # a desktop usually runs headless in a rack: bring a display and keyboard


FAMILIES: dict[str, Family] = {
    "Mac Studio": Family("Mac Studio", "on the back of the Mac Studio, at the edge beside the power cord", True),
    "Mac mini": Family("Mac mini", "underneath the Mac mini, near its back corner (M4 and later); on the back "
                       "of older models", True),
    "Mac Pro": Family("Mac Pro", "on the top of the Mac Pro", True),
    "MacBook Pro": Family("MacBook Pro", "the Touch ID button, top right of the keyboard", False),
}
GENERIC = Family("Mac", "(see the Mac's manual for where the power button is)", True)


# After "Restart" a FileVault Mac stops at its unlock screen: its Data volume stays locked until a FileVault user's
# password is given, at the console or (macOS 26, Remote Login on) over SSH, which unlocks it; SSH then drops
# briefly and comes back (apple_ssh_and_filevault(7)). Until then macfleet sees it "waiting at the FileVault
# unlock screen".
UNLOCK_STEP = ("If FileVault is on, the Mac stops at its unlock screen after the restart: pick a FileVault-enabled "
               "user and type that user's password there (or, from the controller, `macfleet unlock NODE "
               "--password-file FILE`); the screen goes on to start macOS.")


def family(marketing_name: str | None) -> Family:
    return FAMILIES.get(marketing_name or "", GENERIC)


def startup_steps(marketing_name: str | None, *, shut_down_by_macfleet: bool = True) -> list[str]:
    """The numbered checklist for one Mac (or several of one family), in the operator's words."""
    f = family(marketing_name)
    steps = []
    if f.needs_display:
        steps.append("Connect a display, a keyboard and a mouse to it (or your KVM).")
    steps.append("Wait until it is shut down (macfleet shows when it has gone)." if shut_down_by_macfleet
                 else "Shut it down: Apple menu → Shut Down (or `sudo shutdown -h now`).")
    steps += [
        f"Press and hold the power button ({f.power_button}) until \"Loading startup options\" appears "
        "(about 10 seconds), then let go.",
        "Click Options, then Continue.",
        "If asked, pick an administrator you know the password of and enter that password.",
        "From the menu bar choose Utilities → Terminal.",
        "Type `rdma_ctl enable` and press Return. Read what it prints: an error means it did not work.",
        "Choose Apple menu → Restart. " + ("macfleet sees the Mac come back and checks RDMA." if shut_down_by_macfleet
                                           else "Then check it with `macfleet rdma status`."),
        UNLOCK_STEP,
    ]
    return steps
