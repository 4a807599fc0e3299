"""A candidate's diagnosis: the file format, its JSON Schema, and validation that names the field.

    run: 20261130-103425-quality-regression      # the run directory's name (or a recording's)
    root_cause: weight-quantization-too-coarse  # an id from `sandbox taxonomy`
    location: {replica: null, version: v2, component: weights}   # component: an id from `sandbox taxonomy`
    evidence:                                  # what shows it: PromQL, and what it shows
      - query: min by (task) (rate(sandbox_canary_checks_total{result="correct"}[1m]) / ...)
        observation: add accuracy fell from 1.0 to 0.77 after v2 rolled out
    hypotheses:                                # the alternatives, ranked, and what rules each out
      - root_cause: kv-cache-quantization
        ruled_out_by: sum(rate(sandbox_canary_checks_total{length="long",result="wrong"}[1m])) / ...
    remediation: [rollback-deploy, requantize-finer]   # one id or a list
    summary: v2's int4 weights broke addition; roll back.

YAML or JSON (JSON is YAML). Every problem is reported with its file, line and dotted field
(`hypotheses[1].ruled_out_by`), all at once, before anything is graded.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from incidents import taxonomy
from incidents.promql import check_many, parse
from incidents.source import IncidentError, Problem, Problems, load_marked

LOCATION_KEYS = ("replica", "version", "component")
REQUIRED = ("run", "root_cause", "location", "evidence", "hypotheses", "remediation", "summary")
MAX_TEXT = 4000  # a summary or observation longer than this is a paste, not a sentence


class DiagnosisError(IncidentError):
    """A diagnosis file is invalid; `problems` lists each (file, line, field, message)."""


@dataclass(frozen=True)
class Location:
    replica: str | None = None
    version: str | None = None
    component: str | None = None


@dataclass(frozen=True)
class Evidence:
    query: str
    observation: str


@dataclass(frozen=True)
class Hypothesis:
    root_cause: str
    ruled_out_by: str


@dataclass(frozen=True)
class Diagnosis:
    run: str
    root_cause: str
    location: Location
    evidence: tuple[Evidence, ...]
    hypotheses: tuple[Hypothesis, ...]
    remediation: tuple[str, ...]
    summary: str

    def to_dict(self) -> dict:
        return asdict(self)


def load_diagnosis(path: str | Path) -> Diagnosis:
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise DiagnosisError([_problem(str(path), f"cannot read the diagnosis: {e}")]) from None
    return parse_diagnosis(text, str(path))


def parse_diagnosis(text: str, file: str = "<diagnosis>") -> Diagnosis:
    try:
        data, lines = load_marked(text, file)
    except IncidentError as e:
        raise DiagnosisError(e.problems) from None
    problems = Problems(file, lines)
    if not isinstance(data, dict):
        problems.add((), "a diagnosis is a mapping with the fields " + ", ".join(REQUIRED))
        raise DiagnosisError(problems.items)
    for key in REQUIRED:
        if key not in data:
            problems.add((key,), "missing (required)")
    for key in data:
        if key not in REQUIRED:
            problems.add((key,), f"unknown field; the fields are {', '.join(REQUIRED)}")
    run = _text(data, ("run",), problems, nullable=False)
    cause = _cause(data.get("root_cause"), ("root_cause",), problems) if "root_cause" in data else ""
    location = _location(data.get("location"), problems) if "location" in data else Location()
    evidence = tuple(_items(data, "evidence", ("query", "observation"), problems, Evidence))
    hypotheses = tuple(_items(data, "hypotheses", ("root_cause", "ruled_out_by"), problems, Hypothesis))
    for i, h in enumerate(hypotheses):
        _cause(h.root_cause, ("hypotheses", i, "root_cause"), problems)
    remediation = _remediation(data.get("remediation"), problems) if "remediation" in data else ()
    summary = _text(data, ("summary",), problems, nullable=False)
    queries = [(("evidence", i, "query"), e.query) for i, e in enumerate(evidence)]
    queries += [(("hypotheses", i, "ruled_out_by"), h.ruled_out_by) for i, h in enumerate(hypotheses)]
    _check_queries([(path, q) for path, q in queries if q], problems)
    if problems.items:
        raise DiagnosisError(problems.items)
    return Diagnosis(run, cause, location, evidence, hypotheses, remediation, summary)


def _check_queries(queries: list[tuple[tuple, str]], problems: Problems) -> None:
    """Each query must parse twice: into the syntax tree the grader reads (promql-parser), and by Prometheus'
    own parser (promtool, the final word). A refusal names the query."""
    for_promtool = []
    for path, query in queries:
        if len(query) > MAX_TEXT:
            problems.add(path, f"is {len(query)} characters; at most {MAX_TEXT}")
            continue
        try:
            parse(query)
        except ValueError as e:
            problems.add(path, f"PromQL does not parse: {e}")
            continue
        for_promtool.append((path, query))
    for (path, query), error in zip(for_promtool, check_many([q for _, q in for_promtool])):
        if error is not None:
            problems.add(path, f"PromQL does not parse: {error} in {_one_line(query)!r}")


def _one_line(text: str, limit: int = 160) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit] + "..."


def _problem(file: str, message: str) -> Problem:
    return Problem(file, 1, "", message)


def _text(data: dict, path: tuple, problems: Problems, nullable: bool = True) -> str:
    value = data.get(path[-1])
    if value is None:
        if path[-1] in data and not nullable:
            problems.add(path, "must be text, got null")
        return ""
    if not isinstance(value, str):
        problems.add(path, f"must be text, got {type(value).__name__}")
        return ""
    if len(value) > MAX_TEXT:
        problems.add(path, f"is {len(value)} characters; at most {MAX_TEXT}")
    return value


def _cause(value, path: tuple, problems: Problems) -> str:
    if not isinstance(value, str) or not value:
        problems.add(path, "must be a root-cause id (see `sandbox taxonomy`)")
        return ""
    try:
        taxonomy.root_cause(value)
    except ValueError as e:
        problems.add(path, f"{e}; see `sandbox taxonomy`")
    return value


def _location(value, problems: Problems) -> Location:
    if not isinstance(value, dict):
        problems.add(("location",), "must be a mapping with replica, version and component (each may be null)")
        return Location()
    for key in value:
        if key not in LOCATION_KEYS:
            problems.add(("location", key), f"unknown field; the fields are {', '.join(LOCATION_KEYS)}")
    parts = {}
    for key in LOCATION_KEYS:
        v = value.get(key)
        if v is not None and not isinstance(v, (str, int)):
            problems.add(("location", key), f"must be text or null, got {type(v).__name__}")
            v = None
        parts[key] = None if v is None else str(v)
    if parts["component"] is not None:  # a closed list: the words a key can use, in any case or spacing
        try:
            parts["component"] = taxonomy.component(parts["component"]).id
        except ValueError as e:
            problems.add(("location", "component"), f"{e} (or null); see `sandbox taxonomy`")
    return Location(**parts)


def _items(data: dict, key: str, fields: tuple[str, str], problems: Problems, cls) -> list:
    value = data.get(key)
    if key not in data:
        return []
    if value is None:
        value = []
    if not isinstance(value, list):
        problems.add((key,), f"must be a list of {{{', '.join(fields)}}}")
        return []
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            problems.add((key, i), f"must be a mapping with {' and '.join(fields)}")
            continue
        for k in item:
            if k not in fields:
                problems.add((key, i, k), f"unknown field; the fields are {', '.join(fields)}")
        texts = []
        for f in fields:
            v = item.get(f)
            if not isinstance(v, str) or not v.strip():
                problems.add((key, i, f), "missing" if f not in item else "must be non-empty text")
                v = ""
            texts.append(v)
        out.append(cls(*texts))
    return out


def _remediation(value, problems: Problems) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        problems.add(("remediation",), "must be a remediation id or a non-empty list of them (see `sandbox taxonomy`)")
        return ()
    out = []
    for i, item in enumerate(items):
        path = ("remediation",) if isinstance(value, str) else ("remediation", i)
        if not isinstance(item, str):
            problems.add(path, f"must be a remediation id, got {type(item).__name__}")
            continue
        try:
            taxonomy.remediation(item)
        except ValueError as e:
            problems.add(path, f"{e}; see `sandbox taxonomy`")
        out.append(item)
    return tuple(out)


def json_schema() -> dict:
    """The diagnosis format as JSON Schema (draft 2020-12): what `sandbox diagnose --schema` prints."""
    causes = [t.id for t in taxonomy.ROOT_CAUSES]
    remedies = [t.id for t in taxonomy.REMEDIATIONS]
    nullable_text = {"type": ["string", "null"]}
    promql = {"type": "string", "minLength": 1, "description": "a PromQL expression (Prometheus' parser must accept it)"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "sandbox diagnosis",
        "type": "object",
        "additionalProperties": False,
        "required": list(REQUIRED),
        "properties": {
            "run": {"type": "string", "description": "the run id (runs/<run-id>) or recording this diagnoses"},
            "root_cause": {"enum": causes},
            "location": {"type": "object", "additionalProperties": False,
                         "properties": {"replica": nullable_text, "version": nullable_text,
                                        "component": {"enum": [c.id for c in taxonomy.COMPONENTS] + [None]}}},
            "evidence": {"type": "array", "items": {
                "type": "object", "additionalProperties": False, "required": ["query", "observation"],
                "properties": {"query": promql, "observation": {"type": "string", "minLength": 1}}}},
            "hypotheses": {"type": "array", "description": "alternatives, most likely first", "items": {
                "type": "object", "additionalProperties": False, "required": ["root_cause", "ruled_out_by"],
                "properties": {"root_cause": {"enum": causes}, "ruled_out_by": promql}}},
            "remediation": {"oneOf": [{"enum": remedies},
                                      {"type": "array", "minItems": 1, "items": {"enum": remedies}}]},
            "summary": {"type": "string", "maxLength": MAX_TEXT},
        },
    }
