"""The latency SLOs of a calibrated stack: the `sandbox:threshold:*` values its alerts compare against.

Every latency threshold is a stated multiple of a figure the calibration measured, so the
same rules page on a 2-core CPU and on a GPU box (the slowest profile sets each, since one
threshold serves every incident on the stack: a threshold that differed by incident would
tell the candidate which one is running). Each figure is taken as the alerts will read it:
through the histogram's buckets (`read_ceiling`), since Prometheus interpolates a quantile
inside the bucket that holds its rank, so a healthy median of 11 ms reads up to the 15 ms
boundary above it. An SLO a multiple of the true figure sat under what the healthy stack
read on a fast CPU (a TPOT SLO of 12.1 ms against a baseline of 14.4 ms through the old
10-25 ms bucket: the suite's oom-at-peak verify paged InterTokenLatencyHigh in its baseline).

    ttft_p99_seconds      TTFT_SLO_X x the TTFT p99 of a busy stack (Poisson arrivals at the busy
                          share of each profile's ceiling: the heaviest base load of the catalogue's
                          drills, so the same point of every machine's curve), over the busy
                          requests of every profile pooled (80-250 here)
    client_ttft_p99       CLIENT_X x the TTFT SLO: at drill rates the client's p99 is its slowest
                          request or two a minute, and a request can wait seconds in a replica's
                          event loop while a step holds it (healthy baselines here read up to 4.7 s
                          against a server p99 of 0.66 s); the alert is there for time the servers
                          never see
    replica ITL floor     REPLICA_ITL_FLOOR_X x the time between tokens of the busy stack, pooled
                          alike: a replica pages on its ITL spread only once its own p99 is past
                          what a whole busy stack's is (busy ITL p99 measured 0.5-1.0 s here). The
                          fleet's p99 is no page of its own: it is the slowest step's, a prefill
                          chunk's, and a fixed ITL p99 SLO (2.3-2.6 s) sat above the worse-draft
                          drill's 0.9 s; decode speed pages on the median TPOT below.
    replica TTFT floor    the fleet's TTFT SLO itself: a replica is slow once its own p99 breaches
                          the SLO and is far past the fastest's (a ratio of small latencies is
                          noise). At 0.8 of the SLO, a healthy replica's 1m p99 (read through the
                          0.5-1 s bucket: up to 0.95-0.98 s) came to 0.63 of a 1.52 s floor once
                          the busy phase became Poisson at 0.55 (TTFT SLO 1.90 s); at 1.0 it reads
                          0.53, while the slow variants' replicas pass the floor 2.5-3.6 times
                          over and the ratio binds their margin (throttled 3.30 either way)
    tpot_p50_seconds      TPOT_SLO_X x the median time per output token a healthy stack gives at
                          the drill's own base load (its share of the ceiling), read off the line
                          through the calibration's idle and busy points (TpotLine). The median
                          is what a regression in decode speed moves for every request (a worse
                          draft: 3x here), where the p99 of time between tokens is the slowest
                          step's, a prefill chunk's (a fixed ITL p99 SLO sat at 2.3-2.6 s, above the
                          drill's 0.9 s). On a CPU engine the time per token follows the batch, so
                          the healthy median grows with the load: 0.054 s at 0.31 of the ceiling and
                          0.057-0.087 s at 0.55 in the servers' histograms here, while a worse
                          draft at 0.31 read 0.15-0.19 s. One figure for every load would sit under
                          the 0.55 baselines or over that incident; a figure of the drill's load
                          sits at TPOT_SLO_X of its own healthy median. It names the load, which the
                          arrival rate shows anyway, not the incident.

These are what a calibrated drill starts with and what `sandbox up` serves with; 15 s before a drill's
baseline first changes, its latency thresholds are set again from that baseline's own readings
(sandbox/calibration/baseline_slos.py), since the stack's speed drifts between a calibration and the
drills that reuse it.

Ratio thresholds (one replica against the fastest) stay as written in the rule file:
replicas share one machine, so their ratio does not depend on its speed. Non-latency
thresholds (error share, canary accuracy) are shares, not speeds, and stay too.
Each figure has a floor, so a sweep on a very fast stack does not set an SLO below what
Prometheus' histogram buckets can tell apart.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from services.serve.metric_names import INTER_TOKEN_LATENCY, TIME_PER_OUTPUT_TOKEN, TIME_TO_FIRST_TOKEN

TTFT_SLO_X = 2.0
TPOT_SLO_X = 1.8
TPOT_NAME = "sandbox:threshold:tpot_p50_seconds"
CLIENT_X = 4.0
REPLICA_ITL_FLOOR_X = 1.0
REPLICA_TTFT_FLOOR_SHARE = 1.0
FLOOR_S = {"ttft": 0.1, "itl": 0.05, "tpot": 0.01}


def read_ceiling(value: float, buckets: Sequence[float]) -> float:
    """The most a quantile whose true value is `value` can read through a histogram of `buckets`:
    Prometheus interpolates inside the bucket that holds the rank, up to its upper boundary."""
    return next((float(b) for b in buckets if value <= b), float(value))


def derive(busy_ttft_p99_s: float, busy_itl_p99_s: float) -> dict[str, float]:
    """{sandbox:threshold name: value} from the pooled p99s of the calibration's busy phases, each as the
    histograms will read it."""
    if not (busy_ttft_p99_s >= 0 and busy_itl_p99_s >= 0):
        raise ValueError("thresholds need the busy phases' TTFT and ITL p99s")
    ttft = max(FLOOR_S["ttft"], TTFT_SLO_X * read_ceiling(busy_ttft_p99_s, TIME_TO_FIRST_TOKEN.buckets))
    itl_floor = max(FLOOR_S["itl"], REPLICA_ITL_FLOOR_X * read_ceiling(busy_itl_p99_s, INTER_TOKEN_LATENCY.buckets))
    r = lambda v: round(v, 3)
    return {"sandbox:threshold:ttft_p99_seconds": r(ttft),
            "sandbox:threshold:client_ttft_p99_seconds": r(CLIENT_X * ttft),
            "sandbox:threshold:replica_itl_p99_floor_seconds": r(itl_floor),
            "sandbox:threshold:replica_ttft_p99_floor_seconds": r(REPLICA_TTFT_FLOOR_SHARE * ttft)}


@dataclass(frozen=True)
class TpotLine:
    """The healthy median time per output token as a function of load (a share of the ceiling): the line
    through the idle point (one request at a time) and the busy point (the busy share). Between
    them a CPU engine's step time grows with the requests it batches, which grow with the load."""
    idle_share: float
    idle_s: float
    busy_share: float
    busy_s: float

    def __post_init__(self):
        if not (0 <= self.idle_share < self.busy_share and self.idle_s > 0 and self.busy_s > 0):
            raise ValueError(f"a TPOT line needs 0 <= idle share < busy share and positive medians, got {self!r}")

    def at(self, share: float) -> float:
        """The median at `share` of the ceiling: linear through both points, never below the idle one."""
        slope = (self.busy_s - self.idle_s) / (self.busy_share - self.idle_share)
        return max(self.idle_s, self.idle_s + slope * (share - self.idle_share))

    def to_dict(self) -> dict:
        return {k: round(v, 4) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, d: dict) -> TpotLine:
        return cls(float(d["idle_share"]), float(d["idle_s"]), float(d["busy_share"]), float(d["busy_s"]))


def tpot_slo(line: TpotLine, share: float) -> dict[str, float]:
    """{tpot_p50_seconds: value} for a drill whose base traffic is `share` of the ceiling."""
    if not share > 0:
        raise ValueError(f"a load share must be > 0, got {share!r}")
    healthy = read_ceiling(line.at(share), TIME_PER_OUTPUT_TOKEN.buckets)
    return {TPOT_NAME: round(max(FLOOR_S["tpot"], TPOT_SLO_X * healthy), 4)}
