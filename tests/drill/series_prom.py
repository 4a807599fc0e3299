"""A fake Prometheus for range queries: each series a function of time (the real API's shape)."""
import re

# `x @ t` reads x as it stood at t: these fakes' series are keyed without it (their thresholds are constant)
_AT = re.compile(r" @ [0-9.]+")


class SeriesProm:
    """query_range over a function of time; fn(t) is None where there is no sample."""

    def __init__(self, fn):
        self.fn = fn

    def query_range(self, expr, start, end, step_s):
        t, values = start, []
        while t <= end:
            v = self.fn(t)
            if v is not None:
                values.append([t, str(v)])
            t += step_s
        return [{"metric": {}, "values": values}] if values else []


class ExprProm:
    """query_range answered per expression: {expr: fn(t) or (labels, fn(t))}, `@` modifiers aside; an
    expression not named has no data. Every query is kept as asked, as (expr, start, end)."""

    def __init__(self, by_expr: dict):
        self.by_expr = by_expr
        self.queries: list[tuple[str, float, float]] = []

    def query_range(self, expr, start, end, step_s):
        self.queries.append((expr, start, end))
        entry = self.by_expr.get(_AT.sub("", expr))
        labels, fn = entry if isinstance(entry, tuple) else ({}, entry)
        rows = SeriesProm(fn).query_range(expr, start, end, step_s) if fn else []
        return [{**row, "metric": labels} for row in rows]
