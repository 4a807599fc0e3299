"""Fault specs (an incident file's `faults:` entries) to typed faults, validated before anything runs.

    build({"type": "cpu-throttle", "replica": 0, "cpu_fraction": 0.2})  -> CpuThrottle(...)
    build({"type": "foo"})        -> InvalidFault("type: unknown fault type 'foo' (types: ...)")
    build({"type": "pause"})      -> InvalidFault("seconds: required for a pause fault")
"""
from __future__ import annotations

from dataclasses import MISSING, fields

from faults.base import Fault, InvalidFault
from faults.container_cpu import ContainerCpuQuota
from faults.container_kill import ContainerKill
from faults.container_memory import ContainerMemoryLimit
from faults.container_pause import ContainerPause
from faults.cpu_throttle import CpuThrottle
from faults.deploys import Deploy, Knobs
from faults.pause import Pause
from faults.replica_override import ReplicaOverride

FAULT_TYPES: dict[str, type[Fault]] = {cls.type: cls for cls in (
    Deploy, Knobs, ReplicaOverride, CpuThrottle, Pause,
    # the container-level ones act on the container node that holds a replica (services/stack/container_node.py)
    ContainerCpuQuota, ContainerPause, ContainerMemoryLimit, ContainerKill)}


def fault_class(spec) -> type[Fault] | None:
    """The class a spec names (what the fault says of itself), or None when it names no known type."""
    return FAULT_TYPES.get(spec.get("type")) if isinstance(spec, dict) else None


def fields_of(fault_type: str) -> dict[str, bool]:
    """A fault type's fields, each with whether it is required."""
    return {f.name: f.default is MISSING and f.default_factory is MISSING
            for f in fields(FAULT_TYPES[fault_type]) if f.init}


def build(spec: dict) -> Fault:
    """The fault a spec describes; InvalidFault (a ValueError) naming the field if anything is wrong."""
    if not isinstance(spec, dict):
        raise InvalidFault("type", f"a fault is a mapping with a type and its fields, got {spec!r}")
    kind = spec.get("type")
    if kind not in FAULT_TYPES:
        raise InvalidFault("type", f"unknown fault type {kind!r} (types: {', '.join(FAULT_TYPES)})")
    known = fields_of(kind)
    for key in spec:
        if key != "type" and key not in known:
            raise InvalidFault(str(key), f"unknown field for a {kind} fault (fields: {', '.join(known)})")
    for name, required in known.items():
        if required and name not in spec:
            raise InvalidFault(name, f"required for a {kind} fault")
    return FAULT_TYPES[kind](**{k: v for k, v in spec.items() if k != "type"})
