"""What every stack command needs: the config, the running stack's state, error exits."""
from __future__ import annotations

# Lazy imports: each command imports its work when it runs, so `sandbox --help` and every command
# start without loading what other commands need (the grader's plots, the engine, Ray's client).

import contextlib
import json
import os

import typer
from rich.console import Console

from services.stack.settings import SandboxConfig
from services.stack.state import NoStackError, StackState

class _Console(Console):
    """A console whose reader went away (a closed pipe, `tee` ended by the same Ctrl-C) goes quiet and the
    command goes on, its clean-up above all: rich's default ends the process with SystemExit(1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        with contextlib.suppress(OSError, ValueError):  # later writes, and the final flush, go nowhere
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.file.fileno())
            os.close(devnull)


console = _Console()
err_console = _Console(stderr=True)


def config() -> SandboxConfig:
    try:
        return SandboxConfig.from_env()
    except ValueError as e:
        fail(str(e))


def running_state(cfg: SandboxConfig) -> StackState:
    try:
        return StackState.load(cfg.state_file)
    except NoStackError as e:
        fail(str(e))


def fail(message: str, code: int = 1):
    err_console.print(f"[red]error:[/red] {message}", soft_wrap=True)  # paths and ids stay whole
    raise typer.Exit(code)


def print_json(data) -> None:
    with contextlib.suppress(BrokenPipeError):  # the reader is gone; what was done is in the run's files
        print(json.dumps(data, indent=None, default=str), flush=True)
