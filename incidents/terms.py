"""The pieces a query is read into on its way to readings (incidents/readings.py): terms, and matching
them against the quantities' measures.

A `Term` is either raw (a selector's metric and matchers, as the walk found it) or read (a
`Reading` of a quantity). Matching a raw term against a measure's `Series` evaluates the
selector's label matchers on the values the measure names: `{status!~"200|499"}` drops 200,
so it selects errors; `{result="wrong"}` keeps wrong and drops correct.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from incidents.quantities import QUANTITIES, Quantity, Series, per_labels, side


@dataclass(frozen=True)
class Reading:
    quantity: str
    part: tuple[tuple[str, str], ...]  # the slice it reads: (("length", "long"),); () for the whole
    scope: str  # fleet | replica-max | replica-min | replica-spread | by-replica | task-... (see above)
    polarity: int
    form: str  # p99 | mean | ratio | rate | gauge | difference | share wrong | ...
    metrics: tuple[str, ...]
    side: str  # server | client
    stopped: tuple[str, str, float, str] | None = None  # (ratio text, denominator text, value, meaning) for 0/0
    share: bool = False  # a part over its whole, in [0, 1]

    def describe(self) -> str:
        part = "".join(f" ({k} {v})" for k, v in self.part)
        where = "" if self.scope == "fleet" else f", {self.scope}"
        turned = ", turned (falls as it rises)" if self.polarity < 0 else ""
        return f"{self.quantity}{part} as {self.form} at the {self.side}{where}{turned}"


@dataclass
class Term:
    metric: str | None  # raw: the selector's metric; None once it is a reading
    matchers: tuple = ()
    reading: Reading | None = None
    base_polarity: int = 1  # the measure's own (a reading's), 1 while raw
    polarity: int = 1  # what arithmetic above it did
    kept: tuple[str, frozenset] = ("all-but", frozenset())  # ("only", labels) or ("all-but", labels)
    collapsed: dict = field(default_factory=dict)  # per-label -> min | max | pooled, relative to the value then
    rated: bool = False


def keeps(kept: tuple[str, frozenset], label: str) -> bool:
    how, labels = kept
    return label in labels if how == "only" else label not in labels


def flip(terms: list[Term]) -> list[Term]:
    return [replace(t, polarity=-t.polarity, collapsed=dict(t.collapsed)) for t in terms]


# -- matching series against a quantity's measures -----------------------------------------------
def _accepts(matchers, label: str, value: str) -> bool:
    for mt in matchers:
        if mt.name != label:
            continue
        op = str(mt.op)
        if op == "MatchOp.Equal" and value != mt.value or op == "MatchOp.NotEqual" and value == mt.value:
            return False
        if op.startswith("MatchOp.Re") and not _full(mt.value, value):
            return False
        if op.startswith("MatchOp.NotRe") and _full(mt.value, value):
            return False
    return True


def _full(pattern: str, value: str) -> bool:
    try:
        return re.fullmatch(pattern, value) is not None
    except re.error:  # an RE2 form Python lacks: say it does not match rather than guess
        return False


def _matches(term: Term, series: Series) -> bool:
    return (term.metric == series.metric
            and all(_accepts(term.matchers, k, v) for k, v in series.keep)
            and not any(_accepts(term.matchers, k, v) for k, v in series.drop))


def _part(q: Quantity, matchers) -> tuple[tuple[str, str], ...]:
    out = []
    for mt in matchers:
        if mt.name in q.parts:
            op = str(mt.op)
            out.append((mt.name, mt.value if op == "MatchOp.Equal" else f"{op.removeprefix('MatchOp.')} {mt.value}"))
    return tuple(sorted(out))


def read(term: Term, q: Quantity, polarity: int, form: str, metrics: tuple[str, ...], stopped=None,
          share: bool = False) -> Term:
    r = Reading(q.id, _part(q, term.matchers), "fleet", 1, form, metrics, side(metrics[0]), stopped, share)
    return replace(term, metric=None, reading=r, base_polarity=polarity, collapsed=dict(term.collapsed))


def ratio(num: Term, den: Term, node) -> Term | None:
    if num.metric is None or den.metric is None:
        return None
    for q in QUANTITIES:
        for ratio in q.all_ratios():
            if _matches(num, ratio.numerator) and _matches(den, ratio.denominator):
                stopped = None
                if ratio.when_stopped is not None:
                    stopped = (str(node), str(node.rhs), ratio.when_stopped, ratio.stopped_means)
                return read(num, q, ratio.polarity, ratio.form, (num.metric, den.metric), stopped, ratio.share)
    return None


def difference(lhs: Term, rhs: Term) -> Term | None:
    if lhs.metric is None or rhs.metric is None:
        return None
    for q in QUANTITIES:
        for d in q.differences:
            if _matches(lhs, d.lhs) and _matches(rhs, d.rhs):
                return read(lhs, q, d.polarity, "difference", (lhs.metric, rhs.metric))
    return None


def single(term: Term) -> Term | None:
    for q in QUANTITIES:
        for s in q.singles:
            if _matches(term, s.series):
                form = "rate" if s.kind == "rate" and term.rated else "counter" if s.kind == "rate" else "gauge"
                return read(term, q, s.polarity, form, (term.metric,))
    return None


def resolved(term: Term) -> Term | None:
    return term if term.metric is None else single(term)


def spread(lhs: list[Term], rhs: list[Term]) -> Term | None:
    """max(x per replica) / min(x per replica), or minus: how far one replica is from the rest."""
    if len(lhs) != 1 or len(rhs) != 1:
        return None
    a, b = resolved(lhs[0]), resolved(rhs[0])
    if a is None or b is None or (a.reading.quantity, a.reading.part) != (b.reading.quantity, b.reading.part):
        return None
    for label in per_labels(a.reading.metrics[0]):
        if how(a, label) == "max" and how(b, label) == "min":
            return replace(a, collapsed={**a.collapsed, label: ("spread", 1)}, polarity=1, base_polarity=1)
    return None


def gap(lhs: list[Term], rhs: list[Term]) -> Term | None:
    """One part of a quantity over (or minus) another: long answers' error minus short answers'. A gap is
    its own reading, scoped `gap LABEL a-b`: nothing said of the whole or of either part speaks for it."""
    if len(lhs) != 1 or len(rhs) != 1:
        return None
    a, b = resolved(lhs[0]), resolved(rhs[0])
    if a is None or b is None or a.reading.quantity != b.reading.quantity or a.kept != b.kept:
        return None
    pa, pb = dict(a.reading.part), dict(b.reading.part)
    differ = sorted(k for k in set(pa) | set(pb) if pa.get(k) != pb.get(k))
    if len(differ) != 1 or differ[0] not in pa or differ[0] not in pb:
        return None
    label = differ[0]
    common = tuple((k, v) for k, v in a.reading.part if k != label)
    r = replace(a.reading, part=common, form=f"gap of {a.reading.form}")
    return replace(a, reading=r, collapsed={**a.collapsed, "gap": (f"gap {label} {pa[label]}-{pb[label]}", 1)})


def how(term: Term, label: str) -> str | None:
    """min | max | pooled | spread: what was done to `label`, relative to the quantity (a min of a turned
    value is a max)."""
    if label not in term.collapsed:
        return None
    how, sign = term.collapsed[label]
    if how in ("min", "max") and sign * term.base_polarity < 0:
        return "max" if how == "min" else "min"
    return how
