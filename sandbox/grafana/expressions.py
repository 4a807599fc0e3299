"""Every PromQL expression the dashboards and alert rules run, in the form a Prometheus can answer directly.

    panel      a panel target's `expr`, Grafana's variables given concrete values: $model, $replica and
               $version match everything (".*", the dashboards' "All"), $__rate_interval and
               $__interval are 1m
    variable   a template variable's `label_values(metric{...}, label)`, as the series query
               Grafana's Prometheus datasource runs for it: `group by (label) (metric{...})`
    rule       a recording rule's `expr` as written; an alerting rule's `expr` with every comparison
               given `bool`, so the expression reports its condition (0 or 1) on a healthy stack too,
               instead of returning nothing until it fires

`returns_data` is the verdict a dashboard gives: a query "has data" when at least one sample is a
number (a NaN, e.g. a quantile of a histogram with no new observations, is drawn as a gap).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

VARIABLE_VALUES = {"$model": ".*", "$replica": ".*", "$version": ".*", "$__rate_interval": "1m",
                   "$__interval": "1m"}
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(.+?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$", re.DOTALL)
_COMPARISON = re.compile(r"(==|!=|>=|<=|>|<)(\s*bool\b)?")


@dataclass(frozen=True)
class Expression:
    source: str  # "<file>: <panel or rule>"
    kind: str  # panel | variable | rule
    promql: str  # what is sent to Prometheus

    def __post_init__(self):
        if self.kind not in ("panel", "variable", "rule"):
            raise ValueError(f"kind must be panel, variable or rule, got {self.kind!r}")
        if "$" in self.promql:
            raise ValueError(f"{self.source}: a Grafana variable is left in {self.promql!r}")


def concrete(expr: str) -> str:
    # Longest names first, so $__rate_interval is not cut short by a shorter variable.
    for var in sorted(VARIABLE_VALUES, key=len, reverse=True):
        expr = expr.replace("${" + var[1:] + "}", VARIABLE_VALUES[var]).replace(var, VARIABLE_VALUES[var])
    return expr


def variable_query(query: str) -> str:
    m = _LABEL_VALUES.match(query)
    if not m:
        raise ValueError(f"only label_values(metric, label) variables are checked, got {query!r}")
    return f"group by ({m.group(2)}) ({concrete(m.group(1))})"


def with_bool(expr: str) -> str:
    """`expr` with `bool` after each comparison operator outside label matchers and strings."""
    out, depth, quote, i = [], 0, None, 0
    while i < len(expr):
        c = expr[i]
        if quote:
            out.append(c)
            if c == "\\":
                out.append(expr[i + 1])
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'`":
            quote = c
            out.append(c)
        elif c == "{":
            depth += 1
            out.append(c)
        elif c == "}":
            depth -= 1
            out.append(c)
        elif depth == 0 and (m := _COMPARISON.match(expr, i)):
            out.append(m.group(0) if m.group(2) else m.group(1) + " bool")  # already `bool`: as written
            i += len(m.group(0))
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def dashboard_expressions(path: Path) -> list[Expression]:
    board = json.loads(Path(path).read_text())
    out = []
    for var in board.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            out.append(Expression(f"{path.name}: variable {var['name']}", "variable", variable_query(query)))
    for panel in board["panels"]:
        for t in panel.get("targets", []):
            out.append(Expression(f"{path.name}: {panel['title']} [{t['refId']}]", "panel", concrete(t["expr"])))
    return out


def rule_expressions(path: Path) -> list[Expression]:
    out = []
    for group in yaml.safe_load(Path(path).read_text())["groups"]:
        for rule in group["rules"]:
            name = rule.get("alert") or rule["record"]
            expr = with_bool(rule["expr"]) if "alert" in rule else rule["expr"]
            out.append(Expression(f"{path.name}: {name}", "rule", expr.strip()))
    return out


def returns_data(rows: list[dict]) -> bool:
    for row in rows:
        try:
            if math.isfinite(float(row["value"][1])):
                return True
        except (KeyError, TypeError, ValueError):
            continue
    return False
