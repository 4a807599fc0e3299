"""One criterion of a grade: its name, points out of its maximum, and the sentence that says why; the points each
criterion is worth out of 100."""
from __future__ import annotations

from dataclasses import dataclass, field

POINTS = {"root_cause": 30, "location": 10, "evidence": 30, "hypotheses": 20, "remediation": 10}


@dataclass
class Criterion:
    name: str
    points: int
    max_points: int
    sentence: str
    details: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"name": self.name, "points": self.points, "max": self.max_points, "sentence": self.sentence,
                "details": self.details}
