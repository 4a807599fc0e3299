"""Consistency bookkeeping: each key's reference answer, and how later answers compare with it.

The first answer to a probe sent alone becomes its key's reference (the
prober asks every key once, one request at a time, before anything else: the
warm-up). Later answers, alone or in a burst, are compared with it. A burst
answer never becomes a reference: the reference is what one request on its
own gets. References are never replaced, so a change that starts mid-run
shows as mismatches for as long as it lasts, and matches again once it ends.
"""
from __future__ import annotations

LOADS = ("alone", "burst")


class ReferenceBook:
    def __init__(self):
        self._references: dict[str, str] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._references

    def __len__(self) -> int:
        return len(self._references)

    def reference(self, key: str) -> str | None:
        return self._references.get(key)

    def compare(self, key: str, text: str, load: str) -> str | None:
        """'match' or 'mismatch'; None when there is nothing to compare with (a first alone answer
        becomes the reference, a burst answer before any reference is dropped)."""
        if load not in LOADS:
            raise ValueError(f"load must be one of {LOADS}, got {load!r}")
        ref = self._references.get(key)
        if ref is None:
            if load == "alone":
                self._references[key] = text
            return None
        return "match" if text == ref else "mismatch"
