# Over 300 lines: what is left all reads or writes the engine thread's own state (the command queue,
# the streams, held requests, the pending rebuild); split, that state would be passed around.
"""One engine, stepped by one thread; asyncio request handlers join its running batch.

    handler ──add/abort/call──▶ command queue ──▶ engine thread: drain, step(), deliver
    handler ◀── RequestStream (asyncio.Queue) ◀── call_soon_threadsafe(batch of outputs)

The engine is single-threaded, so every engine call (add, abort, step, knob
changes, stats) runs on the engine thread; handlers only post commands. A
request that arrives while a step runs is added before the next one: that is
continuous batching across HTTP requests. Any exception from `step()` is
fatal (the engine's state is no longer trusted): every open stream gets
`EngineDeadError` and `check_health` fails, so Ray Serve replaces the replica.

`rebuild()` replaces the engine in place (a new EngineConfig on a live replica):
new requests are held, the running batch finishes, the engine is rebuilt on the
engine thread, and the held requests join the new engine. Counters carry over,
so the exported totals never go back.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import queue
import threading
import time
from collections import defaultdict, deque

from services.engine.outputs import RequestOutput
from services.engine.stats import ENGINE_COUNTERS, EngineSnapshot
from services.serve.cgroup_cpu import CpuStatCounter
from services.serve.loop_commands import AbortRequest, AddRequest, Call, Command, Fail, Rebuild, Stop
from services.serve.request_stream import ACCEPTED, ERROR, OUTPUT, EngineDeadError, EngineWedgedError, RequestStream


class EngineLoop:
    def __init__(self, engine, metrics=None, *, torch_threads: int | None = 1, publish_interval_s: float = 0.5,
                 wedge_timeout_s: float = 30.0):
        self.engine = engine
        self.metrics = metrics  # a ServingMetrics, or None to record nothing
        self.export_metrics = metrics is not None
        self.publish_interval_s = publish_interval_s
        self.wedge_timeout_s = wedge_timeout_s
        self._torch_threads = torch_threads
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._streams: dict[str, RequestStream] = {}  # engine thread only
        self._first_token_seen: set[str] = set()
        self._last_token_time: dict[str, float] = {}
        self._step_started: float | None = None
        self._stalled_since: float | None = None  # requests wait but no step can schedule any of them
        self._fatal: BaseException | None = None
        self._stopping = False
        self.last_snapshot = EngineSnapshot()
        self._last_publish = 0.0
        self._cpu = CpuStatCounter()
        self._rebuild: Rebuild | None = None
        self._held: deque[AddRequest] = deque()  # requests that arrived during a rebuild
        self._carried = EngineSnapshot()  # counters of engines replaced by rebuild()
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)

    def start(self) -> EngineLoop:
        self._thread.start()
        return self

    # -- called from the event loop (any thread) -------------------------------
    def add_request(self, request_id: str, prompt, params) -> RequestStream:
        stream = RequestStream(request_id, asyncio.get_running_loop())
        self._raise_if_dead()
        self._commands.put(AddRequest(stream, prompt, params, time.monotonic()))
        if self._fatal is not None or not self._thread.is_alive():  # died while we posted
            stream.put(ERROR, EngineDeadError("engine loop is not running"))
        return stream

    def abort(self, request_id: str) -> None:
        self._commands.put(AbortRequest(request_id))

    def call(self, fn, timeout_s: float = 30.0):
        """Run fn(engine) on the engine thread between two steps; return its result."""
        self._raise_if_dead()
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._commands.put(Call(fn, future))
        return future.result(timeout=timeout_s)

    def rebuild(self, build, restore, drain_timeout_s: float = 60.0, timeout_s: float = 300.0) -> None:
        """Replace the engine with build(), between requests; on failure restore() the old one and raise.

        New requests wait while the running ones finish (those still running after
        drain_timeout_s fail with EngineDeadError); both callables run on the engine
        thread after the old engine is released (its device memory freed).
        """
        self._raise_if_dead()
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._commands.put(Rebuild(build, restore, future, time.monotonic() + drain_timeout_s))
        future.result(timeout=timeout_s)

    def check_health(self) -> None:
        self._raise_if_dead()
        started = self._step_started
        if started is not None and time.monotonic() - started > self.wedge_timeout_s:
            raise EngineWedgedError(f"engine step running for {time.monotonic() - started:.1f}s "
                                    f"(wedge timeout {self.wedge_timeout_s}s)")
        stalled = self._stalled_since
        if stalled is not None and time.monotonic() - stalled > self.wedge_timeout_s:
            error = EngineWedgedError(f"no request could be scheduled for {time.monotonic() - stalled:.1f}s "
                                      f"(wedge timeout {self.wedge_timeout_s}s)")
            # Its requests would wait forever (and a graceful stop with them): fail them now.
            self._commands.put(Fail(error))
            raise error

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping = True
        self._commands.put(Stop())
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _raise_if_dead(self) -> None:
        if self._fatal is not None:
            raise EngineDeadError(f"engine loop crashed: {self._fatal!r}")
        if self._stopping or not self._thread.is_alive():
            raise EngineDeadError("engine loop is not running")

    # -- the engine thread --------------------------------------------------
    def _run(self) -> None:
        if self._torch_threads:
            import torch  # OpenMP thread counts are per thread: set them on the thread that steps

            torch.set_num_threads(self._torch_threads)
        idle = False
        try:
            while not self._stopping:
                self._handle_commands(block=(idle or not self.engine.has_unfinished_requests())
                                      and self._rebuild is None)
                if self._stopping:
                    break
                if self._rebuild is not None and self._drained():
                    self._swap_engine()
                idle = False
                if self.engine.has_unfinished_requests():
                    self._step_started = time.monotonic()
                    steps = self.engine.stats.num_steps_total
                    outputs = self.engine.step()
                    self._step_started = None
                    self._deliver_outputs(outputs)
                    if self.engine.stats.num_steps_total != steps or not self.engine.has_unfinished_requests():
                        self._stalled_since = None
                    else:  # nothing fits in the KV cache: only an abort or a finish can free blocks
                        idle = True
                        if self._stalled_since is None:
                            self._stalled_since = time.monotonic()
                if time.monotonic() - self._last_publish >= self.publish_interval_s:
                    self._publish()
        except BaseException as e:  # noqa: BLE001 - any failure kills the loop, and is reported
            self._fatal = e
            self._fail_all(EngineDeadError(f"engine failed: {type(e).__name__}: {e}"))
            return
        self._fail_all(EngineDeadError("engine loop stopped"))

    def _handle_commands(self, block: bool) -> None:
        try:
            cmd = self._commands.get(timeout=self.publish_interval_s) if block else self._commands.get_nowait()
        except queue.Empty:
            return
        pending: dict[asyncio.AbstractEventLoop, list] = defaultdict(list)
        while True:
            self._handle(cmd, pending)
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                break
        self._send(pending)

    def _handle(self, cmd: Command, pending) -> None:
        if isinstance(cmd, AddRequest) and self._rebuild is not None:
            self._held.append(cmd)
        elif isinstance(cmd, AddRequest):
            stream = cmd.stream
            try:
                self.engine.add_request(stream.request_id, cmd.prompt, cmd.params, arrival_time=cmd.arrival_time)
            except Exception as e:  # noqa: BLE001 - a bad request fails alone
                pending[stream.loop].append((stream, ERROR, e))
                return
            self._streams[stream.request_id] = stream
            n_prompt = len(self.engine.scheduler.requests[stream.request_id].prompt_token_ids)
            pending[stream.loop].append((stream, ACCEPTED, n_prompt))
        elif isinstance(cmd, AbortRequest):
            if cmd.request_id in self._streams:
                self.engine.abort_request(cmd.request_id)
            else:  # a held request whose caller went away
                self._held = deque(held for held in self._held if held.stream.request_id != cmd.request_id)
        elif isinstance(cmd, Call):
            try:
                cmd.future.set_result(cmd.fn(self.engine))
            except Exception as e:  # noqa: BLE001 - handed back to the caller
                cmd.future.set_exception(e)
        elif isinstance(cmd, Rebuild):
            if self._rebuild is not None:
                cmd.future.set_exception(RuntimeError("an engine rebuild is already in progress"))
            else:
                self._rebuild = cmd
        elif isinstance(cmd, Stop):
            self._stopping = True
        elif isinstance(cmd, Fail):  # declared stalled: the loop dies and its requests fail, as after a crash
            raise cmd.error

    # -- rebuild ----------------------------------------------------------------
    def _drained(self) -> bool:
        if not self.engine.has_unfinished_requests():
            return True
        if time.monotonic() < self._rebuild.deadline:
            return False
        error = EngineDeadError("the request was interrupted; retry it")
        pending: dict[asyncio.AbstractEventLoop, list] = defaultdict(list)
        for stream in self._streams.values():
            pending[stream.loop].append((stream, ERROR, error))
        self._send(pending)
        self.engine.abort_request(list(self._streams))
        for out in self.engine.step():  # the aborted requests' last outputs: counted as aborts
            self._finish(out)
        self._streams.clear()
        return not self.engine.has_unfinished_requests()

    def _swap_engine(self) -> None:
        job, self._rebuild = self._rebuild, None
        self._publish()  # the old engine's final counts
        self._carried = self._engine_counters(self.last_snapshot)
        self.engine = None  # release the old engine (its KV pool) before building the next one
        try:
            self.engine = job.build()
        except Exception as e:  # noqa: BLE001 - the old configuration comes back and the caller is told
            try:
                self.engine = job.restore()
            except BaseException as fatal:  # no engine at all: the loop dies, as after a failed step
                job.future.set_exception(fatal)
                raise
            job.future.set_exception(e)
        else:
            job.future.set_result(None)
        pending: dict[asyncio.AbstractEventLoop, list] = defaultdict(list)
        while self._held:
            self._handle(self._held.popleft(), pending)
        self._send(pending)

    def _deliver_outputs(self, outputs: list[RequestOutput]) -> None:
        pending: dict[asyncio.AbstractEventLoop, list] = defaultdict(list)
        intervals = []
        for out in outputs:
            stream = self._streams.get(out.request_id)
            if stream is None:
                continue
            m = out.metrics
            if out.delta_token_ids and m.last_token_time is not None:
                if out.request_id not in self._first_token_seen:
                    self._first_token_seen.add(out.request_id)
                    if self.export_metrics and m.first_token_time is not None:
                        self.metrics.observe_first_token(m.first_token_time - m.arrival_time)
                elif out.request_id in self._last_token_time:
                    intervals.append(m.last_token_time - self._last_token_time[out.request_id])
                self._last_token_time[out.request_id] = m.last_token_time
            if out.finished:
                self._finish(out)
            pending[stream.loop].append((stream, OUTPUT, out))
        if self.export_metrics and intervals:
            self.metrics.observe_token_intervals(intervals)
        self._send(pending)

    def _finish(self, out: RequestOutput) -> None:
        rid = out.request_id
        self._streams.pop(rid, None)
        self._first_token_seen.discard(rid)
        self._last_token_time.pop(rid, None)
        if self.export_metrics:
            completion = out.outputs[0]
            self.metrics.observe_request(out.metrics, len(out.prompt_token_ids), len(completion.token_ids),
                                         completion.finish_reason or "abort")

    @staticmethod
    def _send(pending) -> None:
        for loop, items in pending.items():
            try:
                loop.call_soon_threadsafe(_put_all, items)
            except RuntimeError:
                pass  # that event loop is closed: its requests are gone

    @staticmethod
    def _engine_counters(snap: EngineSnapshot) -> EngineSnapshot:
        return EngineSnapshot(**{name: getattr(snap, name) for name in ENGINE_COUNTERS})

    def _publish(self) -> None:
        cpu = self._cpu.read()
        snap = dataclasses.replace(self.engine.snapshot(), cpu_seconds=time.process_time(), cpu_periods=cpu.periods,
                                   cpu_periods_throttled=cpu.throttled_periods,
                                   cpu_throttled_seconds=cpu.throttled_seconds)
        for name in ENGINE_COUNTERS:
            setattr(snap, name, getattr(snap, name) + getattr(self._carried, name))
        self.engine.stats.iteration_tokens.clear()  # drained whether or not metrics are exported
        if self.export_metrics:
            self.metrics.publish(snap)
        self.last_snapshot = snap
        self._last_publish = time.monotonic()

    def _fail_all(self, error: Exception) -> None:
        pending: dict[asyncio.AbstractEventLoop, list] = defaultdict(list)
        for stream in self._streams.values():
            pending[stream.loop].append((stream, ERROR, error))
        self._streams.clear()
        while True:  # requests still queued as commands
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                break
            if isinstance(cmd, AddRequest):
                pending[cmd.stream.loop].append((cmd.stream, ERROR, error))
            elif isinstance(cmd, (Call, Rebuild)):
                cmd.future.set_exception(error)
            # an AbortRequest, Stop or Fail left has nothing to answer
        for held in self._held:
            pending[held.stream.loop].append((held.stream, ERROR, error))
        self._held.clear()
        if self._rebuild is not None:
            self._rebuild.future.set_exception(error)
            self._rebuild = None
        self._send(pending)


def _put_all(items) -> None:
    for stream, kind, value in items:
        stream.put(kind, value)
