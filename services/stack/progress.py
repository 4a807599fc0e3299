"""Progress for steps that take more than a second: a spinner while it runs, a tick and its time after."""
from __future__ import annotations

import time
from contextlib import contextmanager

from rich.console import Console


class Steps:
    def __init__(self, console: Console | None = None):
        self.console = console  # None: silent (tests, --json)
        self.timings: dict[str, float] = {}

    @contextmanager
    def step(self, title: str):
        t0 = time.perf_counter()
        status = self.console.status(title, spinner="dots") if self.console else None
        ok = False
        try:
            if status:
                status.start()
            yield self
            ok = True
        finally:
            if status:
                status.stop()
            elapsed = time.perf_counter() - t0
            self.timings[title] = round(elapsed, 2)
            if self.console:
                mark = "[green]✓[/green]" if ok else "[red]✗[/red]"
                self.console.print(f"{mark} {title} [dim]{elapsed:.1f}s[/dim]")

    @contextmanager
    def bar(self, title: str, total: float):
        """A progress bar over `total` units (seconds of a sweep); yields advance(units, label)."""
        t0 = time.perf_counter()
        if not self.console:
            yield lambda units, label="": None
            self.timings[title] = round(time.perf_counter() - t0, 2)
            return
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        ok = False
        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[label]}"),
                      TimeElapsedColumn(), console=self.console, transient=True) as progress:
            task = progress.add_task(title, total=total, label="")
            try:
                yield lambda units, label="": progress.update(task, advance=units, label=label)
                ok = True
            finally:
                elapsed = time.perf_counter() - t0
                self.timings[title] = round(elapsed, 2)
        mark = "[green]✓[/green]" if ok else "[red]✗[/red]"
        self.console.print(f"{mark} {title} [dim]{elapsed:.1f}s[/dim]")

    def note(self, text: str) -> None:
        if self.console:
            self.console.print(text)
