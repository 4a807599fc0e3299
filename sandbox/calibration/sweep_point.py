"""What a sweep measures with and what it reports: its settings (SweepConfig) and one phase's figures (SweepPoint),
with the order statistics every phase reads them by.

    SweepConfig  each phase's length, the busy share, the rates between, the knee's factor, the window rules
    SweepPoint   one phase: what was offered, what finished inside its window, TTFT/ITL/TPOT percentiles
    percentile, tpots, summarize: from finished requests to a point
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from sandbox.traffic.generator import RequestResult


@dataclass(frozen=True)
class SweepConfig:
    single_s: float = 7.0
    ceiling_s: float = 7.0
    rate_s: float = 6.0
    busy_s: float = 6.0
    # The busy phase's load, a share of the ceiling: the heaviest base load of the catalogue's drills
    # (ttft-after-deploy's 0.55; tests/calibration keep every incident's at or under it), so a healthy
    # drill never runs busier than the load its SLOs were measured at. It was a closed loop of 8 clients a
    # replica: 0.54 of the ceiling on this machine's two CPUs but 0.72 on one, whose SLOs then sat at a
    # busier point of its curve (a TTFT SLO of 12.8 s that a throttled replica never reached).
    busy_share: float = 0.55
    # ... over enough arrivals for a p99 of every profile's pooled (busy_s, stretched up to max_stretch x):
    # about 80 pooled here, where one profile's 40 gave p99s of 0.64 to 1.84 s in five sweeps
    busy_arrivals: int = 25
    # The ceiling's clients are the engines' whole batch (a bounded closed loop: GuideLLM's unbounded
    # 512 streams got no request through in 15 s here). Counted by what streamed, 16, 32 and 64
    # clients on two replicas of max_num_seqs 32 completed 5.5, 7.7 and 9.3 requests/s: a CPU
    # engine's batch keeps paying until it is full.
    fractions: tuple[float, ...] = (0.35, 0.85)  # with the busy share between them
    knee_factor: float = 10.0  # the knee: TTFT p99 within this factor of the one-at-a-time median
    warmup_s: float = 1.0  # requests finishing this soon after a phase starts belong to the phase before
    # A closed phase's window stays open until this many chunks streamed in it (a count of n has a
    # relative error near 1/sqrt(n)), up to `max_stretch` x its length: a slow stack (a short test
    # sweep on a heavy config streamed 2 chunks in a 2.1 s window) is measured on enough of its output.
    min_chunks: int = 100
    max_stretch: float = 4.0

    def __post_init__(self):
        for name in ("single_s", "busy_s", "ceiling_s", "rate_s"):
            if not 1 <= getattr(self, name) <= 120:
                raise ValueError(f"{name} must be in [1, 120] seconds, got {getattr(self, name)!r}")
        if not 0 < self.busy_share < 1:
            raise ValueError(f"busy_share must be in (0, 1), got {self.busy_share!r}")
        if not self.fractions or any(not 0 < f < 1 for f in self.fractions) or list(self.fractions) != sorted(
                set(self.fractions)) or self.busy_share in self.fractions:
            raise ValueError(f"fractions must be increasing, each in (0, 1) and none the busy share, got "
                             f"{self.fractions!r}")
        if self.knee_factor <= 1:
            raise ValueError(f"knee_factor must be > 1, got {self.knee_factor!r}")
        if not 0 <= self.warmup_s < min(self.single_s, self.busy_s, self.ceiling_s, self.rate_s):
            raise ValueError("warmup_s must be >= 0 and shorter than every phase")
        if not 1 <= self.busy_arrivals <= 1000:
            raise ValueError(f"busy_arrivals must be in [1, 1000], got {self.busy_arrivals!r}")
        if not 0 <= self.min_chunks <= 10_000:
            raise ValueError(f"min_chunks must be in [0, 10000], got {self.min_chunks!r}")
        if not 1 <= self.max_stretch <= 10:
            raise ValueError(f"max_stretch must be in [1, 10], got {self.max_stretch!r}")

    def scaled(self, factor: float) -> SweepConfig:
        """Every phase `factor` times as long (a short sweep for tests), the warm-up kept within it."""
        f = lambda v: max(1.0, round(v * factor, 2))
        return replace(self, single_s=f(self.single_s), busy_s=f(self.busy_s), ceiling_s=f(self.ceiling_s),
                       rate_s=f(self.rate_s), warmup_s=min(self.warmup_s, 0.5 * min(
                           f(self.single_s), f(self.busy_s), f(self.ceiling_s), f(self.rate_s))))

    def slo_seconds(self, profiles: int = 1) -> float:
        """The SLO phases' measuring time alone (Sweeper.run_slos): one at a time, then busy per profile."""
        return self.single_s + self.busy_s * profiles

    def seconds(self, profiles: int = 1) -> float:
        """A calibration's measuring time (stragglers not counted): the reference profile's full
        sweep and the others' busy and ceiling phases."""
        return self.single_s + (self.busy_s + self.ceiling_s) * profiles + self.rate_s * len(self.fractions)


@dataclass(frozen=True)
class SweepPoint:
    phase: str  # "single" | "ceiling" | "busy" | "rate" | "load"
    offered: float  # clients (single, ceiling) or requests/s offered (busy, rate, load)
    requests: int  # finished inside the window
    errors: int
    rate: float  # requests/s finished inside the window
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    itl_p50_s: float | None
    itl_p99_s: float | None
    output_tokens_per_s: float
    # the median over finished requests of (end - first token) / (tokens - 1): what the servers' TPOT
    # histogram counts per request, and what the median-TPOT page reads (None: no request finished)
    tpot_p50_s: float | None = None

    def to_dict(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between order statistics (numpy's default), None for no values."""
    if not values:
        return None
    s = sorted(values)
    pos = q / 100 * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def tpots(results) -> list[float]:
    """Each whole answer's time per output token after the first, as the servers count it."""
    return [(r.e2e_s - r.ttft_s) / (r.completion_tokens - 1) for r in results
            if r.status == "200" and r.ttft_s is not None and r.completion_tokens >= 2]


def summarize(phase: str, offered: float, finished: list[tuple[float, RequestResult]], window_s: float) -> SweepPoint:
    ok = [r for _, r in finished if r.status == "200"]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    gaps = [g for r in ok for g in r.chunk_gaps_s]
    return SweepPoint(phase, offered, len(ok), len(finished) - len(ok), len(ok) / window_s,
                      percentile(ttft, 50), percentile(ttft, 99), percentile(gaps, 50), percentile(gaps, 99),
                      sum(r.completion_tokens for r in ok) / window_s, percentile(tpots(ok), 50))
