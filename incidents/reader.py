"""Typed reads from marked YAML data that collect every problem instead of stopping at the first.

Each read takes the parent mapping, its path and a key; on a bad value it records a problem
against `path + (key,)` and returns None, so the caller can keep checking the rest of the file.
"""
from __future__ import annotations

import math
import re
from typing import Any

from incidents.source import Path_, Problems
from incidents.taxonomy import suggestion

KEBAB = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _type_name(value: Any) -> str:
    return {type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string",
            list: "list", dict: "mapping"}.get(type(value), type(value).__name__)


class Reader:
    def __init__(self, problems: Problems):
        self.problems = problems

    def error(self, path: Path_, message: str) -> None:
        self.problems.add(path, message)

    def mapping(self, value: Any, path: Path_, required: tuple[str, ...] = (),
                optional: tuple[str, ...] = (), *, closed: bool = True) -> dict | None:
        """`value` as a mapping with these keys (others too when not `closed`); None when not a mapping."""
        if not isinstance(value, dict):
            self.error(path, f"expected a mapping, got {_type_name(value)}")
            return None
        for key in required:
            if key not in value:
                self.error(path + (key,), "missing required field")
        allowed = required + optional
        for key in value:
            if closed and key not in allowed:
                self.error(path + (key,), f"unknown field {key!r}{suggestion(key, allowed)}"
                                          f"; allowed: {', '.join(allowed)}")
        return value

    def number(self, m: dict | None, path: Path_, key: str, *, positive: bool = False,
               default: float | None = None) -> float | None:
        """A number >= 0 (> 0 when `positive`)."""
        if m is None or key not in m:
            return default
        value = m[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.error(path + (key,), f"expected a number, got {_type_name(value)} {value!r}")
            return None
        if not math.isfinite(value):
            self.error(path + (key,), f"must be finite, got {value!r}")
            return None
        if positive and not value > 0:
            self.error(path + (key,), f"must be > 0, got {value!r}")
            return None
        if not value >= 0:
            self.error(path + (key,), f"must be >= 0, got {value!r}")
            return None
        return float(value)

    def string(self, m: dict | None, path: Path_, key: str, *, pattern: re.Pattern | None = None,
               what: str = "") -> str | None:
        """A non-empty string, fully matching `pattern` when given (`what` names the pattern)."""
        if m is None or key not in m:
            return None
        value = m[key]
        if not isinstance(value, str) or not value.strip():
            self.error(path + (key,), f"expected a non-empty string, got {_type_name(value)} {value!r}")
            return None
        if pattern is not None and not pattern.fullmatch(value):
            self.error(path + (key,), f"{value!r} is not {what or 'valid'}")
            return None
        return value

    def sequence(self, m: dict | None, path: Path_, key: str, *, non_empty: bool = False) -> list | None:
        if m is None or key not in m:
            return None
        value = m[key]
        if not isinstance(value, list):
            self.error(path + (key,), f"expected a list, got {_type_name(value)}")
            return None
        if non_empty and not value:
            self.error(path + (key,), "must not be empty")
            return None
        return value

    def choice(self, value: Any, path: Path_, choices: tuple, what: str) -> Any:
        """`value` when it is one of `choices`, else a problem naming them (with a close match)."""
        if value in choices:
            return value
        shown = ", ".join("null" if c is None else str(c) for c in choices)
        hint = suggestion(value, [c for c in choices if isinstance(c, str)]) if isinstance(value, str) else ""
        self.error(path, f"unknown {what} {value!r}{hint}; choose from {shown}")
        return None


# A validator names the field first: "cpu_fraction: must be in (0, 1]". Dashes are left out so that
# a message opening with a fault type ("cpu-throttle: ...") is not taken for a field.
_FIELD_PREFIX = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*(?:\[\d+\])*): (.+)", re.DOTALL)


def spec_field(spec: dict, error: ValueError) -> tuple[Path_, str]:
    """Where in the spec a validator's error points: the exception's `field` attribute, or a leading
    'field.path: ' in its message; else the spec itself."""
    message = str(error)
    field = getattr(error, "field", None)
    if isinstance(field, str):
        message = message.removeprefix(f"{field}: ")
    else:
        m = _FIELD_PREFIX.fullmatch(message)
        if m is None:
            return (), message
        field, message = m.group(1), m.group(2)
    parts: list[str | int] = []
    node: Any = spec
    rest = field.split(".")
    while rest:  # keys may contain dots (`set: {engine.enable_prefix_caching: ...}`): take the longest that exists
        n = next((n for n in range(len(rest), 0, -1) if isinstance(node, dict) and ".".join(rest[:n]) in node), 1)
        key = ".".join(rest[:n])
        parts.append(key)
        node = node.get(key) if isinstance(node, dict) else None
        rest = rest[n:]
    return tuple(parts), message
