"""PromQL checks: does an expression parse (Prometheus' own parser, through promtool), and which metrics does it read.

Parsing goes through `promtool check rules` on a temporary rules file with one recording rule
per expression, so the verdict is the real parser's; one promtool run costs about 100 ms, so
`check_many` batches. `metric_names` is a small tokenizer, enough for the grader's question
"does this query touch that metric".
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

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


# Everything a PromQL lexer needs to tell metric names from the rest.
_TOKEN = re.compile(r"""
    (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<comment>\#[^\n]*)
  | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[a-zA-Z0-9]*)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<space>\s+)
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)
_KEYWORDS = {"and", "or", "unless", "atan2", "bool", "offset", "by", "without", "on", "ignoring",
             "group_left", "group_right", "inf", "nan",
             # aggregations may be followed by `by (...)` rather than `(`
             "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
             "topk", "quantile", "limitk", "limit_ratio"}
_LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_CLOSE = {"{": "}", "[": "]", "(": ")"}


def _tokens(expr: str) -> list[tuple[str, str]]:
    return [(m.lastgroup, m.group()) for m in _TOKEN.finditer(expr) if m.lastgroup not in ("space", "comment")]


def _skip_group(toks: list[tuple[str, str]], i: int) -> tuple[int, list[tuple[str, str]]]:
    """toks[i] opens a bracket; the index just past its match and the tokens inside."""
    opener, depth, j = toks[i][1], 0, i
    while j < len(toks):
        text = toks[j][1]
        depth += (text == opener) - (text == _CLOSE[opener])
        if depth == 0:
            break
        j += 1
    return j + 1, toks[i + 1:j]


def metric_names(expr: str) -> list[str]:
    """The metric names `expr` selects, in order of first appearance.

    Identifiers are metric names unless they call a function or aggregation, are keywords, or sit
    in label matchers, label lists (by, on, ...) or range brackets; `{__name__="x"}` counts as x.
    """
    toks, names, i = _tokens(expr), [], 0
    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1][1] if i + 1 < len(toks) else ""
        if text in ("{", "["):
            i, inside = _skip_group(toks, i)
            for k in range(len(inside) - 2):
                if text == "{" and inside[k][1] == "__name__" and inside[k + 1][1] == "=" and inside[k + 2][0] == "string":
                    names.append(inside[k + 2][1][1:-1])
            continue
        if kind == "ident" and text.lower() in _LABEL_LISTS and nxt == "(":
            i, _ = _skip_group(toks, i + 1)
            continue
        if kind == "ident" and nxt != "(" and text.lower() not in _KEYWORDS:
            names.append(text)
        i += 1
    return list(dict.fromkeys(names))


_HISTOGRAM_SUFFIX = re.compile(r"_(bucket|sum|count)$")


def metric_families(expr: str) -> list[str]:
    """Like metric_names, with histogram series (`_bucket`, `_sum`, `_count`) folded onto their family name."""
    return list(dict.fromkeys(_HISTOGRAM_SUFFIX.sub("", n) for n in metric_names(expr)))
