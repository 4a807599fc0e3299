"""How a drill runs (`DrillSettings`) and how it ended (`DrillResult`)."""
from __future__ import annotations

from dataclasses import dataclass, field

from sandbox.drill.plan import DrillPlan


@dataclass
class DrillResult:
    run_id: str | None  # None: the drill ended before its run began, and nothing was recorded
    run_dir: str | None
    status: str  # "finished" | "ended" (Ctrl-C after the page, open-ended) | "interrupted" | "failed"
    page: dict | None
    plan: DrillPlan
    stats: dict = field(default_factory=dict)
    error: str | None = None
    checks: dict | None = None  # filled by `verify` (before_teardown)
    mitigation: dict | None = None  # the candidate's actions and the recovery oracle's verdict (sandbox/mitigation)
    capacity_check: dict | None = None  # what a cached calibration's check measured (run.json keeps it too)


MODES = ("drill", "interview")


@dataclass(frozen=True)
class DrillSettings:
    """How a drill runs; the incident, its variant and the seed say what runs."""
    duration_s: float | None = None  # the timeline's length; None: the incident's
    keep_up: bool = False  # leave a stack the drill started running afterwards
    poll_s: float = 1.0  # how often the timeline and the alerts are looked at
    # An interactive drill does not stop at the timeline's end: the incident and its traffic go on
    # while the candidate investigates, until they end it (Ctrl-C, or a diagnosis).
    open_ended: bool = False
    mode: str = "drill"  # "drill" | "interview" (what `sandbox diagnose` and `ask` find running)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be drill or interview, got {self.mode!r}")
        if not self.poll_s > 0:
            raise ValueError(f"poll_s must be > 0, got {self.poll_s!r}")
