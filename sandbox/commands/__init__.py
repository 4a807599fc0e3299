"""`sandbox` subcommands for the serving stack, registered on the one typer app in `sandbox.cli`."""
from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    from sandbox.commands import deploy, diagnose, drill, interview, query, replay, stack, traffic

    for module in (stack, traffic, query, deploy, drill, interview, diagnose, replay):
        module.register(app)
    diagnose.register_grade(app)
