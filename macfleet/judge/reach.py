"""What to do about a node that could not be reached, from the reason the connection gave: one wording for
every judge (doctor, topology check, rdma status), so a name that does not resolve is never told to check the
power."""

from __future__ import annotations

import re

# The resolver's own words, as the connection reports them: glibc's gai_strerror ("Name or service not known",
# "Temporary failure in name resolution", "No address associated with hostname"), macOS's ("nodename nor
# servname provided, or not known"), OpenSSH's "Could not resolve hostname", Python's socket.gaierror.
_DNS_FAILURE = re.compile(
    r"name or service not known|nodename nor servname|temporary failure in name resolution|"
    r"no address associated with hostname|could not resolve hostname|gaierror|name resolution",
    re.IGNORECASE,
)


def is_dns_failure(reason: str) -> bool:
    return bool(_DNS_FAILURE.search(reason or ""))


def unreachable_fix(node: str, reason: str, *, then: str = "") -> str:
    """The fix for `node` unreachable because of `reason`; `then` is appended (", then run the check again")."""
    if is_dns_failure(reason):
        return (f"{node}'s address does not resolve (a DNS failure, not a sign the Mac is off): fix its name in DNS "
                f"or /etc/hosts, or set ansible_host to its IP address in the inventory{then}")
    return f"check that {node} is powered on, on the network and accepts SSH{then}"
