"""How far past its threshold each alert's expression went: a drill's page as a number, not a yes/no.

An alert's margin is its expression's value over its threshold, so that the margin is above 1 exactly
when the alert's condition holds; over several series (replicas, tasks, modes) the largest counts,
the one that would page. A variant that pages by a margin of 1.05 pages by luck; a baseline that
reaches 0.95 is one noisy minute from a false page.

    page_margin      the largest margin held for the whole of the rule's `for:` (what a firing needs)
    baseline_margin  the highest margin reached (how close a healthy window came to paging), against the
                     thresholds in force at the window's end: those the incident is then judged by (a
                     calibrated drill's latency thresholds are unset until its baseline sets them)

How each `and` and each threshold of zero becomes one ratio:

  two conditions joined by `and` (a replica's p99 over the fastest's AND over a floor): the smaller
      of the two ratios, per replica; above 1 exactly when both are. PromQL has no two-argument min,
      so `(A <= B) or B` is written for it (A where A is the smaller, else B; same labels on both).
  a guard (CanaryAccuracyLow's minimum number of checks): the margin exists only where the guard
      holds, as the alert's condition does (a task checked twice in a minute is not judged).
  a `<` rule on accuracy: the wrong share over the wrong share allowed, 1 - canary_accuracy_min.
  a threshold of 0 (CanaryOutputsInconsistent: any mismatch pages): a share over zero has no
      scale, so the share is divided by the larger of the threshold and HALF A MISMATCH of the
      window's checks (0.5 / checks). With the threshold at 0 the margin is then twice the mismatches
      in the window: none reads 0, one reads 2, three read 6. Half (not one) mismatch, so that a
      single mismatch, which pages, reads above 1; a whole number of mismatches has no margin
      between 0 and 2, so a baseline's margin says "none" or "some", never "nearly".
  ReplicaRestarted (no threshold: it pages when a replica was replaced after failed health checks):
      the fewer of (replicas new this minute, health-check failures in two minutes) per deployment,
      over the same half-event floor: 0 when nothing was replaced, 2 for one replacement.

Series an alert finds absent (no error yet, no mismatch yet) are read as 0 where the denominator's
series exist (`or 0 * total`), so a quiet baseline reads 0 rather than "no data". The alert itself
is unchanged by that: an absent numerator never fires.
"""
from __future__ import annotations

import math
import re

# Half of one event: the floor for counts compared with 0 (see the module docstring).
HALF_EVENT = 0.5


def _min_of(a: str, b: str) -> str:
    """The smaller of two instant vectors with the same labels, per series."""
    return f"(({a}) <= ({b})) or ({b})"


def _replica_margin(recorded: str, ratio: str, floor: str) -> str:
    over_fastest = f"{recorded} / (scalar({ratio}) * scalar(min({recorded})))"
    over_floor = f"{recorded} / scalar({floor})"
    return f"max({_min_of(over_fastest, over_floor)})"


def _quantile_margin(histogram: str, threshold: str, q: float = 0.99) -> str:
    return f"histogram_quantile({q:g}, sum by (le) (rate({histogram}_bucket[1m]))) / scalar({threshold})"


_WRONG = 'sum by (task) (rate(sandbox_canary_checks_total{result="wrong"}[1m]))'
_CHECKS = "sum by (task) (rate(sandbox_canary_checks_total[1m]))"
_MISMATCHES = 'sum by (mode) (increase(sandbox_canary_consistency_checks_total{result="mismatch"}[1m]))'
_REPEATS = "sum by (mode) (increase(sandbox_canary_consistency_checks_total[1m]))"
_ERRORS = 'sum(rate(sandbox_traffic_requests_total{status!~"200|429|499"}[1m]))'
_REQUESTS = "sum(rate(sandbox_traffic_requests_total[1m]))"
_DEPLOYMENTS = "0 * count by (application, deployment) (ray_serve_deployment_replica_starts_total)"

MARGINS: dict[str, str] = {
    "TimeToFirstTokenHigh": _quantile_margin("vllm:time_to_first_token_seconds",
                                             "sandbox:threshold:ttft_p99_seconds"),
    "ClientTimeToFirstTokenHigh": _quantile_margin("sandbox_traffic_time_to_first_token_seconds",
                                                   "sandbox:threshold:client_ttft_p99_seconds"),
    "InterTokenLatencyHigh": _quantile_margin("vllm:request_time_per_output_token_seconds",
                                              "sandbox:threshold:tpot_p50_seconds", 0.5),
    "ReplicaInterTokenLatencyHigh": _replica_margin("replica:inter_token_latency_seconds:p99_1m",
                                                    "sandbox:threshold:replica_itl_p99_ratio",
                                                    "sandbox:threshold:replica_itl_p99_floor_seconds"),
    "ReplicaTimeToFirstTokenHigh": _replica_margin("replica:time_to_first_token_seconds:p99_2m",
                                                   "sandbox:threshold:replica_ttft_p99_ratio",
                                                   "sandbox:threshold:replica_ttft_p99_floor_seconds"),
    "ServingErrorRateHigh": f"({_ERRORS} or 0 * {_REQUESTS}) / {_REQUESTS} / scalar(sandbox:threshold:error_share)",
    "ReplicaRestarted": "max(" + _min_of(f"deployment:serve_replicas_started:new_1m or {_DEPLOYMENTS}",
                                         f"deployment:serve_health_check_failures:new_2m or {_DEPLOYMENTS}")
                        + f") / {HALF_EVENT}",
    "CanaryAccuracyLow": (f"max((({_WRONG} or 0 * {_CHECKS}) / {_CHECKS}) "
                          "/ (1 - scalar(sandbox:threshold:canary_accuracy_min)) "
                          "and sum by (task) (increase(sandbox_canary_checks_total[1m])) "
                          ">= scalar(sandbox:threshold:canary_min_checks))"),
    "CanaryOutputsInconsistent": (f"max((({_MISMATCHES} or 0 * {_REPEATS}) / {_REPEATS}) "
                                  f"/ clamp_min({HALF_EVENT} / {_REPEATS}, "
                                  "scalar(sandbox:threshold:canary_mismatch_share)))"),
}


_THRESHOLD = re.compile(r"sandbox:threshold:[a-z0-9_]+")


def margin_expr(alert: str, thresholds_at: float | None = None) -> str:
    """The alert's margin; with `thresholds_at` (unix s), over its thresholds as they stood then (PromQL's `@`)
    rather than at each step."""
    if alert not in MARGINS:
        raise ValueError(f"no margin for alert {alert!r}; margins exist for {', '.join(MARGINS)}")
    if thresholds_at is None:
        return MARGINS[alert]
    return _THRESHOLD.sub(lambda m: f"{m.group(0)} @ {thresholds_at:.3f}", MARGINS[alert])


def margin_series(prom, alert: str, start: float, end: float, step_s: float,
             thresholds_at: float | None = None) -> dict[int, float]:
    """{step index from start: margin}; NaN (a quantile of no requests) and ±Inf are no reading."""
    if end < start:
        return {}
    out: dict[int, float] = {}
    for row in prom.query_range(margin_expr(alert, thresholds_at), start, end, step_s):
        for ts, v in row["values"]:
            f = float(v)
            if math.isfinite(f):
                i = round((float(ts) - start) / step_s)
                out[i] = max(out.get(i, -math.inf), f)
    return out


def page_margin(prom, alert: str, start: float, end: float, for_s: float, step_s: float = 1.0) -> float | None:
    """The largest margin held at every step of some [t - for_s, t] inside [start, end]: what the alert's
    `for:` asks of its condition. None when no stretch that long has a reading at every step."""
    margins = margin_series(prom, alert, start, end, step_s)
    span = round(for_s / step_s)
    held = [min(margins[j] for j in range(i - span, i + 1)) for i in margins
            if all(j in margins for j in range(i - span, i + 1))]
    return max(held) if held else None


def baseline_margin(prom, alert: str, start: float, end: float, step_s: float = 1.0) -> float | None:
    """The highest margin in [start, end] over the thresholds in force at `end`; None when there is no reading."""
    margins = margin_series(prom, alert, start, end, step_s, thresholds_at=end)
    return max(margins.values()) if margins else None
