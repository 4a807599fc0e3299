"""The `sandbox` command: drills, replays and grading for LLM-serving incidents."""
