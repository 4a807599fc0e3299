"""Open-loop Poisson traffic through the OpenAI API, measured from the client's side.

Arrivals are scheduled at exponential gaps from a seeded RNG and sent whether
or not earlier requests have finished (open loop: a slow server builds a queue,
as in production). Every request streams, so time to first token is measured.
"""
from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx

from incidents.profiles import SampledRequest, TrafficProfile


@dataclass
class RequestResult:
    status: str  # HTTP status, "stream_error" (error event mid-stream) or "error" (no response)
    e2e_s: float
    ttft_s: float | None = None
    chunk_gaps_s: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    text: str = ""
    error: str = ""


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


@dataclass
class TrafficStats:
    started_at: float = field(default_factory=time.monotonic)
    sent: int = 0
    results: list[RequestResult] = field(default_factory=list)

    def add(self, result: RequestResult) -> None:
        self.results.append(result)

    def summary(self) -> dict:
        elapsed = max(1e-9, time.monotonic() - self.started_at)
        ok = [r for r in self.results if r.status == "200"]
        ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
        e2e = [r.e2e_s for r in ok]
        gaps = [g for r in ok for g in r.chunk_gaps_s]
        ms = lambda v: None if v is None else round(v * 1000, 1)
        return {
            "elapsed_s": round(elapsed, 2), "sent": self.sent, "finished": len(self.results),
            "in_flight": self.sent - len(self.results), "ok": len(ok),
            "statuses": dict(Counter(r.status for r in self.results)),
            "request_rate": round(len(self.results) / elapsed, 3),
            "output_tokens_per_s": round(sum(r.completion_tokens for r in ok) / elapsed, 1),
            "prompt_tokens": sum(r.prompt_tokens for r in ok),
            "completion_tokens": sum(r.completion_tokens for r in ok),
            "ttft_ms": {"p50": ms(_percentile(ttft, 50)), "p90": ms(_percentile(ttft, 90)),
                        "p99": ms(_percentile(ttft, 99))},
            "itl_ms": {"p50": ms(_percentile(gaps, 50)), "p90": ms(_percentile(gaps, 90)),
                       "p99": ms(_percentile(gaps, 99))},
            "e2e_ms": {"p50": ms(_percentile(e2e, 50)), "p90": ms(_percentile(e2e, 90)),
                       "p99": ms(_percentile(e2e, 99))},
        }


async def send_request(client: httpx.AsyncClient, req: SampledRequest, model: str,
                       on_chunk=None) -> RequestResult:
    """One request, streamed or not; never raises (failures become the result's status). `on_chunk()` is
    called as each streamed text chunk arrives (a sweep counts what streams while a request is running)."""
    t0 = time.perf_counter()
    try:
        if not req.stream:
            resp = await client.post(req.path, json=req.body(model))
            e2e = time.perf_counter() - t0
            if resp.status_code != 200:
                return RequestResult(str(resp.status_code), e2e, error=resp.text[:300])
            body = resp.json()
            choice = body["choices"][0]
            text = choice["message"]["content"] if req.chat else choice["text"]
            return RequestResult("200", e2e, e2e, [], body["usage"]["prompt_tokens"],
                                 body["usage"]["completion_tokens"], text)
        return await _stream(client, req, model, t0, on_chunk)
    except (httpx.HTTPError, json.JSONDecodeError, KeyError, IndexError) as e:
        return RequestResult("error", time.perf_counter() - t0, error=f"{type(e).__name__}: {e}"[:300])


async def _stream(client: httpx.AsyncClient, req: SampledRequest, model: str, t0: float,
                  on_chunk=None) -> RequestResult:
    async with client.stream("POST", req.path, json=req.body(model)) as resp:
        if resp.status_code != 200:
            body = await resp.aread()
            return RequestResult(str(resp.status_code), time.perf_counter() - t0, error=body.decode()[:300])
        result = RequestResult("200", 0.0)
        text, last = [], None
        async for line in resp.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                result.status, result.error = "stream_error", chunk["error"].get("message", "")[:300]
                continue
            if chunk.get("usage"):
                result.prompt_tokens = chunk["usage"]["prompt_tokens"]
                result.completion_tokens = chunk["usage"]["completion_tokens"]
            for choice in chunk.get("choices", []):
                piece = (choice.get("delta") or {}).get("content") if req.chat else choice.get("text")
                if piece:
                    now = time.perf_counter()
                    if on_chunk is not None:
                        on_chunk()
                    if result.ttft_s is None:
                        result.ttft_s = now - t0
                    else:
                        result.chunk_gaps_s.append(now - last)
                    last = now
                    text.append(piece)
            if req.close_after_chunks is not None and len(text) >= req.close_after_chunks:
                result.completion_tokens = result.completion_tokens or len(text)  # no usage chunk comes
                break  # the client has what it wanted: it closes the stream, the server aborts the rest
        result.e2e_s = time.perf_counter() - t0
        result.text = "".join(text)
        return result


async def run_traffic(api_url: str, model: str, profile: TrafficProfile, rate: float, duration_s: float,
                      seed: int = 0, exporter=None, stats: TrafficStats | None = None,
                      max_in_flight: int = 512, stop: threading.Event | None = None) -> TrafficStats:
    """Poisson arrivals at `rate` requests/s for `duration_s` (or until `stop` is set), then wait for the
    stragglers."""
    if rate <= 0 or duration_s <= 0:
        raise ValueError("rate and duration must be positive")
    rng = random.Random(seed)
    stats = stats or TrafficStats()
    limits = httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=64)
    timeout = httpx.Timeout(300.0, connect=10.0)
    async with httpx.AsyncClient(base_url=api_url, limits=limits, timeout=timeout) as client:
        pending: set[asyncio.Task] = set()

        async def one(req: SampledRequest) -> None:
            if exporter:
                exporter.started()
            result = await send_request(client, req, model)
            stats.add(result)
            if exporter:
                exporter.finished(result.status, result.e2e_s, result.ttft_s, result.completion_tokens)

        start = time.monotonic()
        stats.started_at = start
        next_at = start
        while True:
            next_at += rng.expovariate(rate)
            if next_at - start > duration_s:
                break
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if stop is not None and stop.is_set():
                break
            task = asyncio.create_task(one(profile.sample(rng)))
            stats.sent += 1
            pending.add(task)
            task.add_done_callback(pending.discard)
        if pending:
            await asyncio.gather(*pending)
    return stats
