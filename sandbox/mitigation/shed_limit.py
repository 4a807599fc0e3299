"""The admission limit `shed-load` sets when none is named: what the engines held at once while the SLO held.

    limit, basis = default_limit(cfg, state)

Shedding keeps admitted requests fast only if it keeps the engines near a load they served within their SLO.
The replicas' batch slots are not that load on a CPU: under traffic-surge with a limit of 64 (two replicas of
32 slots), the engines ran 50-60 requests and the fleet's TTFT p99 read 1.2-2.6 s, where the healthy baseline
had run 1-8 at 0.14-0.22 s (2026-12-05, `bench/mitigation_drill.py traffic-surge surge shed-load`: not
recovered). So in a drill the default is the most the engines held at once (requests running plus waiting,
summed over the replicas) during the drill's own healthy baseline: the window whose requests set its latency
thresholds, from the end of the traffic's warm-up to the moment they were installed (both public: `run.json`
and `events.jsonl`), before anything in any drill changes. An operator would read the same figure off the
dashboard's "before" and set the gateway's concurrency there. Without a drill, or without a reading, the
default stays the batch slots, and the report says which it took.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from sandbox.calibration.baseline_slos import EARLIEST_S
from sandbox.drill.record import RunRecord, running_drill
from services.stack.prometheus import PrometheusClient, PrometheusError

BASELINE_EVENT = "thresholds set from the baseline"
# the engines' queue as Serve's replicas report it: what an ingress limit bounds
IN_FLIGHT = "sum(vllm:num_requests_running) + sum(vllm:num_requests_waiting)"
STEP_S = 5  # the scrape interval's order: a subquery step finer than it reads the same samples again


def baseline_window(record: RunRecord) -> tuple[float, float] | None:
    """(start, end) unix seconds of the drill's healthy baseline, or None before its thresholds are set."""
    try:
        t0 = record.public().get("traffic_started")
        events = record.events()
    except (OSError, json.JSONDecodeError):
        return None
    at = next((e.get("at_s") for e in events if e.get("kind") == BASELINE_EVENT), None)
    if not isinstance(t0, (int, float)) or not isinstance(at, (int, float)) or at <= EARLIEST_S:
        return None
    return t0 + EARLIEST_S, t0 + at


def peak_in_flight(prom, start: float, end: float) -> int | None:
    """The most requests the engines held at once in [start, end], as scraped; None without a reading."""
    span = max(STEP_S, int(end - start))
    rows = prom.query(f"max_over_time(({IN_FLIGHT})[{span}s:{STEP_S}s])", at=end)
    if not rows:
        return None
    value = float(rows[0]["value"][1])
    return math.ceil(value) if math.isfinite(value) and value >= 1 else None


def default_limit(cfg, state, batch_slots: int) -> tuple[int, str]:
    """(limit, what it is): the running drill's baseline peak in flight, else the replicas' batch slots."""
    drill = running_drill(cfg.home)
    window = baseline_window(RunRecord(Path(drill["run_dir"]), cfg.keys_dir)) if drill else None
    if window is not None:
        prom = PrometheusClient(state.prometheus_url)
        try:
            peak = peak_in_flight(prom, *window)
        except PrometheusError:
            peak = None
        finally:
            prom.close()
        if peak is not None:
            return peak, f"the most the engines held at once in this drill's healthy baseline ({peak})"
    return batch_slots, f"the replicas' batch slots ({batch_slots}): no drill baseline to read"
