"""PromQL checks: does an expression parse (Prometheus' own parser, through promtool), and its syntax tree.

Validity goes through `promtool check rules` on a temporary rules file with one recording rule
per expression, so the verdict is the real parser's; one promtool run costs about 100 ms, so
`check_many` batches. Structure comes from `parse`, a syntax tree from promql-parser (the Rust
parser GreptimeDB maintains, as a Python extension): what the grader reads to learn which
metrics, and through them which quantities (incidents/readings.py), a query reads.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import promql_parser
import yaml


class PromtoolNotFound(RuntimeError):
    """promtool is not installed where we look for it."""


def promtool_binary() -> str:
    """PROMTOOL_BIN, else the promtool next to PROMETHEUS_BIN, else promtool on PATH."""
    if os.environ.get("PROMTOOL_BIN"):
        found = shutil.which(os.environ["PROMTOOL_BIN"])
        if found is None:
            raise PromtoolNotFound(f"PROMTOOL_BIN={os.environ['PROMTOOL_BIN']!r} is not an executable")
        return found
    if os.environ.get("PROMETHEUS_BIN"):
        server = shutil.which(os.environ["PROMETHEUS_BIN"])
        if server is not None:
            sibling = Path(server).resolve().parent / "promtool"
            if os.access(sibling, os.X_OK):
                return str(sibling)
    found = shutil.which("promtool")
    if found is None:
        raise PromtoolNotFound("promtool not found: run scripts/setup.sh (installs Debian's prometheus package), "
                               "or set PROMTOOL_BIN (or PROMETHEUS_BIN, with promtool next to it)")
    return found


_verdicts: dict[str, str | None] = {}  # expression -> parse error (None: parses); the parser is deterministic
_RULE_ERROR = re.compile(r'rule \d+, "e(\d+)": (?:could not parse expression: )?(.*)$')


def check_many(exprs: Sequence[str]) -> list[str | None]:
    """One promtool run for all expressions; the parse error of each (None where it parses)."""
    todo = sorted({e for e in exprs if e not in _verdicts and e.strip()})
    if todo:
        _verdicts.update(zip(todo, _run_promtool(todo)))
    return [_verdicts[e] if e.strip() else "empty expression" for e in exprs]


def check_promql(expr: str) -> None:
    """Raise ValueError with the Prometheus parser's message when `expr` does not parse."""
    error = check_many([expr])[0]
    if error is not None:
        raise ValueError(f"PromQL does not parse: {error}")


def _run_promtool(exprs: list[str]) -> list[str | None]:
    rules = {"groups": [{"name": "check", "rules": [{"record": f"e{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    with tempfile.TemporaryDirectory(prefix="promql-") as tmp:
        path = Path(tmp) / "rules.yml"
        path.write_text(yaml.safe_dump(rules, width=1 << 20))
        proc = subprocess.run([promtool_binary(), "check", "rules", "--lint=none", str(path)],
                              check=False, capture_output=True, text=True, timeout=60)
    errors: list[str | None] = [None] * len(exprs)
    for line in (proc.stdout + proc.stderr).splitlines():
        m = _RULE_ERROR.search(line)
        if m:
            errors[int(m.group(1))] = m.group(2).strip()
    if proc.returncode != 0 and all(e is None for e in errors):
        raise RuntimeError(f"promtool check rules failed without naming a rule:\n{proc.stdout}{proc.stderr}")
    return errors


MAX_DEPTH = 64  # brackets deep; real queries nest under 15, and the Rust parser overflows its stack near 6,000


def _depth(expr: str) -> int:
    """How deep brackets nest in `expr` (strings skipped): refused before the parser sees it."""
    depth = deepest = 0
    quote = None
    escaped = False
    for ch in expr:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\" and quote != "`":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "\"'`":
            quote = ch
        elif ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
    return deepest


def parse(expr: str) -> promql_parser.Expr:
    """The syntax tree of `expr`, from promql-parser (a binding of the Rust PromQL parser GreptimeDB maintains).

    ValueError names the query. promtool (check_many) stays the final word on validity: this parser
    is for reading a query's structure, which the grader needs for every query it scores.
    """
    if not expr.strip():
        raise ValueError("empty expression")
    if _depth(expr) > MAX_DEPTH:
        raise ValueError(f"brackets nest more than {MAX_DEPTH} deep in {_short(expr)}")
    try:
        return promql_parser.parse(expr)
    except ValueError as e:
        raise ValueError(f"{e} in {_short(expr)}") from None


def _short(expr: str, limit: int = 160) -> str:
    one_line = " ".join(expr.split())
    return repr(one_line if len(one_line) <= limit else one_line[:limit] + "...")


def children(node) -> list:
    """The sub-expressions of a syntax-tree node, left to right (a selector has none)."""
    if isinstance(node, promql_parser.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, promql_parser.AggregateExpr):
        return ([node.param] if node.param is not None else []) + [node.expr]
    if isinstance(node, promql_parser.Call):
        return list(node.args)
    if isinstance(node, promql_parser.MatrixSelector):
        return [node.vector_selector]
    if isinstance(node, (promql_parser.SubqueryExpr, promql_parser.ParenExpr, promql_parser.UnaryExpr)):
        return [node.expr]
    return []


def selector_name(node: promql_parser.VectorSelector) -> str | None:
    """The metric a selector reads: its name, or the value of an `__name__="x"` matcher."""
    if node.name:
        return node.name
    for m in node.matchers.matchers:
        if m.name == "__name__" and str(m.op) == "MatchOp.Equal":
            return m.value
    return None


def metric_names(expr: str) -> list[str]:
    """The metric names `expr` selects, in order of first appearance (from its syntax tree)."""
    names, todo = [], [parse(expr)]
    while todo:
        node = todo.pop()
        if isinstance(node, promql_parser.VectorSelector):
            name = selector_name(node)
            if name:
                names.append(name)
        todo.extend(reversed(children(node)))
    return list(dict.fromkeys(names))


_HISTOGRAM_SUFFIX = re.compile(r"_(bucket|sum|count)$")


def metric_families(expr: str) -> list[str]:
    """Like metric_names, with histogram series (`_bucket`, `_sum`, `_count`) folded onto their family name."""
    return list(dict.fromkeys(_HISTOGRAM_SUFFIX.sub("", n) for n in metric_names(expr)))
