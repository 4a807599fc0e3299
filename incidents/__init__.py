"""Incident scripts (YAML) and their typed schema: symptom, page, traffic, timeline, variants."""
