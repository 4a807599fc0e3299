"""`sandbox query 'PROMQL'`: ask the sandbox's Prometheus, get a table (or JSON)."""
from __future__ import annotations

# Lazy imports: each command imports its work when it runs, so `sandbox --help` and every command
# start without loading what other commands need (the grader's plots, the engine, Ray's client).

import time

import typer
from rich.table import Table

from sandbox.commands.common import config, console, fail, print_json, running_state


def _series(metric: dict) -> str:
    name = metric.get("__name__", "")
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    return f"{name}{{{labels}}}" if labels else (name or "{}")


def query(
    promql: str = typer.Argument(..., help="a PromQL expression"),
    range_s: float = typer.Option(None, "--range", min=1, help="a range query over the last N seconds"),
    step_s: float = typer.Option(5.0, "--step", min=0.1, help="resolution of a range query, seconds"),
    as_json: bool = typer.Option(False, "--json", help="print Prometheus' result as JSON"),
):
    """Run a PromQL query against the sandbox's Prometheus (or, while `sandbox replay` serves, the recording's)."""
    from sandbox.commands.replay import active_replay
    from services.stack.prometheus import PrometheusClient, PrometheusError

    cfg = config()
    replay = active_replay(cfg)  # a replay serves recorded data: its clock is the recording's
    url, now = (replay["prometheus_url"], replay["at"]) if replay else (running_state(cfg).prometheus_url, None)
    client = PrometheusClient(url)
    try:
        if range_s:
            end = now or time.time()
            rows = client.query_range(promql, end - range_s, end, step_s)
        else:
            rows = client.query(promql, at=now)
    except PrometheusError as e:
        fail(str(e))
    finally:
        client.close()
    if as_json:
        print_json(rows)
        return
    if not rows:
        console.print("[dim]no series[/dim]")
        return
    if range_s:
        table = Table("series", "points", "first", "last", "min", "max")
        for r in rows:
            vals = [float(v) for _, v in r["values"]]
            table.add_row(_series(r["metric"]), str(len(vals)), f"{vals[0]:.6g}", f"{vals[-1]:.6g}",
                          f"{min(vals):.6g}", f"{max(vals):.6g}")
    else:
        table = Table("series", "value")
        for r in rows:
            table.add_row(_series(r["metric"]), f"{float(r['value'][1]):.6g}")
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command()(query)
