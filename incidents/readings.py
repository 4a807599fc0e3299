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

A query still split by a part label (`sum by (mode)`) reads each part: its part says `mode each`.

Polarity follows the arithmetic: `1 - x`, `-x` and a denominator turn it (-1: the query falls
as the quantity rises), and a min taken over something turned is a max of the quantity.
Filters (`and`, `unless`, comparisons) read their left side only; `or` reads both; `absent`,
`vector` and `time` read nothing.
"""
from __future__ import annotations

from dataclasses import replace

import promql_parser as pp

from incidents.promql import children, parse, selector_name
from incidents.quantities import BY_ID, EACH, PER_LABELS, QUANTITIES, labels_of, per_labels
from incidents.terms import (  # noqa: F401 - Reading is re-exported: what readings() returns
    Reading,
    Term,
    difference,
    flip,
    gap,
    how,
    keeps,
    ratio,
    read,
    resolved,
    single,
    spread,
)

_RATE = {"rate", "irate", "increase", "delta", "idelta", "deriv"}
_NOTHING = {"absent", "absent_over_time", "vector", "time", "count_over_time", "changes", "resets", "timestamp"}
_COMPARE = {"==", "!=", ">", "<", ">=", "<="}
_POOL = {"sum", "avg", "stddev", "stdvar", "quantile", "group"}
_KEEP_LABELS = {"topk", "bottomk", "limitk", "limit_ratio"}


# -- the walk ---------------------------------------------------------------------------------
def _walk(node) -> list[Term]:
    if isinstance(node, pp.VectorSelector):
        name = selector_name(node)
        return [Term(name, tuple(node.matchers.matchers))] if name else []
    if isinstance(node, (pp.NumberLiteral, pp.StringLiteral)):
        return []
    if isinstance(node, pp.UnaryExpr):
        return flip(_walk(node.expr))
    if isinstance(node, pp.Call):
        return _call(node)
    if isinstance(node, pp.AggregateExpr):
        return _aggregate(node)
    if isinstance(node, pp.BinaryExpr):
        return _binary(node)
    return [t for child in children(node) for t in _walk(child)]  # parentheses, ranges, subqueries


def _call(node) -> list[Term]:
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
            bucket = bool(t.metric) and t.metric.endswith("_bucket")
            q = next((q for q in QUANTITIES if bucket and family in q.histograms), None)
            if q is None:
                out.append(t)
                continue
            form = f"p{phi * 100:g}" if phi is not None else "quantile"
            how, labels = t.kept
            kept = (how, labels - {"le"}) if how == "only" else (how, labels | {"le"})
            out.append(replace(read(t, q, 1, form, (t.metric,)), kept=kept))
        return out
    return [t for arg in node.args for t in _walk(arg)]  # *_over_time, clamp, label_replace...: the same value


def _aggregate(node) -> list[Term]:
    op = str(node.op)
    terms = _walk(node.expr)
    if op in _KEEP_LABELS:
        return terms
    if op in ("count", "count_values"):  # counting series per replica counts replicas
        counted = []
        for t in terms:
            metric = t.metric or t.reading.metrics[0]
            if "replica" in per_labels(metric) and keeps(t.kept, "replica"):
                q = next(q for q in QUANTITIES if q.id == "replicas-serving")
                r = Reading(q.id, (), "fleet", 1, "count", (metric,), "server")
                counted.append(Term(None, reading=r, kept=_kept_after(node, t.kept)))
        return counted
    out = []
    for t in terms:
        kept = _kept_after(node, t.kept)
        collapsed = dict(t.collapsed)
        for label in ("replica", "task"):
            if label not in collapsed and keeps(t.kept, label) and not keeps(kept, label):
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


def _binary(node) -> list[Term]:
    op = str(node.op)
    lhs, rhs = _walk(node.lhs), _walk(node.rhs)
    if op in ("and", "unless"):
        return lhs
    if op == "or":
        return lhs + rhs
    if op in _COMPARE:
        return lhs or rhs
    if op == "/":
        if len(lhs) == 1 and len(rhs) == 1 and (found := ratio(lhs[0], rhs[0], node)) is not None:
            return [found]
        if (found := spread(lhs, rhs) or gap(lhs, rhs)) is not None:
            return [found]
        return lhs + flip(rhs)
    if op == "-":
        if len(lhs) == 1 and len(rhs) == 1 and (diff := difference(lhs[0], rhs[0])) is not None:
            return [diff]
        if (found := spread(lhs, rhs) or gap(lhs, rhs)) is not None:
            return [found]
        return lhs + flip(rhs)
    return lhs + rhs


def _scope(t: Term) -> str:
    if "gap" in t.collapsed:
        return t.collapsed["gap"][0]
    for label in per_labels(t.reading.metrics[0]):
        done = how(t, label)
        if done in ("min", "max", "spread"):
            return f"{label}-{done}"
        if done is None and keeps(t.kept, label):
            return f"by-{label}"
    return "fleet"


def _each_part(t: Term) -> tuple[tuple[str, str], ...]:
    """Its part, with `each` for a part label it is still split by: `sum by (mode)` shows the greedy row too."""
    q = BY_ID[t.reading.quantity]
    named = dict(t.reading.part)
    each = [(label, EACH) for label in q.parts if label not in named and label not in PER_LABELS
            and label in labels_of(t.reading.metrics[0]) and keeps(t.kept, label)]
    return tuple(sorted(t.reading.part + tuple(each)))


def readings(expr: str) -> list[Reading]:
    """What `expr` reads, in order of appearance; ValueError (naming the query) when it does not parse."""
    out = []
    for t in _walk(parse(expr)):
        t = resolved(t)
        if t is None:
            continue
        r = replace(t.reading, scope=_scope(t), polarity=t.base_polarity * t.polarity, part=_each_part(t))
        if r not in out:
            out.append(r)
    return out


def unread_metrics(expr: str) -> list[str]:
    """Metrics `expr` selects that no quantity of the vocabulary covers (a report says so)."""
    known = {name for r in readings(expr) for name in r.metrics}
    return [t.metric for t in _walk(parse(expr)) if t.metric and t.metric not in known and single(t) is None]
