"""`sandbox` subcommands for the serving stack, registered on the one typer app in `sandbox.cli`."""
from __future__ import annotations

# Lazy imports: each command imports its work when it runs, so `sandbox --help` and every command
# start without loading what other commands need (the grader's plots, the engine, Ray's client).

import typer


def register(app: typer.Typer) -> None:
    from sandbox.commands import calibrate, deploy, diagnose, drill, interview, mitigate, query, replay, stack, \
        traffic

    for module in (stack, traffic, calibrate, query, deploy, mitigate, drill, interview, diagnose, replay):
        module.register(app)
    diagnose.register_grade(app)
