"""The latency SLOs of one drill, set from its own healthy baseline: what its alerts read, times a margin.

The calibration's SLOs are multiples of pooled client-side figures measured once per machine, at
the busy share of a ceiling that itself moves (TTFT SLOs of 1.90, 4.08 and 5.0 s in three
calibrations of one machine kind; on a shared machine the stack's speed drifts from hour to hour,
while a calibration is reused for hours). A drill's own baseline is the same stack, at the drill's
own load, minutes or seconds before the injection: what production teams set an SLO from.

Before the injection the drill reads, over a window of its baseline, each latency alert's own
left-hand side as Prometheus evaluates it (the same 1m windows, the same histogram buckets), takes
its highest value in the window, and sets the threshold to SLO_X x that value as its bucket can
read it (`read_ceiling`: the top of the bucket that holds it). While the stack stays as healthy as
it was, each reading stays within its bucket, so the baseline reads at most 1 / SLO_X (0.67) of its
threshold: the baseline margin verify asks for. A fault pages once it moves its reading past SLO_X
times that bucket's top.

Every drill of a calibrated stack does this, whatever its incident, at the same point of its
timeline: thresholds that moved only in latency drills would tell the candidate the family. The
values say how fast this stack was before anything happened, which its dashboards show anyway.
Ratio thresholds (a replica over the fastest) are machine independent and stay; so do the shares.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

from sandbox.calibration.calibrator import install_thresholds
from sandbox.calibration.thresholds import FLOOR_S, read_ceiling
from services.serve.metric_names import CLIENT_TTFT, INTER_TOKEN_LATENCY, TIME_PER_OUTPUT_TOKEN, \
    TIME_TO_FIRST_TOKEN

SLO_X = 1.5
# How long a window of healthy readings the thresholds are read from, and how long before the injection
# they are installed: the alerts' `for:` is 15-30 s, so the new values hold through at least one whole
# `for:` of healthy baseline before anything is injected.
WINDOW_S = 30.0
LEAD_S = 15.0
EARLIEST_S = 30.0  # the first seconds fill the 1m windows and the caches (verify's warm-up): never read


def _quantile(q: float, histogram: str, by: str = "") -> str:
    return f"histogram_quantile({q:g}, sum by (le{by}) (rate({histogram}_bucket[1m])))"


# threshold -> (the expression its alert compares with it, the buckets that expression is read through,
#               the floor below which the buckets no longer tell values apart)
READINGS: dict[str, tuple[str, tuple[float, ...], float]] = {
    "sandbox:threshold:ttft_p99_seconds": (_quantile(0.99, "vllm:time_to_first_token_seconds"),
                                           TIME_TO_FIRST_TOKEN.buckets, FLOOR_S["ttft"]),
    "sandbox:threshold:client_ttft_p99_seconds": (_quantile(0.99, "sandbox_traffic_time_to_first_token_seconds"),
                                                  CLIENT_TTFT.buckets, FLOOR_S["ttft"]),
    "sandbox:threshold:tpot_p50_seconds": (_quantile(0.5, "vllm:request_time_per_output_token_seconds"),
                                           TIME_PER_OUTPUT_TOKEN.buckets, FLOOR_S["tpot"]),
    # the slowest healthy replica: a replica pages once it is past what any replica read while healthy
    "sandbox:threshold:replica_ttft_p99_floor_seconds": ("max(replica:time_to_first_token_seconds:p99_1m)",
                                                         TIME_TO_FIRST_TOKEN.buckets, FLOOR_S["ttft"]),
    "sandbox:threshold:replica_itl_p99_floor_seconds": ("max(replica:inter_token_latency_seconds:p99_1m)",
                                                        INTER_TOKEN_LATENCY.buckets, FLOOR_S["itl"]),
}


def window(inject_at_s: float) -> tuple[float, float] | None:
    """(start, end) seconds of traffic whose readings set the thresholds, which are installed at `end`;
    None for a baseline too short to hold a window after the warm-up and before the lead."""
    end = inject_at_s - LEAD_S
    start = max(EARLIEST_S, end - WINDOW_S)
    return (start, end) if end - start >= WINDOW_S / 2 else None


def highest(prom, start_wall: float, end_wall: float, step_s: float = 1.0) -> dict[str, float | None]:
    """{threshold: the highest reading of its expression in [start, end] (unix s)}; None where nothing read
    (no request finished in the window: a histogram with no observations has no quantile)."""
    out: dict[str, float | None] = {}
    for name, (expr, _, _) in READINGS.items():
        values = [float(v) for series in prom.query_range(expr, start_wall, end_wall, step_s)
                  for _, v in series.get("values", ())]
        finite = [v for v in values if math.isfinite(v)]
        out[name] = max(finite) if finite else None
    return out


def derive(readings: Mapping[str, float | None], current: Mapping[str, float]) -> dict[str, float]:
    """{threshold: value}: SLO_X x the top of the bucket each highest healthy reading falls in, never below
    the buckets' floor; a threshold whose reading is missing keeps its `current` value."""
    unknown = sorted(set(readings) - set(READINGS))
    if unknown:
        raise ValueError(f"no baseline reading sets {', '.join(unknown)}")
    out = {}
    for name, (_, buckets, floor) in READINGS.items():
        value = readings.get(name)
        if value is None or not math.isfinite(value) or value < 0:
            if name in current:
                out[name] = float(current[name])
            continue
        out[name] = round(max(floor, SLO_X * read_ceiling(value, buckets)), 4)
    return out


def install_from_baseline(prom, state, cal, current: Mapping[str, float], t0_wall: float,
                          seconds: tuple[float, float]) -> dict[str, float]:
    """Read the healthy readings of traffic seconds `seconds` (from `t0_wall`), install the thresholds they give
    beside the `current` others (ratios, shares) and return every value now installed."""
    start, end = seconds
    values = {**current, **derive(highest(prom, t0_wall + start, t0_wall + end), current)}
    note = (f"Set from this drill's healthy baseline (traffic seconds {start:.0f}-{end:.0f}): each latency threshold\n"
            f"is {SLO_X:g} x its highest reading there, read to its bucket's top (sandbox/calibration/baseline_slos.py).")
    install_thresholds(state, cal, values, note)
    return values
