"""Which quantities a PromQL query reads, in which form, per what: read from its syntax tree.

    readings("sum by (replica) (rate(vllm:prefix_cache_hits_total[1m]))"
             " / sum by (replica) (rate(vllm:prefix_cache_queries_total[1m]))")
    -> [Reading(quantity="prefix-cache-hit-rate", scope="by-replica", polarity=1, form="ratio", ...)]

The walk goes bottom-up. A selector is a *raw* term (a metric and its label matchers); a ratio
of two raw terms that a quantity lists (hits / queries, `_sum / _count`) becomes a reading, as
does `histogram_quantile` over a quantity's `_bucket`; what is left raw at the end is looked up
as one counter's rate or one gauge. Aggregations record what they do to the labels a quantity
can be read per (`replica`, `task`):

    fleet            pooled (sum, avg, ...) or never split
    replica-max/min  split per replica, then the largest / smallest kept (min(... by (replica)))
    replica-spread   the largest over the smallest (or minus it): one replica apart from the rest
    gap L a-b        one part over (or minus) another: long answers' error minus short answers'
    by-replica       still one series per replica: the grader reads the one that moved

Polarity follows the arithmetic: `1 - x`, `-x` and a denominator turn it (-1: the query falls
as the quantity rises), and a min taken over something turned is a max of the quantity.
Filters (`and`, `unless`, comparisons) read their left side only; `or` reads both; `absent`,
`vector` and `time` read nothing.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import promql_parser as pp

from incidents.promql import children, parse, selector_name
from incidents.quantities import QUANTITIES, Quantity, Series, per_labels, side

_RATE = {"rate", "irate", "increase", "delta", "idelta", "deriv"}
_NOTHING = {"absent", "absent_over_time", "vector", "time", "count_over_time", "changes", "resets", "timestamp"}
_COMPARE = {"==", "!=", ">", "<", ">=", "<="}
_POOL = {"sum", "avg", "stddev", "stdvar", "quantile", "group"}
_KEEP_LABELS = {"topk", "bottomk", "limitk", "limit_ratio"}


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
class _Term:
    metric: str | None  # raw: the selector's metric; None once it is a reading
    matchers: tuple = ()
    reading: Reading | None = None
    base_polarity: int = 1  # the measure's own (a reading's), 1 while raw
    polarity: int = 1  # what arithmetic above it did
    kept: tuple[str, frozenset] = ("all-but", frozenset())  # ("only", labels) or ("all-but", labels)
    collapsed: dict = field(default_factory=dict)  # per-label -> min | max | pooled, relative to the value then
    rated: bool = False


def _keeps(kept: tuple[str, frozenset], label: str) -> bool:
    how, labels = kept
    return label in labels if how == "only" else label not in labels


def _flip(terms: list[_Term]) -> list[_Term]:
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


def _matches(term: _Term, series: Series) -> bool:
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


def _read(term: _Term, q: Quantity, polarity: int, form: str, metrics: tuple[str, ...], stopped=None,
          share: bool = False) -> _Term:
    r = Reading(q.id, _part(q, term.matchers), "fleet", 1, form, metrics, side(metrics[0]), stopped, share)
    return replace(term, metric=None, reading=r, base_polarity=polarity, collapsed=dict(term.collapsed))


def _ratio(num: _Term, den: _Term, node) -> _Term | None:
    if num.metric is None or den.metric is None:
        return None
    for q in QUANTITIES:
        for ratio in q.all_ratios():
            if _matches(num, ratio.numerator) and _matches(den, ratio.denominator):
                stopped = None
                if ratio.when_stopped is not None:
                    stopped = (str(node), str(node.rhs), ratio.when_stopped, ratio.stopped_means)
                return _read(num, q, ratio.polarity, ratio.form, (num.metric, den.metric), stopped, ratio.share)
    return None


def _difference(lhs: _Term, rhs: _Term) -> _Term | None:
    if lhs.metric is None or rhs.metric is None:
        return None
    for q in QUANTITIES:
        for d in q.differences:
            if _matches(lhs, d.lhs) and _matches(rhs, d.rhs):
                return _read(lhs, q, d.polarity, "difference", (lhs.metric, rhs.metric))
    return None


def _single(term: _Term) -> _Term | None:
    for q in QUANTITIES:
        for s in q.singles:
            if _matches(term, s.series):
                form = "rate" if s.kind == "rate" and term.rated else "counter" if s.kind == "rate" else "gauge"
                return _read(term, q, s.polarity, form, (term.metric,))
    return None


def _resolved(term: _Term) -> _Term | None:
    return term if term.metric is None else _single(term)


def _spread(lhs: list[_Term], rhs: list[_Term]) -> _Term | None:
    """max(x per replica) / min(x per replica), or minus: how far one replica is from the rest."""
    if len(lhs) != 1 or len(rhs) != 1:
        return None
    a, b = _resolved(lhs[0]), _resolved(rhs[0])
    if a is None or b is None or (a.reading.quantity, a.reading.part) != (b.reading.quantity, b.reading.part):
        return None
    for label in per_labels(a.reading.metrics[0]):
        if _how(a, label) == "max" and _how(b, label) == "min":
            return replace(a, collapsed={**a.collapsed, label: ("spread", 1)}, polarity=1, base_polarity=1)
    return None


def _gap(lhs: list[_Term], rhs: list[_Term]) -> _Term | None:
    """One part of a quantity over (or minus) another: long answers' error minus short answers'. A gap is
    its own reading, scoped `gap LABEL a-b`: nothing said of the whole or of either part speaks for it."""
    if len(lhs) != 1 or len(rhs) != 1:
        return None
    a, b = _resolved(lhs[0]), _resolved(rhs[0])
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


def _how(term: _Term, label: str) -> str | None:
    """min | max | pooled | spread: what was done to `label`, relative to the quantity (a min of a turned value is a max)."""
    if label not in term.collapsed:
        return None
    how, sign = term.collapsed[label]
    if how in ("min", "max") and sign * term.base_polarity < 0:
        return "max" if how == "min" else "min"
    return how


# -- the walk ---------------------------------------------------------------------------------
def _walk(node) -> list[_Term]:
    if isinstance(node, pp.VectorSelector):
        name = selector_name(node)
        return [_Term(name, tuple(node.matchers.matchers))] if name else []
    if isinstance(node, (pp.NumberLiteral, pp.StringLiteral)):
        return []
    if isinstance(node, pp.UnaryExpr):
        return _flip(_walk(node.expr))
    if isinstance(node, pp.Call):
        return _call(node)
    if isinstance(node, pp.AggregateExpr):
        return _aggregate(node)
    if isinstance(node, pp.BinaryExpr):
        return _binary(node)
    return [t for child in children(node) for t in _walk(child)]  # parentheses, ranges, subqueries


def _call(node) -> list[_Term]:
    name = node.func.name
    if name in _NOTHING:
        return []
    if name in _RATE:
        return [replace(t, rated=True) for t in _walk(node.args[0])]
    if name == "histogram_quantile" and len(node.args) == 2:
        phi = node.args[0].val if isinstance(node.args[0], pp.NumberLiteral) else None
        out = []
        for t in _walk(node.args[1]):
            family = (t.metric or "").removesuffix("_bucket")
            q = next((q for q in QUANTITIES if t.metric and t.metric.endswith("_bucket") and family in q.histograms), None)
            if q is None:
                out.append(t)
                continue
            form = f"p{phi * 100:g}" if phi is not None else "quantile"
            how, labels = t.kept
            kept = (how, labels - {"le"}) if how == "only" else (how, labels | {"le"})
            out.append(replace(_read(t, q, 1, form, (t.metric,)), kept=kept))
        return out
    return [t for arg in node.args for t in _walk(arg)]  # *_over_time, clamp, label_replace...: the same value


def _aggregate(node) -> list[_Term]:
    op = str(node.op)
    terms = _walk(node.expr)
    if op in _KEEP_LABELS:
        return terms
    if op in ("count", "count_values"):  # counting series per replica counts replicas
        counted = []
        for t in terms:
            metric = t.metric or t.reading.metrics[0]
            if "replica" in per_labels(metric) and _keeps(t.kept, "replica"):
                q = next(q for q in QUANTITIES if q.id == "replicas-serving")
                r = Reading(q.id, (), "fleet", 1, "count", (metric,), "server")
                counted.append(_Term(None, reading=r, kept=_kept_after(node, t.kept)))
        return counted
    out = []
    for t in terms:
        kept = _kept_after(node, t.kept)
        collapsed = dict(t.collapsed)
        for label in ("replica", "task"):
            if label not in collapsed and _keeps(t.kept, label) and not _keeps(kept, label):
                collapsed[label] = (op if op in ("min", "max") else "pooled", t.polarity)
        out.append(replace(t, kept=kept, collapsed=collapsed))
    return out


def _kept_after(node, kept: tuple[str, frozenset]) -> tuple[str, frozenset]:
    mod = node.modifier
    if mod is None:
        return ("only", frozenset())
    labels = frozenset(mod.labels)
    how, old = kept
    if str(mod.type).endswith("By"):
        return ("only", labels & old) if how == "only" else ("only", labels - old)
    return (how, old - labels) if how == "only" else (how, old | labels)


def _binary(node) -> list[_Term]:
    op = str(node.op)
    lhs, rhs = _walk(node.lhs), _walk(node.rhs)
    if op in ("and", "unless"):
        return lhs
    if op == "or":
        return lhs + rhs
    if op in _COMPARE:
        return lhs or rhs
    if op == "/":
        if len(lhs) == 1 and len(rhs) == 1 and (ratio := _ratio(lhs[0], rhs[0], node)) is not None:
            return [ratio]
        if (spread := _spread(lhs, rhs) or _gap(lhs, rhs)) is not None:
            return [spread]
        return lhs + _flip(rhs)
    if op == "-":
        if len(lhs) == 1 and len(rhs) == 1 and (diff := _difference(lhs[0], rhs[0])) is not None:
            return [diff]
        if (spread := _spread(lhs, rhs) or _gap(lhs, rhs)) is not None:
            return [spread]
        return lhs + _flip(rhs)
    return lhs + rhs


def _scope(t: _Term) -> str:
    if "gap" in t.collapsed:
        return t.collapsed["gap"][0]
    for label in per_labels(t.reading.metrics[0]):
        how = _how(t, label)
        if how in ("min", "max", "spread"):
            return f"{label}-{how}"
        if how is None and _keeps(t.kept, label):
            return f"by-{label}"
    return "fleet"


def readings(expr: str) -> list[Reading]:
    """What `expr` reads, in order of appearance; ValueError (naming the query) when it does not parse."""
    out = []
    for t in _walk(parse(expr)):
        t = _resolved(t)
        if t is None:
            continue
        r = replace(t.reading, scope=_scope(t), polarity=t.base_polarity * t.polarity)
        if r not in out:
            out.append(r)
    return out


def unread_metrics(expr: str) -> list[str]:
    """Metrics `expr` selects that no quantity of the vocabulary covers (a report says so)."""
    known = {name for r in readings(expr) for name in r.metrics}
    return [t.metric for t in _walk(parse(expr)) if t.metric and t.metric not in known and _single(t) is None]
