"""`sandbox traffic`: open-loop traffic through the API, with a live and a final summary."""
from __future__ import annotations

# Lazy imports: each command imports its work when it runs, so `sandbox --help` and every command
# start without loading what other commands need (the grader's plots, the engine, Ray's client).

import asyncio

import typer
from rich.live import Live
from rich.table import Table

from sandbox.commands.common import config, console, fail, print_json, running_state

# The server's view after a run, from Prometheus (what an on-call engineer would look at first).
SERVER_VIEW = (
    ("requests finished /s (last 1m)", "sum(rate(vllm:request_success_total[1m]))"),
    ("generation tokens /s (last 1m)", "sum(rate(vllm:generation_tokens_total[1m]))"),
    ("p50 TTFT (s)", "histogram_quantile(0.5, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[1m])))"),
    ("p99 TTFT (s)", "histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[1m])))"),
    ("p50 ITL (s)", "histogram_quantile(0.5, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket[1m])))"),
    ("p50 queue time (s)",
     "histogram_quantile(0.5, sum by (le) (rate(vllm:request_queue_time_seconds_bucket[1m])))"),
    ("prefix cache hit rate",
     "sum(rate(vllm:prefix_cache_hits_total[1m])) / sum(rate(vllm:prefix_cache_queries_total[1m]))"),
    ("max KV cache usage", "max(max_over_time(vllm:kv_cache_usage_perc[1m]))"),
)


def _table(summary: dict, title: str) -> Table:
    table = Table(title=title, show_header=True)
    for col in ("sent", "ok", "in flight", "errors", "req/s", "out tok/s", "TTFT p50/p99 ms", "e2e p50/p99 ms"):
        table.add_column(col)
    errors = sum(n for s, n in summary["statuses"].items() if s != "200")
    t, e = summary["ttft_ms"], summary["e2e_ms"]
    table.add_row(str(summary["sent"]), str(summary["ok"]), str(summary["in_flight"]), str(errors),
                  str(summary["request_rate"]), str(summary["output_tokens_per_s"]),
                  f"{t['p50']} / {t['p99']}", f"{e['p50']} / {e['p99']}")
    return table


async def _run_live(state, profile, rate, duration, seed, exporter, live: Live | None):
    from sandbox.traffic.generator import TrafficStats, run_traffic

    stats = TrafficStats()
    job = asyncio.create_task(run_traffic(state.api_url, state.model_name, profile, rate, duration, seed,
                                          exporter, stats))
    while not job.done():
        await asyncio.wait([job], timeout=1.0)
        if live is not None:
            live.update(_table(stats.summary(), f"traffic: {profile.name} at {rate}/s"))
    return job.result()


def traffic_session(cfg, state, rate: float, duration: float, profile_name: str, seed: int, as_json: bool) -> dict:
    from incidents.profiles import get_profile
    from sandbox.traffic.exporter import TrafficExporter

    try:
        profile = get_profile(profile_name)
    except ValueError as e:
        fail(str(e))
    exporter = TrafficExporter(profile.name, cfg.host, cfg.traffic_port, state.targets_dir,
                               linger_s=2 * cfg.scrape_interval_s + 0.5)
    try:
        if as_json:
            stats = asyncio.run(_run_live(state, profile, rate, duration, seed, exporter, None))
        else:
            with Live(console=console, refresh_per_second=2, transient=True) as live:
                stats = asyncio.run(_run_live(state, profile, rate, duration, seed, exporter, live))
    finally:
        exporter.close()
    summary = {"profile": profile.name, "rate": rate, "duration_s": duration, **stats.summary()}
    errors = [r.error for r in stats.results if r.status != "200"][:5]
    if errors:
        summary["sample_errors"] = errors
    if as_json:
        print_json(summary)
    else:
        console.print(_table(summary, f"traffic done: {profile.name} at {rate}/s for {duration}s"))
        for err in errors:
            console.print(f"[red]error sample:[/red] {err}")
    return summary


def show_server_view(state) -> None:
    from services.stack.prometheus import PrometheusClient, PrometheusError

    client = PrometheusClient(state.prometheus_url)
    table = Table("server-side, from Prometheus", "value", "PromQL", title="what the metrics say")
    try:
        for label, promql in SERVER_VIEW:
            try:
                rows = client.query(promql)
                value = f"{float(rows[0]['value'][1]):.4g}" if rows else "—"
            except PrometheusError as e:
                value = f"error: {e}"
            table.add_row(label, value, promql)
    finally:
        client.close()
    console.print(table)


def traffic(
    rate: float = typer.Option(2.0, "--rate", min=0.01, help="requests per second (Poisson arrivals)"),
    duration: float = typer.Option(30.0, "--duration", min=0.1, help="seconds of arrivals"),
    profile: str = typer.Option("default", "--profile",
                                help="default | shared-prefix | long-prompts | short"),
    seed: int = typer.Option(0, "--seed", help="seeds arrivals and prompts"),
    as_json: bool = typer.Option(False, "--json", help="print the final summary as JSON"),
):
    """Open-loop Poisson traffic through the OpenAI API; client-side metrics go to Prometheus too."""
    cfg = config()
    state = running_state(cfg)
    summary = traffic_session(cfg, state, rate, duration, profile, seed, as_json)
    if summary["ok"] == 0:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(traffic)
