"""The `sandbox` command: drills, replays and grading for LLM-serving incidents.

The top of the house: may import every other package; nothing imports it (tests/test_imports.py).
"""
