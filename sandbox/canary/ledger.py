"""Consistency bookkeeping: each key's reference answer, and how later answers compare with it.

The first answer to a probe sent alone becomes its key's reference (the
prober asks every key once, one request at a time, before anything else: the
warm-up). Later answers, alone or in a burst, are compared with it. A burst
answer never becomes a reference: the reference is what one request on its
own gets. References are never replaced, so a change that starts mid-run
shows as mismatches for as long as it lasts, and matches again once it ends.

References are kept per deployment version: a new version may answer
differently (that is what the accuracy probes judge), but it must answer
the same prompt the same way every time, alone or in a batch, on every
replica. The first alone answer from a new version becomes its reference.
"""
from __future__ import annotations

LOADS = ("alone", "burst")


class ReferenceBook:
    def __init__(self):
        self._references: dict[tuple[str, str], str] = {}

    def __contains__(self, key: str) -> bool:
        return any(k == key for _, k in self._references)

    def __len__(self) -> int:
        return len(self._references)

    def reference(self, key: str, version: str = "") -> str | None:
        return self._references.get((version, key))

    def compare(self, key: str, text: str, load: str, version: str = "") -> str | None:
        """'match' or 'mismatch'; None when there is nothing to compare with (a first alone answer
        becomes the version's reference, a burst answer before any reference is dropped)."""
        if load not in LOADS:
            raise ValueError(f"load must be one of {LOADS}, got {load!r}")
        ref = self._references.get((version, key))
        if ref is None:
            if load == "alone":
                self._references[(version, key)] = text
            return None
        return "match" if text == ref else "mismatch"
