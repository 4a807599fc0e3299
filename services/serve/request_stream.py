"""The outputs of one request as the engine thread hands them to its asyncio handler.

The engine thread posts ("accepted", prompt token count), ("output", RequestOutput) or
("error", exception) through `loop.call_soon_threadsafe`; the handler iterates the stream.
"""
from __future__ import annotations

import asyncio
import dataclasses

from services.engine.outputs import RequestOutput


class EngineDeadError(RuntimeError):
    """The engine loop crashed or was stopped; requests cannot be served."""


class EngineWedgedError(RuntimeError):
    """One engine step has run for longer than the wedge timeout."""



ACCEPTED, OUTPUT, ERROR = "accepted", "output", "error"


class RequestStream:
    """The outputs of one request, as an async iterator; consecutive deltas are merged."""

    def __init__(self, request_id: str, loop: asyncio.AbstractEventLoop):
        self.request_id = request_id
        self.loop = loop
        self._queue: asyncio.Queue = asyncio.Queue()
        self.finished = False

    def put(self, kind: str, value) -> None:  # on the event loop
        self._queue.put_nowait((kind, value))

    async def accepted(self) -> int:
        """Wait until the engine took the request; its prompt token count. Raises what add_request raised."""
        kind, value = await self._queue.get()
        if kind == ERROR:
            self.finished = True
            raise value
        assert kind == ACCEPTED, kind
        return value

    def __aiter__(self):
        return self

    async def __anext__(self) -> RequestOutput:
        if self.finished:
            raise StopAsyncIteration
        merged = self._take(await self._queue.get())
        while not self._queue.empty() and not merged.finished:
            out = self._take(self._queue.get_nowait())
            merged = dataclasses.replace(out, delta_text=merged.delta_text + out.delta_text,
                                         delta_token_ids=merged.delta_token_ids + out.delta_token_ids)
        self.finished = merged.finished
        return merged

    def _take(self, item) -> RequestOutput:
        kind, value = item
        if kind == ERROR:
            self.finished = True
            raise value
        return value
