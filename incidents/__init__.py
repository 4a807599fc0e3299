"""Incident scripts (YAML) and their typed schema: symptom, page, traffic, timeline, variants; the traffic
profiles they name (`incidents.profiles`). May import `kernels`, `services` and `faults` (whose
registry validates each fault spec); never `sandbox` (tests/test_imports.py).
"""
