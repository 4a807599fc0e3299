"""The latency SLOs of one drill, set from its own healthy baseline: what its alerts read, times a margin.

The calibration's SLOs are multiples of pooled client-side figures measured once per machine, at
the busy share of a ceiling that itself moves (TTFT SLOs of 1.90, 4.08 and 5.0 s in three
calibrations of one machine kind; on a shared machine the stack's speed drifts from hour to hour,
while a calibration is reused for hours). A drill's own baseline is the same stack, at the drill's
own load, minutes or seconds before the injection: what production teams set an SLO from.

Before the injection the drill reads, over its baseline so far, each latency alert's own left-hand
side as Prometheus evaluates it (the same 1m windows, the same histogram buckets), takes its highest
value, reads it to the top of the bucket that holds it (`read_ceiling`: Prometheus interpolates up to
there) and multiplies that by the threshold's multiple:

    SLO_X (1.5)           so that a healthy reading that stays within its bucket is at most 0.67 of its
                          threshold: the baseline margin verify asks for. A median over every request of
                          a minute (the TPOT page), a p99 over every gap between tokens (hundreds a
                          minute) and a replica's TTFT p99 over two minutes (its second slowest request,
                          where the page also asks for a ratio to the fastest replica) stay there.
    SLO_X x BUCKET_STEP   for the fleet's TTFT p99s (server and client, over one minute): one minute's
                          p99 is the slowest request or two, and a healthy replica's one-minute p99
                          went from 0.31 to 0.54 s, two buckets up, five seconds after a window whose
                          highest was 0.35 s (slow-replica/kernel-path here, 2026-12-02): the next
                          minutes' slow requests may sit a bucket higher, and 0.67 must hold for them.

Measured on the kept data of three runs here (bench/results/verify-2026-12-02.md): the replica floor at 1.5x
gave throttled page margins of 2.23 and 1.53 where 2.25x gave 1.63 and 1.02, with baseline margins of at
most 0.59 (the ratio part holds a healthy baseline down).

A fault pages once it moves its reading past that multiple of its healthy bucket's top.

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
BUCKET_STEP = 1.5  # the widest step of the latency histograms between 5 ms and 80 s (tests/calibration)
# How long before the baseline's first change the thresholds are installed: the alerts' `for:` is 15-30 s, so
# the new values hold through at least half a `for:` of healthy baseline before anything is injected; the
# readings are those of the whole baseline before that (at least MIN_WINDOW_S of it).
LEAD_S = 15.0
MIN_WINDOW_S = 15.0
EARLIEST_S = 30.0  # the first seconds fill the 1m windows and the caches (verify's warm-up): never read


def _quantile(q: float, histogram: str, by: str = "") -> str:
    return f"histogram_quantile({q:g}, sum by (le{by}) (rate({histogram}_bucket[1m])))"


# threshold -> (the expression its alert compares with it, the buckets that expression is read through,
#               the floor below which the buckets no longer tell values apart, its multiple)
READINGS: dict[str, tuple[str, tuple[float, ...], float, float]] = {
    "sandbox:threshold:ttft_p99_seconds": (_quantile(0.99, "vllm:time_to_first_token_seconds"),
                                           TIME_TO_FIRST_TOKEN.buckets, FLOOR_S["ttft"], SLO_X * BUCKET_STEP),
    "sandbox:threshold:client_ttft_p99_seconds": (_quantile(0.99, "sandbox_traffic_time_to_first_token_seconds"),
                                                  CLIENT_TTFT.buckets, FLOOR_S["ttft"], SLO_X * BUCKET_STEP),
    "sandbox:threshold:tpot_p50_seconds": (_quantile(0.5, "vllm:request_time_per_output_token_seconds"),
                                           TIME_PER_OUTPUT_TOKEN.buckets, FLOOR_S["tpot"], SLO_X),
    # the slowest healthy replica: a replica pages once it is past what any replica read while healthy
    # ... over two minutes (its second slowest request), and beside a ratio: a baseline nears this floor
    # only while one replica is far past the other too
    "sandbox:threshold:replica_ttft_p99_floor_seconds": ("max(replica:time_to_first_token_seconds:p99_2m)",
                                                         TIME_TO_FIRST_TOKEN.buckets, FLOOR_S["ttft"], SLO_X),
    "sandbox:threshold:replica_itl_p99_floor_seconds": ("max(replica:inter_token_latency_seconds:p99_1m)",
                                                        INTER_TOKEN_LATENCY.buckets, FLOOR_S["itl"], SLO_X),
}


def window(quiet_until_s: float) -> tuple[float, float] | None:
    """(start, end) seconds of traffic whose readings set the thresholds, which are installed at `end`, LEAD_S
    before the baseline's first change; None for a baseline too short to hold MIN_WINDOW_S after the warm-up."""
    end = quiet_until_s - LEAD_S
    return (EARLIEST_S, end) if end - EARLIEST_S >= MIN_WINDOW_S else None


def highest(prom, start_wall: float, end_wall: float, step_s: float = 1.0) -> dict[str, float | None]:
    """{threshold: the highest reading of its expression in [start, end] (unix s)}; None where nothing read
    (no request finished in the window: a histogram with no observations has no quantile)."""
    out: dict[str, float | None] = {}
    for name, (expr, *_) in READINGS.items():
        values = [float(v) for series in prom.query_range(expr, start_wall, end_wall, step_s)
                  for _, v in series.get("values", ())]
        finite = [v for v in values if math.isfinite(v)]
        out[name] = max(finite) if finite else None
    return out


def derive(readings: Mapping[str, float | None], current: Mapping[str, float]) -> dict[str, float]:
    """{threshold: value}: its multiple x the top of the bucket its highest healthy reading falls in, never below
    the buckets' floor; a threshold whose reading is missing keeps its `current` value."""
    unknown = sorted(set(readings) - set(READINGS))
    if unknown:
        raise ValueError(f"no baseline reading sets {', '.join(unknown)}")
    out = {}
    for name, (_, buckets, floor, multiple) in READINGS.items():
        value = readings.get(name)
        if value is None or not math.isfinite(value) or value < 0:
            if name in current:
                out[name] = float(current[name])
            continue
        out[name] = round(max(floor, multiple * read_ceiling(value, buckets)), 4)
    return out


def install_from_baseline(prom, state, cal, current: Mapping[str, float], t0_wall: float,
                          seconds: tuple[float, float]) -> dict[str, float]:
    """Read the healthy readings of traffic seconds `seconds` (from `t0_wall`), install the thresholds they give
    beside the `current` others (ratios, shares) and return every value now installed."""
    start, end = seconds
    values = {**current, **derive(highest(prom, t0_wall + start, t0_wall + end), current)}
    note = (f"Set from this drill's healthy baseline (traffic seconds {start:.0f}-{end:.0f}): each latency threshold\n"
            "is a multiple of its highest reading there, read to its bucket's top (sandbox/calibration/baseline_slos.py).")
    install_thresholds(state, cal, values, note)
    return values
