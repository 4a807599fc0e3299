"""What every stack command needs: the config, the running stack's state, error exits."""
from __future__ import annotations

import json

import typer
from rich.console import Console

from sandbox.settings import SandboxConfig
from sandbox.state import NoStackError, StackState

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
