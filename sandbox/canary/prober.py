"""The canary prober: a light, steady stream of probe requests through the OpenAI API.

First a warm-up asks every consistency key once, one request at a time: those
answers are the references. Then one slot every `interval_s`, in a repeating
schedule (`SCHEDULE`):

    accuracy  the next held-out task prompt, scored with the task's check
    alone     the next consistency key, one request
    burst     the next consistency key, `burst_size` identical requests at
              once (they share a batch), each compared with the reference

Slots are fired without waiting for earlier answers (a slow server does not
slow the canary down), up to `max_in_flight` requests; a slot that would
exceed it is skipped and counted.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx

from sandbox.canary.ledger import ReferenceBook
from sandbox.canary.metrics import CanaryMetrics
from sandbox.canary.probes import ConsistencyProbe, Probe, accuracy_probes, consistency_probes
from services.model.tasks import check

SCHEDULE = ("accuracy", "alone", "accuracy", "alone", "accuracy", "burst")
SERVED_BY = "x-served-by"  # the ingress names the replica that answered
SERVED_VERSION = "x-served-version"  # and the deployment version it runs


@dataclass(frozen=True)
class ProberConfig:
    interval_s: float = 0.5  # one slot every interval: with SCHEDULE and burst_size 4, 3 requests/s
    burst_size: int = 4
    seed: int = 0
    timeout_s: float = 30.0
    max_in_flight: int = 32
    # False: steady probes from the start, no references first (a calibration's canary, whose load is what
    # matters: its comparisons are never scraped; each key's first answer becomes its reference)
    warm_up: bool = True

    def __post_init__(self):
        if not 0.01 <= self.interval_s <= 60:
            raise ValueError(f"interval_s must be in [0.01, 60], got {self.interval_s!r}")
        if not 2 <= self.burst_size <= 16:
            raise ValueError(f"burst_size must be in [2, 16], got {self.burst_size!r}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s!r}")
        if self.max_in_flight < self.burst_size:
            raise ValueError(f"max_in_flight must be >= burst_size, got {self.max_in_flight!r}")

    @property
    def requests_per_s(self) -> float:
        per_cycle = sum(self.burst_size if kind == "burst" else 1 for kind in SCHEDULE)
        return per_cycle / (len(SCHEDULE) * self.interval_s)


@dataclass(frozen=True)
class Answer:
    status: str  # HTTP status, or "error" when no response came
    text: str = ""
    replica: str | None = None
    version: str | None = None


async def ask(client: httpx.AsyncClient, probe: Probe, model: str) -> Answer:
    """One non-streamed completion; never raises (a failure is the answer's status)."""
    try:
        resp = await client.post("/v1/completions", json=probe.body(model))
        if resp.status_code != 200:
            return Answer(str(resp.status_code))
        return Answer("200", resp.json()["choices"][0]["text"], resp.headers.get(SERVED_BY),
                      resp.headers.get(SERVED_VERSION))
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        return Answer("error")


class CanaryProber:
    def __init__(self, api_url: str, model: str, metrics: CanaryMetrics | None = None,
                 config: ProberConfig | None = None, transport: httpx.AsyncBaseTransport | None = None):
        self.api_url, self.model = api_url.rstrip("/"), model
        self.metrics = metrics or CanaryMetrics()
        self.config = config or ProberConfig()
        self.transport = transport  # tests answer with httpx.MockTransport
        self.book = ReferenceBook()
        self._accuracy = accuracy_probes(self.config.seed)
        self._consistency = consistency_probes(self.config.seed)
        self._next = {"alone": 0, "burst": 0}
        self.slots = 0
        self.skipped = 0  # slots not sent: max_in_flight requests were already waiting
        self.in_flight = 0
        self.warmed_up = False

    async def run(self, stop: asyncio.Event | None = None, duration_s: float | None = None,
                  max_slots: int | None = None) -> None:
        """Probe until `stop` is set, `duration_s` has passed (warm-up included) or `max_slots` were used."""
        stop = stop or asyncio.Event()
        start = time.monotonic()

        def going() -> bool:
            return not stop.is_set() and (duration_s is None or time.monotonic() - start < duration_s) \
                and (max_slots is None or self.slots < max_slots)

        timeout = httpx.Timeout(self.config.timeout_s, connect=5.0)
        limits = httpx.Limits(max_connections=self.config.max_in_flight)
        async with httpx.AsyncClient(base_url=self.api_url, timeout=timeout, limits=limits,
                                     transport=self.transport) as client:
            if self.config.warm_up:
                await self.warm_up(client, stop)
            self.warmed_up = True
            pending: set[asyncio.Task] = set()
            next_at = time.monotonic()
            while going():
                kind = SCHEDULE[self.slots % len(SCHEDULE)]
                self.slots += 1
                size = self.config.burst_size if kind == "burst" else 1
                if self.in_flight + size <= self.config.max_in_flight:
                    self.in_flight += size
                    task = asyncio.create_task(self._slot(client, kind, size))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                else:
                    self.skipped += 1
                next_at = max(next_at + self.config.interval_s, time.monotonic())
                try:
                    await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))
                except TimeoutError:
                    pass
            if pending:  # let the last answers count, but not wait on a wedged server forever
                _, late = await asyncio.wait(pending, timeout=self.config.timeout_s)
                for task in late:
                    task.cancel()
                await asyncio.gather(*late, return_exceptions=True)

    async def warm_up(self, client: httpx.AsyncClient, stop: asyncio.Event) -> None:
        """Every consistency key once, alone and in turn: the references."""
        for probe in self._consistency:
            if stop.is_set():
                return
            await self._consistency_once(client, probe, "alone")
        self.warmed_up = True

    async def _slot(self, client: httpx.AsyncClient, kind: str, size: int) -> None:
        try:
            if kind == "accuracy":
                await self._accuracy_once(client)
                return
            probe = self._consistency[self._next[kind] % len(self._consistency)]
            self._next[kind] += 1
            await asyncio.gather(*(self._consistency_once(client, probe, kind) for _ in range(size)))
        finally:
            self.in_flight -= size

    async def _accuracy_once(self, client: httpx.AsyncClient) -> None:
        item = next(self._accuracy)
        answer = await ask(client, item.probe, self.model)
        self.metrics.request("accuracy", answer.status)
        if answer.status == "200":
            self.metrics.checked(item.task, item.length, check(item.example, answer.text))

    async def _consistency_once(self, client: httpx.AsyncClient, item: ConsistencyProbe, load: str) -> None:
        answer = await ask(client, item.probe, self.model)
        self.metrics.request("consistency", answer.status)
        if answer.status == "200":
            result = self.book.compare(item.key, answer.text, load, version=answer.version or "")
            if result is not None:
                self.metrics.compared(item.mode, load, answer.replica, result)
