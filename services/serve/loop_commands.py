"""What the event loop asks of the engine thread: one frozen dataclass per command.

Handlers post these on EngineLoop's command queue and return; the engine thread
runs them in order, between two steps. A command that carries a `future` (Call,
Rebuild) is answered through it; the others are answered through the request's
stream, or not at all.
"""
from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass

from services.engine.sampling_params import SamplingParams
from services.serve.request_stream import RequestStream


@dataclass(frozen=True)
class AddRequest:
    stream: RequestStream  # carries the request_id, and the event loop its outputs go back to
    prompt: str | list[int]  # text, or token ids already encoded
    params: SamplingParams
    arrival_time: float  # time.monotonic() when the handler posted it: time spent queued counts as waiting


@dataclass(frozen=True)
class AbortRequest:
    request_id: str  # running, held during a rebuild, or already gone (then it does nothing)


@dataclass(frozen=True)
class Call:
    fn: Callable  # fn(engine) -> result, run on the engine thread
    future: concurrent.futures.Future  # fn's result, or the exception it raised


@dataclass(frozen=True)
class Rebuild:
    build: Callable  # () -> engine, called on the engine thread once the old engine is idle and released
    restore: Callable  # () -> engine: the old configuration again, if build() failed
    future: concurrent.futures.Future  # None once the new engine runs; build()'s exception if it was restored
    deadline: float  # time.monotonic(); running requests still unfinished then are failed, so the rebuild happens


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Fail:
    error: Exception  # raised on the engine thread: the loop dies, as after a failed step, and fails every request


Command = AddRequest | AbortRequest | Call | Rebuild | Stop | Fail
