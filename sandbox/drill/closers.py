"""A drill's clean-up as a stack of closers: each resource registers its closer as it is acquired.

    closers.push("traffic", traffic.stop)   # right after traffic.start()
    ...
    problems = closers.close_all()          # newest first; every closer runs, whatever the others did

A closer either returns nothing, or a list of problems it met but got past (a revert that failed among
several); an exception it raises is recorded as "<what>: <Type>: <message>" and the next closer runs.
"""
from __future__ import annotations

from collections.abc import Callable

from sandbox.drill.interrupts import TeardownForced


class Closers:
    def __init__(self):
        self._closers: list[tuple[str, Callable[[], list[str] | None]]] = []

    def push(self, what: str, close: Callable[[], list[str] | None]) -> None:
        self._closers.append((what, close))

    def __len__(self) -> int:
        return len(self._closers)

    def close_all(self) -> list[str]:
        """Run every closer, newest first, once; the problems of all of them."""
        problems: list[str] = []
        while self._closers:
            what, close = self._closers.pop()
            try:
                problems += close() or []
            except TeardownForced:  # stop now: say what is left, this one included
                left = [what] + [name for name, _ in reversed(self._closers)]
                self._closers.clear()
                raise TeardownForced(left) from None
            except Exception as e:  # noqa: BLE001 - one failing closer must not keep the rest from running
                problems.append(f"{what}: {type(e).__name__}: {e}")
        return problems
