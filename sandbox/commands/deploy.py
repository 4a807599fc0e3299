"""`sandbox deploy --set key=value`: a rolling update to a new version, or knobs applied in place."""
from __future__ import annotations

# Lazy imports: each command imports its work when it runs, so `sandbox --help` and every command
# start without loading what other commands need (the grader's plots, the engine, Ray's client).

import time

import typer

from sandbox.commands.common import config, console, fail, print_json, running_state


def deploy(
    assignments: list[str] = typer.Option([], "--set", help="key=value; repeatable (see below)"),
    version: str = typer.Option(None, "--version", help="the new version label (default: the next one)"),
    timeout: float = typer.Option(300.0, "--timeout", min=1, help="seconds to wait for the rollout"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
):
    """Deploy changed settings: engine.<field>=v or <field>=v (new version, rolling update),
    knobs.<max_num_seqs|max_num_batched_tokens|enable_prefix_caching|export_metrics>=v (in place),
    ingress.max_inflight_requests=N|null (the ingress's admission limit: 429s over it; in place),
    replicas=N, version=vN."""
    from services.stack.deployer import deploy_changes
    from services.stack.progress import Steps

    cfg = config()
    state = running_state(cfg)
    if not assignments and version is None:
        fail("nothing to deploy: give --set key=value (or --version)")
    t0 = time.perf_counter()
    try:
        report = deploy_changes(cfg, state, assignments, version, timeout, Steps(None if as_json else console))
    except (RuntimeError, ValueError) as e:
        fail(str(e))
    report["seconds"] = round(time.perf_counter() - t0, 2)
    if as_json:
        print_json(report)
    else:
        kind = "rolling update" if report["rolling"] else "in-place update"
        console.print(f"[bold green]deployed[/bold green] {report['version']} ({kind}, {report['seconds']}s): "
                      f"{', '.join(assignments) or 'version only'}")


def register(app: typer.Typer) -> None:
    app.command()(deploy)
