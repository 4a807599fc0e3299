"""What every stack command needs: the config, the running stack's state, error exits."""
from __future__ import annotations

# Lazy imports: each command imports its work when it runs, so `sandbox --help` and every command
# start without loading what other commands need (the grader's plots, the engine, Ray's client).

import json

import typer
from rich.console import Console

from services.stack.settings import SandboxConfig
from services.stack.state import NoStackError, StackState

console = Console()
err_console = Console(stderr=True)


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
    print(json.dumps(data, indent=None, default=str))
