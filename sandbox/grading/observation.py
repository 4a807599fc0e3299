"""A query re-run on a recording: its direction between the baseline and the incident, as the grader reads it.

Judged as `sandbox verify` judges a signal (sandbox/drill/verify.py: the same windows, noise and
thresholds), with two differences a diagnosis needs:

  - several series (one per replica, per task): the grader reads the one a claim is about, the
    largest per timestamp for a rise and the smallest for a fall (`reduce`);
  - absent data is data: where a ratio's numerator and denominator both stood still (0/0, NaN
    in Prometheus) and the quantity says what that means (no prompt token looked up: hit rate 0),
    the query is run again with those points read as that value, and the look says so.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from incidents.promql import parse
from incidents.readings import Reading
from sandbox.drill.verify import ABS_FLOOR, OBSERVE_STEP_S, REL_CHANGE, SIGMAS, WARMUP_S, settle_after
from sandbox.grading.recorded import Windows

_TURN = {"up": "down", "down": "up", "flat": "flat", "no data": "no data"}


@dataclass(frozen=True)
class Look:
    direction: str  # of the query's value: up | down | flat | no data
    baseline: float | None
    incident: float | None
    stopped: int  # points where a 0/0 was read as what it means (0: none)
    note: str = ""

    def of_quantity(self, polarity: int) -> str:
        """The direction of the quantity the query reads (a turned query falls as it rises)."""
        return self.direction if polarity > 0 else _TURN[self.direction]


def _samples(prom, expr: str, start: float, end: float, reduce: str) -> tuple[list[float], int]:
    """One value per timestamp (the max or min over series) and how many points were NaN."""
    if end - start < OBSERVE_STEP_S:
        return [], 0
    by_time: dict[float, float] = {}
    nan = 0
    pick = max if reduce == "max" else min
    for row in prom.query_range(expr, start, end, OBSERVE_STEP_S):
        for ts, v in row["values"]:
            f = float(v)
            if math.isnan(f):
                nan += 1
            elif math.isfinite(f):
                by_time[ts] = pick(by_time[ts], f) if ts in by_time else f
    return [by_time[t] for t in sorted(by_time)], nan


def look(prom, expr: str, w: Windows, reduce: str = "max", rel_change: float = REL_CHANGE, share: bool = False) -> Look:
    """Baseline: warm-up to the injection. Incident: settle_after(expr) after the injection completed.

    share: the query is a part over its whole (in [0, 1]): the relative change is taken of the smaller
    of it and its complement, so a share of right answers and a share of wrong ones give one verdict."""
    base, nan_b = _samples(prom, expr, w.t0 + WARMUP_S, w.t0 + w.inject_s - OBSERVE_STEP_S, reduce)
    inc, nan_i = _samples(prom, expr, w.t0 + w.settled_s + settle_after(expr), w.t0 + w.end_s, reduce)
    b = statistics.fmean(base) if base else None
    i = statistics.fmean(inc) if inc else None
    if b is None or i is None:
        return Look("no data", b, i, nan_b + nan_i)
    noise = statistics.pstdev(base) if len(base) > 1 else 0.0
    base = min(abs(b), abs(1 - b)) if share else abs(b)
    threshold = max(SIGMAS * noise, rel_change * base, ABS_FLOOR)
    direction = "up" if i - b > threshold else "down" if b - i > threshold else "flat"
    return Look(direction, b, i, nan_b + nan_i)


def stopped_form(expr: str, r: Reading) -> str | None:
    """`expr` with the ratio `r` read as its stopped value where its denominator is 0; None when it cannot be
    written (the ratio's text is not found once in the query's canonical form)."""
    if r.stopped is None:
        return None
    ratio, denominator, value, _ = r.stopped
    text = str(parse(expr))
    if text.count(ratio) != 1:
        return None
    # NaN == NaN is false, so the comparison drops the 0/0 points; `or` fills them from the stopped denominator
    filled = f"((({ratio}) == ({ratio})) or ((({denominator}) == 0) * 0 + {value:g}))"
    rewritten = text.replace(ratio, filled)
    parse(rewritten)
    return rewritten


def look_reading(prom, expr: str, r: Reading, w: Windows, reduce: str, rel_change: float = REL_CHANGE) -> Look:
    """look(), then, where the quantity's ratio stood still (0/0), again with those points read as it says."""
    # a spread or a gap built of shares is no share itself
    share = r.share and not r.scope.endswith("-spread") and not r.scope.startswith("gap ")
    first = look(prom, expr, w, reduce, rel_change, share)
    rewritten = stopped_form(expr, r) if first.stopped else None
    if rewritten is None:
        return first
    second = look(prom, rewritten, w, reduce, rel_change, share)
    if (second.baseline, second.incident) == (first.baseline, first.incident):
        return first
    value, means = r.stopped[2], r.stopped[3]
    note = f"{r.quantity} read as {value:g} where its counters both stood still (0/0): {means}"
    return Look(second.direction, second.baseline, second.incident, first.stopped, note)
