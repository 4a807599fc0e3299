"""Faults injected through real mechanisms (deploys, runtime switches, resource limits), each with a revert.

    fault = faults.build(spec)       # validated; InvalidFault (ValueError) names the field
    where = fault.inject(ctx)        # ctx = FaultContext(cfg, state, rng, log)
    errors = faults.revert_all(injected, ctx)

May import `kernels` and `services` (the stack layer in `services.stack` included); never
`incidents` or `sandbox` (tests/test_imports.py).
"""
from faults.base import Fault, FaultContext, InjectionFailed, InvalidFault, Location, revert_all
from faults.registry import FAULT_TYPES, build, fields_of

__all__ = ["FAULT_TYPES", "Fault", "FaultContext", "InjectionFailed", "InvalidFault", "Location", "build",
           "fields_of", "revert_all"]
