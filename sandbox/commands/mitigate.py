"""`sandbox mitigate ACTION`: one remediation of the taxonomy, applied to the running stack."""
from __future__ import annotations

# Lazy imports: each command imports its work when it runs, so `sandbox --help` and every command
# start without loading what other commands need (the grader's plots, the engine, Ray's client).
import typer

from sandbox.commands.common import config, console, fail, print_json, running_state


def _actions_help() -> str:
    from sandbox.mitigation.catalogue import ACTIONS

    return "\n\n".join(f"{a.id}: {a.help}" for a in ACTIONS.values())


def mitigate(
    action: str = typer.Argument(..., help="a remediation id (listed below; `sandbox taxonomy` describes each)"),
    replica: str = typer.Option(None, "--replica", help="the replica to act on (its id: the metrics' `replica` label)"),
    version: str = typer.Option(None, "--version", help="rollback-deploy: the version to go back to"),
    limit: int = typer.Option(None, "--limit", help="shed-load: requests admitted at once"),
    timeout: float = typer.Option(300.0, "--timeout", min=1, help="seconds to wait for the change to land"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
):
    """Apply one remediation to the running stack: a real operation (a rolling deploy, a replica replaced,
    an admission limit), refused with exit code 2 and nothing changed when it does not fit the stack."""
    import time

    from sandbox.mitigation.actions import NoRoom, Refused, check_options
    from sandbox.mitigation.actions import mitigate as apply
    from services.stack.progress import Steps

    try:  # before the stack is looked for: a bad action is refused the same with a stack or without
        check_options(action, replica, version, limit)
    except Refused as e:
        fail(str(e), code=2)
    cfg = config()
    state = running_state(cfg)
    started = time.time()
    try:
        report = apply(action, cfg, state, replica=replica, version=version, limit=limit,
                       steps=Steps(None if as_json else console), timeout_s=timeout, baseline=_drill_baseline(cfg))
    except Refused as e:
        fail(str(e), code=2)
    except NoRoom as e:
        _tell_the_drill_refused(cfg, action, started, str(e))
        fail(str(e))
    except (RuntimeError, ValueError, OSError) as e:
        fail(f"{action}: {e}")
    _tell_the_drill(cfg, report, replica, version)
    if as_json:
        print_json(report)
    else:
        done = {k: v for k, v in report.items() if k not in ("action", "started", "seconds")}
        console.print(f"[bold green]{action}[/bold green] ({report['seconds']}s): "
                      + ", ".join(f"{k} {v}" for k, v in done.items()))


def _drill_baseline(cfg):
    """The config a running drill's healthy baseline served on (its marker says), or None outside a drill."""
    from pathlib import Path

    from sandbox.drill.record import running_drill

    info = running_drill(cfg.home) or {}
    path = info.get("baseline_config")
    return Path(path) if path and Path(path).is_file() else None


def _drill_record(cfg):
    """The RunRecord of the drill running on this stack (its marker says), or None outside a drill."""
    from pathlib import Path

    from sandbox.drill.record import RunRecord, running_drill

    info = running_drill(cfg.home)
    return RunRecord.open(Path(info["run_dir"]), cfg.keys_dir) if info is not None else None


def _tell_the_drill(cfg, report: dict, replica: str | None, version: str | None) -> None:
    """A drill running on this stack records the action, and its oracle judges what it did."""
    from sandbox.mitigation.watch import record_action

    if (record := _drill_record(cfg)) is not None:
        record_action(record, report, replica, version)


def _tell_the_drill_refused(cfg, action: str, started: float, reason: str) -> None:
    """A drill running on this stack records the attempt the machine had no room for (the grader credits it where
    the key lists it); nothing changed, so its oracle has nothing to judge."""
    from sandbox.mitigation.watch import record_refusal

    if (record := _drill_record(cfg)) is not None:
        record_refusal(record, action, started, reason)


def register(app: typer.Typer) -> None:
    app.command(epilog="Actions:\n\n" + _actions_help())(mitigate)
