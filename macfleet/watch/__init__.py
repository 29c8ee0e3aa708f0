"""`macfleet watch`: jittered tick → probe over kept-open SSH sessions → judge.remediation.step → act →
audit log, metrics, status page and webhook. The policy lives in the inventory and in judge/remediation.py;
this package only runs it."""
