"""The latency SLOs of a calibrated stack: the `sandbox:threshold:*` values its alerts compare against.

Every latency threshold is a stated multiple of a figure the calibration measured, so the
same rules page on a 2-core CPU and on a GPU box (the slowest profile sets each, since one
threshold serves every incident on the stack: a threshold that differed by incident would
tell the candidate which one is running):

    ttft_p99_seconds      TTFT_SLO_X x the TTFT p99 of a busy stack (8 clients a replica, each
                          sending its next request when its last ends), over the busy requests
                          of every profile pooled (about 80 here: one profile's 40 gave p99s of
                          0.64 to 1.84 s in five sweeps)
    client_ttft_p99       CLIENT_X x the TTFT SLO: at drill rates the client's p99 is its slowest
                          request or two a minute, read through 1 / 2.5 / 5 s buckets, and a
                          request can wait seconds in a replica's event loop while a step holds
                          it (healthy baselines here read up to 4.7 s against a server p99 of
                          0.66 s); the alert is there for time the servers never see
    itl_p99_seconds       ITL_SLO_X x the time between tokens of the busy stack, pooled alike. The
                          alert reads the servers' histogram through 0.5 / 0.75 / 1 s buckets,
                          which puts a baseline's p99 well above the client's exact one (the fixed
                          1.5 s this replaces paged in none of the baselines here, whose busy ITL
                          p99 measured 0.5-0.55 s: 3x). A full batch (oom-at-peak's peak, 1.3-1.7 s
                          at the ceiling) is an incident's, where latency follows the errors.
    replica floors        a share of the fleet's SLOs: a ratio of small latencies is noise

Ratio thresholds (one replica against the fastest) stay as written in the rule file:
replicas share one machine, so their ratio does not depend on its speed. Non-latency
thresholds (error share, canary accuracy) are shares, not speeds, and stay too.
Each figure has a floor, so a sweep on a very fast stack does not set an SLO below what
Prometheus' histogram buckets can tell apart.
"""
from __future__ import annotations

TTFT_SLO_X = 2.0
CLIENT_X = 4.0
ITL_SLO_X = 3.0
REPLICA_ITL_FLOOR_SHARE = 1 / 3
REPLICA_TTFT_FLOOR_SHARE = 0.8
FLOOR_S = {"ttft": 0.1, "itl": 0.05}


def derive(busy_ttft_p99_s: float, busy_itl_p99_s: float) -> dict[str, float]:
    """{sandbox:threshold name: value} from the pooled p99s of the calibration's busy phases."""
    if not (busy_ttft_p99_s >= 0 and busy_itl_p99_s >= 0):
        raise ValueError("thresholds need the busy phases' TTFT and ITL p99s")
    ttft = max(FLOOR_S["ttft"], TTFT_SLO_X * busy_ttft_p99_s)
    itl = max(FLOOR_S["itl"], ITL_SLO_X * busy_itl_p99_s)
    r = lambda v: round(v, 3)
    return {"sandbox:threshold:ttft_p99_seconds": r(ttft),
            "sandbox:threshold:client_ttft_p99_seconds": r(CLIENT_X * ttft),
            "sandbox:threshold:itl_p99_seconds": r(itl),
            "sandbox:threshold:replica_itl_p99_floor_seconds": r(REPLICA_ITL_FLOOR_SHARE * itl),
            "sandbox:threshold:replica_ttft_p99_floor_seconds": r(REPLICA_TTFT_FLOOR_SHARE * ttft)}
