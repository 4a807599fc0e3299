# Over 300 lines (about 350; the settings and the point are in sweep_point.py): the phases, the window each one reads and the estimators (`streamed_rate`,
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
from dataclasses import replace

import httpx

from incidents.profiles import TrafficProfile
from sandbox.calibration.sweep_point import SweepConfig, SweepPoint, percentile, summarize, tpots
from sandbox.traffic.generator import RequestResult, send_request


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

    def ceiling(self, profile: TrafficProfile, window_s: float | None = None) -> SweepPoint:
        """The ceiling phase alone: what the stack completes with the engines' whole batch busy, now, over
        `window_s` (default: the sweep's ceiling window)."""
        window_s = self.config.ceiling_s if window_s is None else window_s
        if not 1 <= window_s <= 120:
            raise ValueError(f"a ceiling window must be in [1, 120] seconds, got {window_s!r}")

        async def one() -> SweepPoint:
            async with self._client() as client:
                rng = random.Random(f"calibrate/{profile.name}/{self.seed}")
                return await self._closed(client, profile, rng, "ceiling", self.ceiling_clients, window_s)
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
