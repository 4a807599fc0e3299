"""The recovery oracle: after a mitigation, did service come back, and did it come back for the right reason?

Read from Prometheus only, as a candidate's dashboards are, over [the action, now]:

    quiet         the incident's page expression below its threshold (margin < 1: sandbox/drill/margins.py) at
                  every step of a sustained window (RECOVERY_WINDOW_S; shorter in tests), a reading at each
                  step: a quantile of no requests (traffic gone) is no reading, so load that went away does
                  not pass for recovery
    other pages   once the page is quiet, no paging alert that was not firing at the action has fired through
                  the last whole window (the action traded one page for another: a fleet drained below its
                  load); one that fires a while and stops (a rollout's transient) is no verdict on the action,
                  and while the page itself still fires the others are its own symptoms (the client's view of
                  the same TTFT), which a drill of prefix caching turned off showed after a rollback
    errors        the traffic's failed share (statuses other than 200, 429 and 499) under ERROR_SLO over the
                  quiet window; the shed share (429s) is reported beside it, a cost shed-load chooses to pay
    invariant     the mechanism is gone, as the stack shows it (a callable that returns why it is still in
                  place, or None): without it, a page that went quiet while the cause stays does not count

The verdict: `worse` (another page fired), `recovered` (quiet, errors under the SLO, the invariant holds), or
`not recovered`, with the time to mitigate from the page to the start of the quiet window. A drill builds one
oracle and asks it after each action; a game day's script or an agent can do the same.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

from sandbox.drill.margins import margin_series
from sandbox.drill.verify import paging_alerts

RECOVERY_WINDOW_S = 120.0
STILL_IN_PLACE = "quiet, but the cause is still in place"  # then ": <what the stack still runs>", naming the cause
ERROR_SLO = 0.01
STEP_S = 2.0
_FAILED = 'sum(increase(sandbox_traffic_requests_total{status!~"200|429|499"}[%ds]))'
_SHED = 'sum(increase(sandbox_traffic_requests_total{status="429"}[%ds]))'
_ALL = "sum(increase(sandbox_traffic_requests_total[%ds]))"


@dataclass(frozen=True)
class Verdict:
    outcome: str  # "recovered" | "not recovered" | "worse"
    quiet_from: float | None  # unix s: the start of the first sustained quiet window after the action
    ttm_s: float | None  # from the page to quiet_from, where the outcome is "recovered"
    other_pages: tuple[str, ...]
    error_share: float | None  # over the quiet window (or since the action, where there is none)
    shed_share: float | None
    invariant: str | None  # why the mechanism is still in place; None where it is gone
    reason: str

    def to_dict(self) -> dict:
        return {**asdict(self), "other_pages": list(self.other_pages)}


def first_quiet(margins: dict[int, float], window_steps: int) -> int | None:
    """The first step i from which steps i..i + window_steps all read a margin below 1."""
    run_start, run = None, 0
    for i in range(max(margins, default=-1) + 1):
        if i in margins and margins[i] < 1:
            run_start = i if run == 0 else run_start
            run += 1
            if run > window_steps:
                return run_start
        else:
            run = 0
    return None


class RecoveryOracle:
    """One drill's judge of recovery: its page (alert, when it fired) and what it must see after an action."""

    def __init__(self, prom, alert: str, page_wall: float, *, window_s: float = RECOVERY_WINDOW_S,
                 step_s: float = STEP_S, error_slo: float = ERROR_SLO,
                 invariant: Callable[[], str | None] | None = None):
        if window_s <= 0 or step_s <= 0 or not 0 <= error_slo < 1:
            raise ValueError("window_s and step_s must be > 0 and error_slo in [0, 1)")
        self.prom, self.alert, self.page_wall = prom, alert, page_wall
        self.window_s, self.step_s, self.error_slo, self.invariant = window_s, step_s, error_slo, invariant

    def judge(self, action_wall: float, now_wall: float) -> Verdict:
        margins = margin_series(self.prom, self.alert, action_wall, now_wall, self.step_s)
        start = first_quiet(margins, round(self.window_s / self.step_s))
        quiet_from = None if start is None else action_wall + start * self.step_s
        # worse: the incident's page went quiet and another took its place; while the page itself still fires,
        # the other pages are its own symptoms spreading (the client's view of the same TTFT), not the action's
        others = self._new_pages(action_wall, now_wall) if quiet_from is not None else []
        span_from = quiet_from if quiet_from is not None else action_wall
        errors, shed = self._shares(span_from, now_wall)
        still = self.invariant() if self.invariant else None
        if others:
            outcome, reason = "worse", f"another page fired after the action: {', '.join(others)}"
        elif quiet_from is None:
            outcome, reason = "not recovered", (f"{self.alert}'s expression did not stay under its threshold for "
                                                f"{self.window_s:g} s with traffic flowing")
        elif errors is not None and errors > self.error_slo:
            outcome, reason = "not recovered", (f"quiet, but {errors:.1%} of requests failed "
                                                f"(the SLO allows {self.error_slo:.1%})")
        elif still is not None:
            outcome, reason = "not recovered", f"{STILL_IN_PLACE}: {still}"
        else:
            outcome, reason = "recovered", (f"{self.alert} quiet for {self.window_s:g} s from "
                                            f"{quiet_from - self.page_wall:.0f} s after the page")
        ttm = round(quiet_from - self.page_wall, 1) if outcome == "recovered" else None
        return Verdict(outcome, quiet_from, ttm, tuple(others), errors, shed, still, reason)

    def _new_pages(self, action_wall: float, now_wall: float) -> list[str]:
        """Paging alerts not firing at the action that have fired at every step of the last window: what the
        action broke. One that fires a while and stops (a rollout's doubled replicas on busy cores, the incident's
        own symptoms spreading) is no verdict on the action."""
        start = now_wall - self.window_s
        if start < action_wall:
            return []
        paging = set(paging_alerts()) - {self.alert}
        firing = 'ALERTS{alertstate="firing"}'
        before = {r["metric"].get("alertname") for r in self.prom.query(firing, at=action_wall)}
        steps: dict[str, set[int]] = {}
        for row in self.prom.query_range(firing, start, now_wall, self.step_s):
            name = row["metric"].get("alertname")
            steps.setdefault(name, set()).update(round((float(t) - start) / self.step_s) for t, _ in row["values"])
        every = set(range(round(self.window_s / self.step_s) + 1))
        return sorted(name for name, seen in steps.items() if name in paging - before and every <= seen)

    def _shares(self, start: float, end: float) -> tuple[float | None, float | None]:
        seconds = max(1, round(end - start))
        values = []
        for expr in (_FAILED, _SHED, _ALL):
            rows = self.prom.query(expr % seconds, at=end)
            values.append(float(rows[0]["value"][1]) if rows else 0.0)
        failed, shed, total = values
        if not total or not math.isfinite(total):
            return None, None
        return round(failed / total, 4), round(shed / total, 4)
