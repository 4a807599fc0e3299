"""Faults injected through real mechanisms (deploys, runtime switches, resource limits), each with a revert."""
