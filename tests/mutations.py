"""Hypothesis strategies that break a valid YAML document the ways people and agents do.

A fuzzed case starts from a valid file (so most of it still parses and reaches the deep checks)
and applies a few edits: a field dropped, a value swapped for one of another type or an absurd
one (NaN, -1e308, a 10,000-character string, a nested list), an unknown key, the text cut
short or sprinkled with YAML's own punctuation. The seed is fixed (`derandomize`) and nothing
is stored between runs, so CI tries the same cases every time.
"""
from __future__ import annotations

from typing import Any

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

_FUZZ = settings(derandomize=True, database=None, deadline=None, print_blob=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def fuzz(examples: int) -> settings:
    """A fixed-seed, bounded budget of `examples` cases."""
    return settings(_FUZZ, max_examples=examples)

scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-10**18, max_value=10**18),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1e308, -1e-308, "", " ", "null", "~", "yes", "0x1F", "1e999", "\u202e", "\x00x",
                     "a" * 10_000, "sum(", "up{", "}}", "rate(x[0s])", "ttft-after-deploy", "injected"]),
    st.text(max_size=40),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) |
                      st.dictionaries(st.text(max_size=12), inner, max_size=3), max_leaves=8)


def _nodes(data: Any, path: tuple = ()) -> list[tuple]:
    """Every path into the document, the root first."""
    out = [path]
    if isinstance(data, dict):
        for key, value in data.items():
            out += _nodes(value, path + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out += _nodes(value, path + (i,))
    return out


def _parent(data: Any, path: tuple) -> Any:
    for key in path[:-1]:
        data = data[key]
    return data


@st.composite
def mutated_data(draw, data: Any) -> Any:
    """A deep copy of `data` with one to three structural edits."""
    data = yaml.safe_load(yaml.safe_dump(data))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        nodes = _nodes(data)
        path = draw(st.sampled_from(nodes))
        op = draw(st.sampled_from(["replace", "delete", "add"] if path else ["replace", "add"]))
        if op == "replace":
            value = draw(values)
            if not path:
                data = value
                continue
            _parent(data, path)[path[-1]] = value
        elif op == "delete":
            parent = _parent(data, path)
            del parent[path[-1]]
        else:
            target = data
            for key in path:
                target = target[key]
            if isinstance(target, dict):
                target[draw(st.text(min_size=1, max_size=12))] = draw(values)
            elif isinstance(target, list):
                target.insert(draw(st.integers(min_value=0, max_value=len(target))), draw(values))
    return data


@st.composite
def mutated_text(draw, text: str) -> str:
    """The document's text cut at a random point, or with YAML punctuation and control characters
    inserted, or with a line repeated (a duplicate key)."""
    op = draw(st.sampled_from(["cut", "insert", "repeat"]))
    lines = text.splitlines(keepends=True)
    if op == "cut":
        return text[:draw(st.integers(min_value=0, max_value=len(text)))]
    if op == "repeat" and lines:
        i = draw(st.integers(min_value=0, max_value=len(lines) - 1))
        return "".join(lines[:i + 1] + [lines[i]] + lines[i + 1:])
    at = draw(st.integers(min_value=0, max_value=len(text)))
    junk = draw(st.text(alphabet=":-{}[]&*!|>'\"%@`#,?\t\n\r\x00\ufeff", min_size=1, max_size=6))
    return text[:at] + junk + text[at:]


def documents(text: str) -> st.SearchStrategy[str]:
    """Broken versions of one valid YAML document, as text."""
    data = yaml.safe_load(text)
    as_yaml = mutated_data(data).map(lambda d: yaml.safe_dump(d, sort_keys=False, allow_unicode=True))
    return st.one_of(as_yaml, mutated_text(text))
