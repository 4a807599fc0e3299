"""Progress for steps that take more than a second: a spinner while it runs, a tick and its time after.

Output is a courtesy, never a reason to stop: when the terminal is gone (a closed pipe, a `tee` ended by
the same Ctrl-C, a dropped SSH session), the first write that fails turns the steps silent and the work
(a clean-up above all) goes on.
"""
from __future__ import annotations

import time
from contextlib import contextmanager

from rich.console import Console


class Steps:
    def __init__(self, console: Console | None = None):
        self.console = console  # None: silent (tests, --json)
        self.timings: dict[str, float] = {}

    def _out(self, write) -> None:
        """Run one write to the console; a dead output (EPIPE, EIO, a closed file) silences the rest."""
        if self.console is None:
            return
        try:
            write(self.console)
        except (OSError, ValueError, SystemExit):  # rich turns a broken pipe into SystemExit(1)
            self.console = None

    @contextmanager
    def step(self, title: str):
        t0 = time.perf_counter()
        status = []

        def start(console) -> None:
            status.append(console.status(title, spinner="dots"))
            status[0].start()

        self._out(start)
        ok = False
        try:
            yield self
            ok = True
        finally:
            if status:
                self._out(lambda c: status[0].stop())
            self._done(title, t0, ok)

    @contextmanager
    def bar(self, title: str, total: float):
        """A progress bar over `total` units (seconds of a sweep); yields advance(units, label)."""
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        t0 = time.perf_counter()
        bars = []

        def start(console) -> None:
            bars.append(Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[label]}"),
                                 TimeElapsedColumn(), console=console, transient=True))
            bars[0].start()
            bars.append(bars[0].add_task(title, total=total, label=""))

        def advance(units: float, label: str = "") -> None:
            if len(bars) == 2 and self.console is not None:
                self._out(lambda c: bars[0].update(bars[1], advance=units, label=label))

        self._out(start)
        ok = False
        try:
            yield advance
            ok = True
        finally:
            if bars:
                self._out(lambda c: bars[0].stop())
            self._done(title, t0, ok)

    def _done(self, title: str, t0: float, ok: bool) -> None:
        """A finished step: its time kept, and a tick (or a cross) with it."""
        elapsed = time.perf_counter() - t0
        self.timings[title] = round(elapsed, 2)
        mark = "[green]✓[/green]" if ok else "[red]✗[/red]"
        self._out(lambda c: c.print(f"{mark} {title} [dim]{elapsed:.1f}s[/dim]"))

    def note(self, text: str) -> None:
        self._out(lambda c: c.print(text))
