# Over 300 lines (about 455): the phases, the window each one reads and the estimators (`streamed_rate`,
# `knee`) share one clock and one notion of "inside the window"; split apart, the window a phase keeps open
# and the window its figures are counted over would no longer read together.
"""A capacity sweep of one traffic profile through the OpenAI API, as GuideLLM's sweep does it.

    single    one request at a time (closed loop, one client): the latency of an idle stack
    ceiling   a bounded number of clients, each sending its next request when its last ends:
              the most requests per second the stack completes (its throughput ceiling)
    busy      Poisson arrivals at `busy_share` of the ceiling, every answer waited for: the healthy
              latency the SLOs are multiples of, at the same point of every machine's curve
    rates     Poisson arrivals at fractions of the ceiling: latency as load approaches it (the busy
              point is one of them)

Every phase is measured after its first second (warm-up), so its figures are its own and
not its predecessor's queue: a closed loop on what streamed inside its window, a rate on the
requests that arrived in it (each one's first chunk, however late; what still decodes once
every arrival has begun streaming is cancelled). The knee is the highest rate whose TTFT p99 stays within
`knee_factor` of the one-at-a-time TTFT (linear between measured rates): beyond it a
queue builds faster than the stack drains it. The one-at-a-time figure is the median:
a handful of idle requests give a steady median, while their p99 is their slowest one
(0.09 s and 0.46 s in two sweeps a minute apart here, which moved the knee tenfold).
"""
from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import httpx

from incidents.profiles import TrafficProfile
from sandbox.traffic.generator import RequestResult, send_request


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


SINGLE_ANSWERS = 2  # whole answers the one-at-a-time phase waits for (its window stretched) for an idle TPOT
FIRST_CHUNK_TIMEOUT_S = 60.0  # a closed phase whose first chunk takes longer than this measures nothing


class Sweeper:
    """Runs the phases of one profile's sweep against one API; `progress(fraction)` after each phase."""

    def __init__(self, api_url: str, model: str, config: SweepConfig = SweepConfig(), seed: int = 0,
                 progress: Callable[[str], None] | None = None, replicas: int = 1, batch: int = 32):
        self.api_url, self.model, self.config, self.seed = api_url, model, config, seed
        self.ceiling_clients = max(1, batch) * max(1, replicas)
        # Every busy request's TTFT and every gap between its chunks: the SLOs' samples.
        self.busy_ttft: list[float] = []
        self.busy_itl: list[float] = []
        self.busy_tpot: list[float] = []  # each busy answer's time per output token
        self.load_tpot: list[float] = []  # ... and each answer's at a drill's own load (run_slos' load_share)
        self.progress = progress or (lambda phase: None)
        self.last_closed = ""  # what the last closed phase saw, for an error that says why it measured nothing
        # Chunks and tokens of every request this sweep saw to its end: chunks per token (0.48-0.61 here: a
        # chunk often carries two tokens) turn a request's max_tokens into the chunks it streams.
        self.whole_chunks = self.whole_tokens = 0

    def run_slos(self, profile: TrafficProfile, ceiling_rate: float, single: bool,
                 load_share: float | None = None) -> list[SweepPoint]:
        """The SLOs' phases alone, at a ceiling measured before (another config's): one at a time (`single`),
        Poisson at `load_share` of the ceiling (a drill's own base load; its answers' TPOT in `load_tpot`) when
        given, and busy."""
        if not ceiling_rate > 0:
            raise ValueError(f"a known ceiling must be > 0 requests/s, got {ceiling_rate!r}")
        if load_share is not None and not 0 < load_share < 1:
            raise ValueError(f"a load share must be in (0, 1), got {load_share!r}")
        return asyncio.run(self._run(profile, single, known_ceiling=ceiling_rate, load_share=load_share))

    def ceiling(self, profile: TrafficProfile) -> SweepPoint:
        """The ceiling phase alone: what the stack completes with the engines' whole batch busy, now."""
        async def one() -> SweepPoint:
            async with self._client() as client:
                rng = random.Random(f"calibrate/{profile.name}/{self.seed}")
                return await self._closed(client, profile, rng, "ceiling", self.ceiling_clients, self.config.ceiling_s)
        return asyncio.run(one())

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.api_url, timeout=httpx.Timeout(120.0, connect=10.0),
                                 limits=httpx.Limits(max_connections=512, max_keepalive_connections=64))

    async def _busy(self, client, profile, rng, ceiling_rate: float, share: float | None = None) -> SweepPoint:
        """The busy phase (share None: the busy share), or the "load" phase at `share`: every answer waited for."""
        cfg = self.config
        rate = (cfg.busy_share if share is None else share) * ceiling_rate
        # a slow stack's busy share arrives slowly: the window stretches for enough arrivals
        window = min(cfg.max_stretch * cfg.busy_s, max(cfg.busy_s, cfg.busy_arrivals / rate))
        return await self._poisson(client, profile, rng, rate, window, phase="busy" if share is None else "load")

    def run(self, profile: TrafficProfile, full: bool = True) -> list[SweepPoint]:
        """full=False: the ceiling and busy phases only (a profile whose knee is scaled from the reference's)."""
        return asyncio.run(self._run(profile, full))

    async def _run(self, profile: TrafficProfile, full: bool, known_ceiling: float | None = None,
                   load_share: float | None = None) -> list[SweepPoint]:
        cfg = self.config
        async with self._client() as client:
            rng = random.Random(f"calibrate/{profile.name}/{self.seed}")
            points = []
            if full:
                points.append(await self._closed(client, profile, rng, "single", 1, cfg.single_s))
                self.progress("single")
            if known_ceiling is not None:  # the SLOs' phases alone
                if load_share is not None:
                    points.append(await self._busy(client, profile, rng, known_ceiling, load_share))
                    self.progress("load")
                points.append(await self._busy(client, profile, rng, known_ceiling))
                self.progress("busy")
                return points
            ceiling = await self._closed(client, profile, rng, "ceiling", self.ceiling_clients, cfg.ceiling_s)
            points.append(ceiling)
            self.progress("ceiling")
            if ceiling.rate <= 0:
                raise RuntimeError(f"profile {profile.name}: nothing streamed in the {cfg.ceiling_s:g} s "
                                   f"throughput phase ({ceiling.errors} errors; {self.last_closed}): "
                                   "is the stack serving?")
            # lightest first: each phase starts from what the one before left queued
            for fraction in sorted((*(cfg.fractions if full else ()), cfg.busy_share)):
                if fraction == cfg.busy_share:
                    points.append(await self._busy(client, profile, rng, ceiling.rate))
                    self.progress("busy")
                else:
                    points.append(await self._poisson(client, profile, rng, fraction * ceiling.rate, cfg.rate_s))
                    self.progress(f"rate {fraction:g}")
        return points

    async def _one(self, client, profile, rng, finished: list, t_start: float, chunks: list | None = None,
                   firsts: list | None = None, gaps: list | None = None, asked: list | None = None) -> None:
        """One request; with `chunks`, each chunk's arrival is noted as it streams, with `firsts` each
        request's first chunk as (arrival, TTFT), with `gaps` every later one as (arrival, time since the
        request's last): a request cut off at a window's end counts too. `asked`: its max_tokens."""
        request = profile.sample(rng)
        if asked is not None:
            asked.append(request.max_tokens)
        sent = time.monotonic()
        seen = []

        def on_chunk() -> None:
            now = time.monotonic()
            chunks.append(now - t_start)
            if not seen:
                if firsts is not None:
                    firsts.append((now - t_start, now - sent))
            elif gaps is not None:
                gaps.append((now - t_start, now - seen[-1]))
            seen[:] = [now]

        result = await send_request(client, request, self.model, None if chunks is None else on_chunk)
        finished.append((time.monotonic() - t_start, result))

    async def _closed(self, client, profile, rng, phase: str, clients: int, window_s: float) -> SweepPoint:
        """`clients` loops, each sending its next request when its last ends, until the window closes; then
        what is still running is cancelled (the client goes away, the server aborts it): its chunks inside
        the window are counted already, and waiting for a full batch's stragglers took longer than the
        window itself."""
        finished: list[tuple[float, RequestResult]] = []
        chunks: list[float] = []
        firsts: list[tuple[float, float]] = []
        gaps: list[tuple[float, float]] = []
        asked: list[int] = []
        t_start = time.monotonic()
        # The window opens with the first chunk: a full batch's first prefills (64 long prompts on two
        # CPU replicas) took longer than a short window, which then saw nothing stream at all.
        end = [t_start + FIRST_CHUNK_TIMEOUT_S + self.config.warmup_s + window_s]

        async def loop() -> None:
            while time.monotonic() < end[0]:
                await self._one(client, profile, rng, finished, t_start, chunks, firsts, gaps, asked)

        tasks = [asyncio.create_task(loop()) for _ in range(clients)]
        while not chunks and time.monotonic() < t_start + FIRST_CHUNK_TIMEOUT_S and not all(t.done() for t in tasks):
            await asyncio.sleep(0.02)
        opened = chunks[0] if chunks else 0.0
        lo = t_start + opened + self.config.warmup_s
        end[0] = lo + window_s
        await asyncio.wait(tasks, timeout=max(0.0, end[0] - time.monotonic()))
        if phase != "single" and chunks:  # one client streams what it streams; a batch is counted on enough
            longest = end[0] = lo + self.config.max_stretch * window_s  # the clients go on meanwhile
            # ... and until a request began streaming inside it (a TTFT of its own: 16 clients beside the
            # steady canary had none in a 1.5 s test window) and one streamed to its end (chunks per token)
            while ((sum(c >= lo - t_start for c in chunks) < self.config.min_chunks
                    or not any(at >= lo - t_start for at, _ in firsts)
                    or self.whole_tokens + sum(r.completion_tokens for _, r in finished if r.status == "200") == 0)
                   and time.monotonic() < longest and not all(t.done() for t in tasks)):
                await asyncio.sleep(0.1)
            end[0] = min(time.monotonic(), longest)
            window_s = max(window_s, end[0] - lo)
        elif phase == "single":
            # The idle TPOT needs whole answers inside the window: one CPU under the speculative settings took
            # 3.8 s to a first token and longer than the 7 s window to an answer, and left no TPOT line at all.
            longest = end[0] = lo + self.config.max_stretch * window_s
            while (sum(r.status == "200" and t >= lo - t_start for t, r in finished) < SINGLE_ANSWERS
                   and time.monotonic() < longest and not all(t.done() for t in tasks)):
                await asyncio.sleep(0.1)
            end[0] = min(time.monotonic(), longest)
            window_s = max(window_s, end[0] - lo)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.last_closed = (f"{clients} clients, first chunk after {opened:.2f} s, {len(chunks)} chunks in all, "
                            f"last at {chunks[-1] if chunks else 0:.2f} s, {len(finished)} requests ended")
        return self._point(phase, clients, finished, window_s, chunks=chunks, firsts=firsts, gaps=gaps,
                           opened=opened, asked=asked)

    async def _poisson(self, client, profile, rng, rate: float, window_s: float, phase: str = "rate") -> SweepPoint:
        """Poisson arrivals for the window. Once every arrival has streamed its first chunk (its TTFT: what the
        knee reads), what is still decoding is cancelled: the knee has what it needs, and waiting for the last
        arrivals' whole answers took a few seconds a rate here (three rates, about a tenth of a calibration).
        phase "busy": the SLOs' phase, whose every answer is waited for (a median TPOT of the answers that
        happened to end first is the short ones'), and whose samples are kept (`busy_ttft`, `busy_itl`,
        `busy_tpot`); "load": a drill's own load, answers waited for alike, their TPOT kept (`load_tpot`)."""
        whole = phase in ("busy", "load")  # every answer waited for
        finished: list[tuple[float, RequestResult]] = []
        chunks: list[float] = []
        firsts: list[tuple[float, float]] = []
        gaps: list[tuple[float, float]] = []
        t_start = time.monotonic()
        arrivals = random.Random(f"arrivals/{profile.name}/{rate:.6f}/{self.seed}")
        pending, t, sent = set(), 0.0, 0
        while (t := t + arrivals.expovariate(rate)) < self.config.warmup_s + window_s:
            await asyncio.sleep(max(0.0, t_start + t - time.monotonic()))
            task = asyncio.create_task(self._one(client, profile, rng, finished, t_start, chunks, firsts, gaps))
            sent += 1
            pending.add(task)
            task.add_done_callback(pending.discard)
        deadline = time.monotonic() + FIRST_CHUNK_TIMEOUT_S  # what arrived in the window is answered: its queue
        while pending and time.monotonic() < deadline and \
                (whole or len(firsts) + sum(r.ttft_s is None for _, r in finished) < sent):
            await asyncio.sleep(0.05)
        for task in list(pending):
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        hi = time.monotonic() - t_start
        point = self._open_point(rate, finished, firsts, gaps, chunks, window_s, hi, phase)
        if phase == "load":
            self.load_tpot += tpots(r for t, r in finished if t - r.e2e_s >= self.config.warmup_s)
        elif phase == "busy":
            lo = self.config.warmup_s
            self.busy_ttft += [ttft for at, ttft in firsts if at - ttft >= lo]
            # gaps while the arrivals ran: the tail after the window decodes with no new arrival beside it
            self.busy_itl += [gap for at, gap in gaps if lo <= at <= lo + window_s]
            self.busy_tpot += tpots(r for t, r in finished if t - r.e2e_s >= lo)
        return point

    def _open_point(self, rate: float, finished: list, firsts: list, gaps: list, chunks: list, window_s: float,
                    hi: float, phase: str = "rate") -> SweepPoint:
        """An open loop's figures: every request that arrived after the warm-up (it began streaming at
        `at - ttft`), however late its first chunk came; the gaps and chunks streamed from the warm-up until
        the phase closed. Requests/s are those arrivals over the window; tokens/s the chunks streamed over
        the chunks per token measured on whole requests."""
        lo = self.config.warmup_s
        ttfts = [ttft for at, ttft in firsts if at - ttft >= lo]
        itls = [gap for at, gap in gaps if at >= lo]
        ok = [r for _, r in finished if r.status == "200" and r.ttft_s is not None]
        self.whole_chunks += sum(1 + len(r.chunk_gaps_s) for r in ok)
        self.whole_tokens += sum(r.completion_tokens for r in ok)
        errors = sum(1 for t, r in finished if r.status != "200" and t - r.e2e_s >= lo)
        per_token = self.whole_chunks / self.whole_tokens if self.whole_tokens else 1.0
        streamed = sum(c >= lo for c in chunks)
        return SweepPoint(phase, rate, len(ttfts), errors, len(ttfts) / window_s, percentile(ttfts, 50),
                          percentile(ttfts, 99), percentile(itls, 50), percentile(itls, 99),
                          streamed / per_token / max(1e-9, hi - lo), percentile(tpots(ok), 50))

    def _point(self, phase: str, offered: float, finished: list, window_s: float,
               chunks: list[float] | None = None,
               firsts: list[tuple[float, float]] | None = None,
               gaps: list[tuple[float, float]] | None = None, opened: float = 0.0,
               asked: list[int] | None = None) -> SweepPoint:
        """A closed loop's figures: what streamed inside the window."""
        lo, hi = opened + self.config.warmup_s, opened + self.config.warmup_s + window_s
        inside = [(t, r) for t, r in finished if lo <= t <= hi]
        # first chunks inside the window; one request at a time leaves no queue to wait out
        ttfts = [ttft for at, ttft in firsts or () if (0.0 if phase == "single" else lo) <= at <= hi]
        itls = [gap for at, gap in gaps or () if lo <= at <= hi]
        point = summarize(phase, offered, inside, window_s)
        if firsts is not None:
            point = replace(point, requests=len(ttfts), ttft_p50_s=percentile(ttfts, 50),
                            ttft_p99_s=percentile(ttfts, 99), itl_p50_s=percentile(itls, 50),
                            itl_p99_s=percentile(itls, 99))
        ok = [r for _, r in finished if r.status == "200" and r.ttft_s is not None]
        self.whole_chunks += sum(1 + len(r.chunk_gaps_s) for r in ok)
        self.whole_tokens += sum(r.completion_tokens for r in ok)
        per_token = self.whole_chunks / self.whole_tokens if self.whole_tokens else None
        rate = streamed_rate(finished, lo, hi, chunks, asked, per_token)
        return point if rate is None else replace(point, rate=rate)


def chunk_times(t_end: float, r: RequestResult) -> list[float]:
    """When each streamed text chunk of a request arrived (seconds from the phase's start)."""
    if r.ttft_s is None:
        return []
    t = t_end - r.e2e_s + r.ttft_s
    times = [t]
    for gap in r.chunk_gaps_s:
        t += gap
        times.append(t)
    return times


def streamed_rate(finished: list[tuple[float, RequestResult]], lo: float, hi: float,
                  chunks: list[float] | None = None, asked: list[int] | None = None,
                  per_token: float | None = None) -> float | None:
    """Requests/s a closed loop completes, from the chunks streamed inside [lo, hi] by every request
    (those that began before the window or were still running at its end too) over the chunks a
    request streams to its end. `chunks`: every chunk's arrival (seconds from the phase's start), as
    counted while the requests ran; without it, the finished requests' own chunks. `asked`: every
    request's max_tokens (the profiles ignore EOS, so a request streams all of them): a request's
    chunks are their mean times the chunks per token of those that finished. Without it, the finished
    requests' mean, which a window that cancels the rest biases towards the short ones (the 3 survivors
    of a 2.8 s ceiling had asked for 18 tokens where the window's requests asked for 31 on average: 18.7
    requests/s where the same chunks give 10.8, and 10.7 in a 7 s ceiling). `per_token`: chunks per
    token as measured on more requests than these (the sweep's so far).

    Counting whole requests that end inside a window of a few seconds counts the batches that happen
    to end in it: 4.1 to 5.9 requests/s in five 7 s ceilings here. Chunks arrive steadily, hundreds
    per window, so the same window gives the rate the stack streams at. None without streamed chunks."""
    ok = [(t, r) for t, r in finished if r.status == "200" and r.ttft_s is not None]
    if hi <= lo or not (ok or asked):
        return None
    streamed = sum(1 + len(r.chunk_gaps_s) for _, r in ok)
    if asked:
        tokens = sum(r.completion_tokens for _, r in ok)
        if per_token is None:
            per_token = streamed / tokens if tokens > 0 else 1.0
        per_request = per_token * sum(asked) / len(asked)
    else:
        per_request = streamed / len(ok)
    times = chunks if chunks is not None else [c for t, r in ok for c in chunk_times(t, r)]
    inside = sum(lo <= c <= hi for c in times)
    return inside / (hi - lo) / per_request


def knee(points: list[SweepPoint], factor: float) -> float:
    """The highest rate whose TTFT p99 stays within `factor` x the one-at-a-time median (req/s).

    Linear between the measured rates, the busy one among them (from the idle point at rate 0); past the
    last, the last."""
    single = next((p for p in points if p.phase == "single"), None)
    rates = sorted((p for p in points if p.phase in ("rate", "busy") and p.ttft_p99_s is not None),
                   key=lambda p: p.offered)
    if not rates or single is None or single.ttft_p50_s is None:
        raise ValueError("a knee needs the one-at-a-time point and at least one measured rate")
    limit = factor * single.ttft_p50_s
    prev_rate, prev_p99 = 0.0, single.ttft_p50_s
    for p in rates:
        if p.ttft_p99_s > limit:
            share = (limit - prev_p99) / (p.ttft_p99_s - prev_p99) if p.ttft_p99_s > prev_p99 else 0.0
            return prev_rate + max(0.0, min(1.0, share)) * (p.offered - prev_rate)
        prev_rate, prev_p99 = p.offered, p.ttft_p99_s
    return prev_rate
