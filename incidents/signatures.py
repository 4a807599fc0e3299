"""Signatures over quantities: how each variant, and each root cause, moves what the metrics measure.

An incident file's signature is written over its named signals (`hit_rate: down`). Parsing each
signal's PromQL to the quantity it reads (incidents/readings.py) turns that into a signature over
quantities, at the scope the signal reads (`iteration_tokens_p99`, a min over replicas, is
iteration-tokens at replica-min). The cause's mechanism (taxonomy.MECHANISMS) fills in the rest,
at every scope:

    where fleet      fleet, replica-max, replica-min (and per task) move; the spreads stay flat
    where replica    one replica moves: replica-max if it rises (replica-min if it falls), the
                     spread rises, the fleet follows; the other extreme stays flat
    where task       the same over canary tasks

The signals' entries win where both speak (they are what `sandbox verify` checked); a signal that
reads several quantities at once (a difference of two shares) adds nothing. `no-fault` moves
nothing anywhere.
"""
from __future__ import annotations

from dataclasses import dataclass

from incidents.quantities import EACH
from incidents.readings import Reading, readings
from incidents.taxonomy import MECHANISMS, Move

Key = tuple[str, tuple[tuple[str, str], ...], str]  # (quantity, part, scope)
_TURN = {"up": "down", "down": "up", "flat": "flat"}
_SCOPES = ("replica", "task")


@dataclass(frozen=True)
class Entry:
    key: Key
    direction: str
    source: str  # the signal it came from, or "mechanism"


@dataclass(frozen=True)
class Expected:
    direction: str  # of the quantity: up | down | flat
    reduce: str  # how the grader reads several series of the query: max | min (per timestamp)
    key: Key  # the scope it was looked up at (a by-replica reading resolves to replica-max or -min)
    source: str


@dataclass(frozen=True)
class Signature:
    name: str  # a variant (incident/variant) or a root cause
    entries: tuple[Entry, ...]
    everything_flat: bool = False  # no-fault: whatever is read should not move

    def __post_init__(self):
        keys = [e.key for e in self.entries]
        if len(keys) != len(set(keys)):
            raise ValueError(f"{self.name}: a signature holds one direction per quantity, part and scope")

    def lookup(self, quantity: str, part, scope: str) -> Entry | None:
        """The entry for this quantity and scope whose part the reading's part contains (the most specific)."""
        best = None
        for e in self.entries:
            q, p, s = e.key
            if q == quantity and s == scope and covers(p, part) and (best is None or len(p) > len(best.key[1])):
                best = e
        if best is None and self.everything_flat:
            return Entry((quantity, tuple(part), scope), "flat", "no-fault")
        return best

    def expected(self, r: Reading) -> Expected | None:
        """What this signature says `r` should show, and how to read its series (max or min)."""
        if not r.scope.startswith("by-"):
            e = self.lookup(r.quantity, r.part, r.scope)
            return None if e is None else Expected(e.direction, "max", e.key, e.source)
        label = r.scope.removeprefix("by-")
        hi, lo = self.lookup(r.quantity, r.part, f"{label}-max"), self.lookup(r.quantity, r.part, f"{label}-min")
        # one series per replica: the claim is about the one that moved, so read it (the query's max
        # is the quantity's max when the query is not turned)
        if hi is not None and hi.direction == "up":
            return Expected("up", "max" if r.polarity > 0 else "min", hi.key, hi.source)
        if lo is not None and lo.direction == "down":
            return Expected("down", "min" if r.polarity > 0 else "max", lo.key, lo.source)
        if hi is not None:
            return Expected(hi.direction, "max" if r.polarity > 0 else "min", hi.key, hi.source)
        return None if lo is None else Expected(lo.direction, "min" if r.polarity > 0 else "max", lo.key, lo.source)

    def expectations(self, r: Reading) -> list[Expected]:
        """Every way `r` can be read against this signature: a per-replica table shows both its largest
        and its smallest replica (one replica apart from the rest differs from all of them at the smallest)."""
        first = self.expected(r)
        if not r.scope.startswith("by-"):
            return [first] if first else []
        label = r.scope.removeprefix("by-")
        out = [first] if first else []
        for extreme, reduce in (("max", "max"), ("min", "min")):
            e = self.lookup(r.quantity, r.part, f"{label}-{extreme}")
            if r.polarity < 0:
                reduce = "min" if reduce == "max" else "max"
            if e is not None and all(x.key != e.key for x in out):
                out.append(Expected(e.direction, reduce, e.key, e.source))
        return out

    def at(self, key: Key) -> str | None:
        e = self.lookup(*key)
        return None if e is None else e.direction


def covers(part, within) -> bool:
    """Does what is said of `part` speak for a reading of `within`? Of a slice, for narrower slices of it
    (greedy repeats, for greedy repeats in bursts); of the whole, for the whole only (that accuracy
    fell says nothing of accuracy on long answers). A reading split by the label (`mode each`) shows
every value of it, so it holds the slice."""
    if tuple(part) == tuple(within):
        return True
    split = dict(within)
    return bool(part) and all(split.get(k) in (v, EACH) for k, v in part)


def expand(move: Move) -> dict[Key, str]:
    """A mechanism's move at every scope it speaks for."""
    q, d, part = move.quantity, move.direction, tuple(move.part)
    out = {(q, part, "fleet"): d}
    for label in _SCOPES:
        if move.where == label and d != "flat":
            out[(q, part, f"{label}-max")] = d if d == "up" else "flat"
            out[(q, part, f"{label}-min")] = d if d == "down" else "flat"
            out[(q, part, f"{label}-spread")] = "up"
        else:
            out[(q, part, f"{label}-max")] = out[(q, part, f"{label}-min")] = d
            out[(q, part, f"{label}-spread")] = "flat"
    return out


def signal_entries(incident, variant) -> dict[Key, tuple[str, str]]:
    """The variant's signature over its signals, read as quantities: key -> (direction, signal)."""
    out = {}
    for name, direction in sorted(variant.signature.items()):
        found = readings(incident.signals[name])
        if len(found) != 1:
            continue  # a composite (one share minus another) says nothing of either alone
        r = found[0]
        scope = r.scope.replace("by-", "") + "-max" if r.scope.startswith("by-") else r.scope
        out[(r.quantity, r.part, scope)] = (direction if r.polarity > 0 else _TURN[direction], name)
    return out


def conflicts(incident, variant) -> list[str]:
    """Where a variant's signals and its cause's mechanism disagree (a test keeps this empty)."""
    mech = {k: d for m in MECHANISMS[variant.answer.root_cause] for k, d in expand(m).items()}
    return [f"{incident.id}/{variant.key}: {name} says {key[0]} {key[2]} {d}, the mechanism {mech[key]}"
            for key, (d, name) in signal_entries(incident, variant).items() if key in mech and mech[key] != d]


def variant_signature(incident, variant) -> Signature:
    cause = variant.answer.root_cause
    entries = {k: (d, "mechanism") for m in MECHANISMS[cause] for k, d in expand(m).items()}
    entries.update(signal_entries(incident, variant))
    return Signature(f"{incident.id}/{variant.key}", tuple(Entry(k, d, s) for k, (d, s) in sorted(entries.items())),
                     everything_flat=cause == "no-fault")


def cause_signatures(catalogue: dict) -> dict[str, Signature]:
    """Every root cause's signature: its variants' (where several variants share a cause, what they agree on),
    or its mechanism alone where no variant has it."""
    by_cause: dict[str, list[Signature]] = {}
    for incident in catalogue.values():
        for variant in incident.variants.values():
            by_cause.setdefault(variant.answer.root_cause, []).append(variant_signature(incident, variant))
    out = {}
    for cause, moves in MECHANISMS.items():
        sigs = by_cause.get(cause)
        if not sigs:
            entries = {k: d for m in moves for k, d in expand(m).items()}
            out[cause] = Signature(cause, tuple(Entry(k, d, "mechanism") for k, d in sorted(entries.items())),
                                   everything_flat=cause == "no-fault")
            continue
        common = {e.key: e for e in sigs[0].entries}
        for other in sigs[1:]:
            theirs = {e.key: e.direction for e in other.entries}
            common = {k: e for k, e in common.items() if theirs.get(k) == e.direction}
        out[cause] = Signature(cause, tuple(common[k] for k in sorted(common)), everything_flat=cause == "no-fault")
    return out
