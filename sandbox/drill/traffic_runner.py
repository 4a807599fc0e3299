"""The drill's traffic: open-loop Poisson arrivals whose rate and profile follow the plan.

Runs in its own thread with its own event loop, so the drill's main thread can
follow the timeline, poll alerts and handle Ctrl-C. Client-side metrics go to
the traffic exporter under one neutral profile label (`drill`): the label must
not tell the candidate that the request mix changed.

Like real users, a small share of clients give up early (`abandon_share`):
they close the connection after a short wait, the server aborts the request,
and the client counts it as status 499 (nginx's "client closed request").

A variant's traffic change (a decoy: the prompts grew) begins when the drill says its faults
have landed (`landed()`), with `wait_for_landing`; without it, at the planned injection time.

A batch job (a peak with `concurrency`) runs beside the base traffic: that
many clients, each sending its next request as soon as its last one ends, and,
refused with a 429, after a back-off first, as the `openai` client does
(`backoff_s`): a job's clients that resent at once would spend the CPU of a
2-core machine on refusals (shed-load under a surge: 33 refusals a second).
"""
from __future__ import annotations

import asyncio
import math
import random
import threading
import time

import httpx

from incidents.profiles import get_profile
from sandbox.traffic.generator import RequestResult, TrafficStats, send_request


def backoff_s(refused: int, u: float) -> float:
    """Seconds to wait after the `refused`-th 429 in a row, `u` uniform in [0, 1): the `openai` client's
    schedule (0.5 s doubling, at most 8 s, less up to a quarter of jitter)."""
    if refused < 1 or not 0 <= u < 1:
        raise ValueError(f"refused must be >= 1 and u in [0, 1), got {refused!r}, {u!r}")
    return min(0.5 * 2 ** (refused - 1), 8.0) * (1 - 0.25 * u)


class TrafficRunner:
    def __init__(self, api_url: str, model: str, plan, seed: int, exporter=None, max_in_flight: int = 256,
                 abandon_share: float = 0.05, abandon_after_s: tuple[float, float] = (0.3, 1.5),
                 open_ended: bool = False, wait_for_landing: bool = False):
        if any(seg.rate is None for seg in plan.segments):  # else expovariate(None), later, in the traffic thread
            raise ValueError("the plan's knee-unit rates are not resolved: calibrate first")
        if not 0 <= abandon_share < 1:
            raise ValueError(f"abandon_share must be in [0, 1), got {abandon_share!r}")
        self.abandon_share, self.abandon_after_s = abandon_share, abandon_after_s
        self.dropped = 0  # arrivals not sent because max_in_flight requests were already waiting
        self.api_url, self.model, self.plan = api_url, model, plan
        # Open-ended (an interactive drill): the base traffic goes on past the plan's end, at the last
        # segment's rate and profile, until stop() is called.
        self.until_s = None if open_ended else plan.duration_s
        self.seed = seed
        self.rng = random.Random(f"traffic/{seed}")
        self.exporter = exporter
        self.max_in_flight = max_in_flight
        self.stats = TrafficStats()
        self.started_at: float | None = None  # monotonic time of t=0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="drill-traffic", daemon=True)
        self.error: BaseException | None = None
        self._changed = not wait_for_landing  # read by the traffic thread, set once by the drill's

    def landed(self) -> None:
        """The injection's faults are in (a deploy has rolled out): the variant's traffic change begins."""
        self._changed = True

    def extend(self, until_s: float) -> None:
        """Send until `until_s` rather than the plan's end (the last segment goes on); never shortens."""
        if self.until_s is not None:
            self.until_s = max(self.until_s, until_s)

    def segment_at(self, t: float):
        return self.plan.segment_at(t, changed=self._changed)

    def start(self) -> TrafficRunner:
        self.started_at = time.monotonic()
        self._thread.start()
        return self

    def elapsed(self) -> float:
        return 0.0 if self.started_at is None else time.monotonic() - self.started_at

    async def _wait_until(self, t: float) -> None:
        """Until traffic second `t`, or the stop: in short sleeps, as the stop is a thread's event."""
        while not self._stop.is_set() and (wait := t - self.elapsed()) > 0:
            await asyncio.sleep(min(wait, 0.25))

    def progress(self, t: float) -> str:
        """One line for a drill's progress notes: what was sent, what came back, how fast."""
        s = self.stats.summary()
        errors = sum(n for status, n in s["statuses"].items() if status not in ("200", "429", "499"))
        refused = s["statuses"].get("429", 0)  # the admission limit's, as the error page counts them: apart
        return (f"{t:5.0f}s  sent {s['sent']}  ok {s['ok']}  errors {errors}" + (f"  refused {refused}" if refused else "")
                + f"  TTFT p50 {s['ttft_ms']['p50']} ms")

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop sending; wait up to timeout_s for the requests in flight."""
        self._stop.set()
        self._thread.join(timeout_s)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as e:  # noqa: BLE001 - reported by the drill, never silent
            self.error = e

    async def _run(self) -> None:
        limits = httpx.Limits(max_connections=self.max_in_flight, max_keepalive_connections=64)
        timeout = httpx.Timeout(120.0, connect=10.0)
        pending: set[asyncio.Task] = set()
        async with httpx.AsyncClient(base_url=self.api_url, limits=limits, timeout=timeout) as client:
            async def one(req, give_up_s: float | None) -> None:
                if self.exporter:
                    self.exporter.started()
                t0 = time.perf_counter()
                try:
                    result = await asyncio.wait_for(send_request(client, req, self.model), give_up_s)
                except TimeoutError:
                    result = RequestResult("499", time.perf_counter() - t0)
                self.stats.add(result)
                if self.exporter:
                    self.exporter.finished(result.status, result.e2e_s, result.ttft_s, result.completion_tokens)
                return result

            async def job_client(job, index: int) -> None:
                rng = random.Random(f"job/{self.seed}/{job.start_s}/{index}")  # independent of timing
                jitter = random.Random(f"job-backoff/{self.seed}/{job.start_s}/{index}")
                refused = 0  # 429s in a row
                # a variant's job lasts as its traffic change does: to the (extended, or open) end
                while not self._stop.is_set() and self.elapsed() < (
                        job.end_s if not job.after_landing else self.until_s if self.until_s is not None else math.inf):
                    self.stats.sent += 1
                    result = await one(get_profile(job.profile).sample(rng), None)
                    refused = refused + 1 if result.status == "429" else 0
                    if refused:
                        await self._wait_until(self.elapsed() + backoff_s(refused, jitter.random()))

            async def job(job) -> None:
                while not self._stop.is_set() and ((wait := job.start_s - self.elapsed()) > 0
                                                   or (job.after_landing and not self._changed)):
                    await asyncio.sleep(min(max(wait, 0.05), 0.25))
                if not self._stop.is_set():
                    await asyncio.gather(*(job_client(job, i) for i in range(job.concurrency)))

            self.stats.started_at = self.started_at
            for planned in self.plan.jobs:
                task = asyncio.create_task(job(planned))
                pending.add(task)
                task.add_done_callback(pending.discard)
            t = 0.0
            while not self._stop.is_set():
                seg = self.segment_at(t)
                t += self.rng.expovariate(seg.rate)
                if self.until_s is not None and t >= self.until_s:
                    break
                await self._wait_until(t)
                if self._stop.is_set():
                    break
                req = get_profile(self.segment_at(t).profile).sample(self.rng)
                give_up = (self.rng.uniform(*self.abandon_after_s) if self.rng.random() < self.abandon_share
                           else None)
                if len(pending) >= self.max_in_flight:  # the client side saturates, as a real one would
                    self.dropped += 1
                    continue
                task = asyncio.create_task(one(req, give_up))
                self.stats.sent += 1
                pending.add(task)
                task.add_done_callback(pending.discard)
            if pending:
                await asyncio.wait(pending, timeout=30)
                for task in pending:
                    task.cancel()
