"""`sandbox grafana push` and `sandbox grafana annotate`: the dashboards in a user's Grafana, a graded run on them.

Grafana is named by --url (or SANDBOX_GRAFANA_URL) with a service-account token (--token,
SANDBOX_GRAFANA_TOKEN) or a user and password. Bad options exit 2 before anything is sent; a
Grafana that is unreachable or refuses exits 1 with the status and Grafana's message.
"""
from __future__ import annotations

# Lazy imports: each command imports its work when it runs, so `sandbox --help` and every command
# start without loading what other commands need (the grader's plots, the engine, Ray's client).

import os
import time
from pathlib import Path

import typer
from rich.markup import escape

from sandbox.commands.common import config, console, err_console, fail, print_json

app = typer.Typer(help="Grafana: upload the dashboards and datasource; annotate graded runs.", no_args_is_help=True)

URL = typer.Option(None, "--url", help="Grafana's root URL (default: $SANDBOX_GRAFANA_URL)")
TOKEN = typer.Option(None, "--token", help="service-account token (default: $SANDBOX_GRAFANA_TOKEN)")
USER = typer.Option(None, "--user", help="basic-auth user (default: $SANDBOX_GRAFANA_USER)")
PASSWORD = typer.Option(None, "--password", help="basic-auth password (default: $SANDBOX_GRAFANA_PASSWORD)")
AS_JSON = typer.Option(False, "--json", help="one JSON object")


def _target(url, token, user, password):
    from sandbox.grafana.target import ENV_PREFIX, GrafanaTarget

    env = os.environ
    url = url or env.get(ENV_PREFIX + "URL")
    if not url:
        fail("no Grafana named: give --url URL (or set SANDBOX_GRAFANA_URL)", code=2)
    explicit = token or user or password
    try:
        return GrafanaTarget(url, token=token if explicit else env.get(ENV_PREFIX + "TOKEN") or None,
                             user=user if explicit else env.get(ENV_PREFIX + "USER") or None,
                             password=password if explicit else env.get(ENV_PREFIX + "PASSWORD") or None)
    except ValueError as e:
        fail(escape(str(e)), code=2)


def _prometheus_url(cfg) -> str:
    from services.stack.state import NoStackError, StackState

    try:
        return StackState.load(cfg.state_file).prometheus_url or cfg.url(cfg.prometheus_port)
    except NoStackError:
        return cfg.url(cfg.prometheus_port)


@app.command()
def push(url: str = URL, token: str = TOKEN, user: str = USER, password: str = PASSWORD,
         prometheus_url: str = typer.Option(None, "--prometheus-url",
                                            help="the URL Grafana reaches Prometheus at (default: this sandbox's)"),
         as_json: bool = AS_JSON):
    """Upload the Prometheus datasource and the four dashboards (into the folder "LLM serving")."""
    from sandbox.grafana.push import push as push_all
    from sandbox.grafana.target import GrafanaError

    target = _target(url, token, user, password)
    cfg = config()
    try:
        report = push_all(target, prometheus_url or _prometheus_url(cfg))
    except GrafanaError as e:
        fail(escape(str(e)))
    except ValueError as e:
        fail(escape(str(e)), code=2)
    if as_json:
        print_json(report.to_dict())
        return
    console.print(f"datasource {report.datasource}, folder {report.folder}")
    for d in report.dashboards:
        console.print(f"  {d['title']:<24} {target.url.rstrip('/')}{d['url'] or ''}")


@app.command()
def annotate(run: str = typer.Argument(..., help="a run id (under runs/) or a run directory"),
             url: str = URL, token: str = TOKEN, user: str = USER, password: str = PASSWORD,
             as_json: bool = AS_JSON):
    """Annotate a graded run on the dashboards: incident window, deploys, page, diagnosis."""
    from sandbox.grafana.annotations import annotate_run
    from sandbox.grafana.target import GrafanaError

    target = _target(url, token, user, password)
    cfg = config()
    run_dir = Path(run) if Path(run).is_dir() else cfg.runs / run
    if not (run_dir / "run.json").is_file():
        fail(f"{run}: not a drill run (no run.json under {run_dir})", code=2)
    try:
        result = annotate_run(target, run_dir, cfg.keys_dir / f"{run_dir.name}.key")
    except GrafanaError as e:
        fail(escape(str(e)))
    except (ValueError, FileNotFoundError) as e:
        fail(escape(str(e)), code=2)
    if as_json:
        print_json(result)
    else:
        console.print(f"run {result['run']}: {result['annotations']} annotations on each dashboard "
                      f"({', '.join(result['kinds'])})")


def annotate_after_drill(cfg, run_dir: Path, drill_pid: int, graded_at: float, wait_s: float = 300.0) -> None:
    """After a counted grade: wait for the drill to end, then annotate, if SANDBOX_GRAFANA_URL is set.

    Never while the drill runs. A failure here is a warning: the grade stands.
    """
    from sandbox.grafana.annotations import annotate_run
    from sandbox.grafana.target import GrafanaError, GrafanaTarget
    from services.stack.state import pid_alive

    try:
        target = GrafanaTarget.from_env()
    except ValueError as e:
        err_console.print(f"[yellow]Grafana annotations skipped:[/yellow] {escape(str(e))}")
        return
    if target is None:
        return
    deadline = time.monotonic() + wait_s
    while pid_alive(drill_pid):
        if time.monotonic() > deadline:
            err_console.print(f"[yellow]the drill is still ending; annotate later:[/yellow] "
                              f"sandbox grafana annotate {run_dir.name}")
            return
        time.sleep(0.5)
    try:
        result = annotate_run(target, run_dir, cfg.keys_dir / f"{run_dir.name}.key", graded_at)
    except (GrafanaError, ValueError, FileNotFoundError) as e:
        err_console.print(f"[yellow]Grafana annotations failed:[/yellow] {escape(str(e))}")
        return
    err_console.print(f"Grafana: {result['annotations']} annotations of run {result['run']} on each dashboard")


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="grafana")
