"""YAML with line numbers, and the errors that name FILE:LINE: field.

`load_marked` turns a YAML document into plain Python data plus `lines`: for every mapping key
and sequence item, keyed by its path (`("variants", "prefix-off", "faults", 0)`), the 1-based line
it starts on. Errors about a path that is absent (a missing field) take the line of the nearest
present parent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

Path_ = tuple[str | int, ...]


def dotted(path: Path_) -> str:
    """("variants", "prefix-off", "faults", 0, "type") -> "variants.prefix-off.faults[0].type"."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    field: str  # dotted path; "" for the document itself
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.field + ': ' if self.field else ''}{self.message}"


class IncidentError(ValueError):
    """An incident file is invalid; `problems` lists every error found, `file`/`line`/`field` are the first's."""

    def __init__(self, problems: list[Problem]):
        assert problems
        self.problems = sorted(problems, key=lambda p: (p.file, p.line))
        first = self.problems[0]
        self.file, self.line, self.field = first.file, first.line, first.field
        super().__init__("\n".join(str(p) for p in self.problems))


class Problems:
    """Collects errors against one file, resolving each path to a line."""

    def __init__(self, file: str, lines: dict[Path_, int]):
        self.file, self.lines, self.items = file, lines, []

    def line_of(self, path: Path_) -> int:
        while path not in self.lines and path:
            path = path[:-1]
        return self.lines.get(path, 1)

    def add(self, path: Path_, message: str, line: int | None = None) -> None:
        self.items.append(Problem(self.file, line or self.line_of(path), dotted(path), message))

    def raise_if_any(self) -> None:
        if self.items:
            raise IncidentError(self.items)


def load_marked(text: str, file: str) -> tuple[Any, dict[Path_, int]]:
    """Parse one YAML document; raise IncidentError on syntax errors, duplicate or non-string keys."""
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # a character YAML does not allow (NUL) is refused here already
        node = loader.get_single_node()
        lines: dict[Path_, int] = {(): 1}
        problems = Problems(file, lines)
        data = _convert(loader, node, (), lines, problems, set()) if node is not None else None
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1
        char = chr(e.character) if isinstance(e.character, int) else e.character
        raise IncidentError([Problem(file, line, "", f"YAML syntax: character {char!r} is not allowed "
                                                     f"in YAML ({e.reason})")]) from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        message = getattr(e, "problem", None) or str(e)
        raise IncidentError([Problem(file, mark.line + 1 if mark else 1, "", f"YAML syntax: {message}")]) from e
    finally:
        if loader is not None:
            loader.dispose()
    problems.raise_if_any()
    return data, lines


def _convert(loader: yaml.SafeLoader, node: yaml.Node, path: Path_, lines: dict, problems: Problems,
             seen: set[int]) -> Any:
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
        # An alias (*name) to a block is the same node again: seven lines of nested aliases made 4.8 million
        # nodes and never finished loading. No file of ours needs one; a scalar's alias stays allowed.
        if id(node) in seen:
            problems.add(path, "repeats an anchored block (*alias): write the block out where it is used")
            return None
        seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        out: dict = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                problems.add(path, f"keys must be strings, got {key!r} (quote it)", key_node.start_mark.line + 1)
                continue
            lines[path + (key,)] = key_node.start_mark.line + 1
            if key in out:
                problems.add(path + (key,), "duplicate key")
            out[key] = _convert(loader, value_node, path + (key,), lines, problems, seen)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for i, item in enumerate(node.value):
            lines[path + (i,)] = item.start_mark.line + 1
            items.append(_convert(loader, item, path + (i,), lines, problems, seen))
        return items
    return loader.construct_object(node, deep=True)
