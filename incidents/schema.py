"""Incident scripts: load them validated, and pick a variant by seed. The types live in `incidents.script`.

    incident = load_incident("incidents/ttft-after-deploy.yaml")
    variant = choose_variant(incident, seed=7)

Validation needs promtool (signals are parsed by Prometheus' own parser); a missing promtool
raises `promql.PromtoolNotFound` rather than passing a file unchecked.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from faults.registry import build
from incidents.capacity import knee_profile, knee_profiles  # noqa: F401 - re-exported with the types
from incidents.parser import parse_incident
from incidents.profiles import PROFILES
from incidents.script import (  # noqa: F401 - re-exported: callers import the whole schema from here
    DIRECTIONS,
    INJECTED,
    KNEE,
    AnswerKey,
    Event,
    FaultValidator,
    Incident,
    Location,
    Page,
    Peak,
    Rate,
    Timeline,
    Traffic,
    TrafficChange,
    Variant,
)
from incidents.source import IncidentError, Problem, Problems, load_marked


def default_fault_validator(spec: dict[str, Any]) -> None:
    """faults.registry.build, then the fault's own validate(): a ValueError names the field
    ("cpu_fraction: must be in (0, 1]"); neither touches the stack."""
    build(spec).validate()


def load_incident(path: str | Path, fault_validator: FaultValidator | None = None) -> Incident:
    """Read and validate one incident file; IncidentError lists every problem as FILE:LINE: field: message."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise IncidentError([Problem(str(path), 1, "", f"cannot read: {e.strerror or e}")]) from e
    data, lines = load_marked(text, str(path))
    return parse_incident(data, Problems(str(path), lines), path.stem,
                          fault_validator or default_fault_validator, set(PROFILES))


def load_catalogue(dir: str | Path = "incidents", fault_validator: FaultValidator | None = None) -> dict[str, Incident]:
    """Every `*.yaml` in `dir`, by id (sorted); one IncidentError for all the files' problems."""
    incidents, problems = {}, []
    for path in sorted(Path(dir).glob("*.yaml")):
        try:
            incident = load_incident(path, fault_validator)
        except IncidentError as e:
            problems.extend(e.problems)
        else:
            incidents[incident.id] = incident
    if problems:
        raise IncidentError(problems)
    return incidents


def choose_variant(incident: Incident, seed: int | str) -> Variant:
    """The seeded, weighted choice among the incident's variants (in file order); same seed, same variant."""
    variants = list(incident.variants.values())
    return random.Random(seed).choices(variants, weights=[v.weight for v in variants])[0]
