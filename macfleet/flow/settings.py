"""Choices the command line makes once for the whole run, handed down to the layers that use them."""

from __future__ import annotations


def set_ansible_verbosity(level: int) -> None:
    """`macfleet -vv ...`: every playbook run of this process gets ansible-playbook's -vv."""
    from macfleet.act import ansible

    ansible.settings.verbosity = max(0, level)
