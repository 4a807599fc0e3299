"""`sandbox up`, `down`, `status`, and `run` (up, traffic, a look at the metrics, down)."""
from __future__ import annotations

# Lazy imports: each command imports its work when it runs, so `sandbox --help` and every command
# start without loading what other commands need (the grader's plots, the engine, Ray's client).

import time

import typer
from rich.table import Table

from sandbox.commands.common import config, console, fail, print_json, running_state
from services.stack.compose_backend import BACKEND_HELP, Backend


def _urls(state) -> dict:
    return {"api": f"{state.api_url}/v1", "prometheus": state.prometheus_url, "ray_dashboard": state.dashboard_url}


def up(
    replicas: int = typer.Option(None, "--replicas", min=1, help="LLMServer replicas (default: the Serve config's)"),
    address: str = typer.Option(None, "--address", help="join this Ray cluster instead of starting a local head"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    backend: Backend = typer.Option("local", "--backend", help=BACKEND_HELP),  # noqa: B008
):
    """Start Ray, deploy the Serve app, start Prometheus; wait until every target is scraped."""
    from services.stack.compose_backend import ComposeBackend, ComposeUnavailable
    from services.stack.progress import Steps
    from services.stack.ports import PortTaken
    from services.stack.stack import Stack, StackRunningError

    cfg = config()
    if backend is Backend.compose and address is not None:
        fail("--address joins a running Ray cluster: it goes with --backend local", code=2)
    t0 = time.perf_counter()
    steps = Steps(None if as_json else console)
    try:
        if backend is Backend.compose:
            state = ComposeBackend(cfg, steps).up(replicas)
        else:
            from sandbox.drill.leftovers import stop_killed_drill

            if (left := stop_killed_drill(cfg, steps)) is not None:  # `up` would find its stack, faults and all
                steps.note(f"an earlier drill ended without its clean-up: stopped what it left "
                           f"({', '.join(left['stopped']) or 'nothing running'})")
            state = Stack(cfg, steps).up(replicas, address)
    except ComposeUnavailable as e:
        fail(str(e), code=2)
    except (StackRunningError, PortTaken) as e:
        fail(str(e))
    except (RuntimeError, ValueError, OSError) as e:
        fail(f"{e}\n(everything started was stopped again)")
    summary = {"run_id": state.run_id, "seconds": round(time.perf_counter() - t0, 2), "model": state.model_name,
               "version": state.version, "replicas": state.replicas, "urls": _urls(state), "run_dir": state.run_dir,
               "steps_s": steps.timings}
    if as_json:
        print_json(summary)
        return
    console.print(f"[bold green]sandbox up[/bold green] in {summary['seconds']}s — model [bold]{state.model_name}[/bold] "
                  f"{state.version}, {state.replicas} replica(s)")
    for name, url in summary["urls"].items():
        console.print(f"  {name:<14}{url}")
    console.print("  try: sandbox traffic --rate 4 --duration 30; "
                  "sandbox query 'sum(rate(vllm:generation_tokens_total[30s]))'")


def down(as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
         backend: Backend = typer.Option("local", "--backend", help=BACKEND_HELP)):  # noqa: B008
    """Stop everything the sandbox started (traffic generators, Ray, Prometheus)."""
    from sandbox.drill.leftovers import stop_all
    from services.stack.compose_backend import ComposeBackend, ComposeUnavailable, owns
    from services.stack.progress import Steps

    cfg, steps = config(), Steps(None if as_json else console)
    if backend is Backend.compose:
        try:
            report = stop_all(cfg, steps, ComposeBackend(cfg, steps).down())
        except ComposeUnavailable as e:
            fail(str(e), code=2)
        except RuntimeError as e:
            fail(str(e))
    elif owns(cfg):
        fail("the running sandbox is the Docker Compose stack: `sandbox down --backend compose` stops it", code=2)
    else:
        report = stop_all(cfg, steps)
    if as_json:
        print_json(report)
    elif not report["stopped"]:
        console.print(report.get("note", "nothing to stop"))
    else:
        console.print(f"[bold]sandbox down[/bold]: stopped {', '.join(report['stopped'])}")


def status(as_json: bool = typer.Option(False, "--json", help="print one JSON object")):
    """The running stack: URLs, Serve application and replicas, Prometheus targets."""
    from services.stack.prometheus import PrometheusClient, PrometheusError
    from services.stack.serve_control import ServeControl

    cfg = config()
    state = running_state(cfg)
    report = {"run_id": state.run_id, "model": state.model_name, "version": state.version, "urls": _urls(state)}
    ctl = ServeControl(state.dashboard_url, timeout_s=5, token_file=state.ray_token_file)
    try:
        app = ctl.application(state.app_name) or {}
        report["application"] = app.get("status", "NOT_DEPLOYED")
        report["deployments"] = {
            name: {"status": d.get("status"),
                   "replicas": [{"replica": r.get("replica_id"), "state": r.get("state"), "pid": r.get("pid")}
                                for r in d.get("replicas", [])]}
            for name, d in (app.get("deployments") or {}).items()}
    except Exception as e:  # noqa: BLE001 - report what is reachable
        report["application"] = f"unreachable: {type(e).__name__}"
    finally:
        ctl.close()
    prom = PrometheusClient(state.prometheus_url, timeout_s=5)
    try:
        report["targets"] = [{"job": t["labels"].get("job"), "url": t["scrapeUrl"], "health": t["health"]}
                             for t in prom.targets()]
    except PrometheusError as e:
        report["targets"] = f"unreachable: {e}"
    finally:
        prom.close()
    if as_json:
        print_json(report)
        return
    console.print(f"run {state.run_id}: model [bold]{state.model_name}[/bold] {state.version} — "
                  f"application {report['application']}")
    for name, url in report["urls"].items():
        console.print(f"  {name:<14}{url}")
    table = Table("deployment", "status", "replica", "state", "pid")
    for name, d in report.get("deployments", {}).items():
        for r in d["replicas"] or [{}]:
            table.add_row(name, d["status"], r.get("replica"), r.get("state"), str(r.get("pid")))
    console.print(table)
    if isinstance(report["targets"], list):
        targets = Table("job", "target", "health")
        for t in report["targets"]:
            targets.add_row(t["job"], t["url"], t["health"])
        console.print(targets)
    else:
        console.print(f"prometheus: {report['targets']}")


def run(
    rate: float = typer.Option(4.0, "--rate", min=0.01, help="requests per second (Poisson arrivals)"),
    duration: float = typer.Option(30.0, "--duration", min=1, help="seconds of traffic"),
    profile: str = typer.Option("default", "--profile", help="traffic profile"),
    replicas: int = typer.Option(None, "--replicas", min=1, help="LLMServer replicas"),
    keep_up: bool = typer.Option(False, "--keep-up", help="leave the stack running afterwards"),
):
    """Bring the stack up, run traffic, show what Prometheus saw, and bring it down again."""
    from sandbox.commands.traffic import show_server_view, traffic_session
    from services.stack.progress import Steps
    from services.stack.ports import PortTaken
    from services.stack.stack import Stack, StackRunningError

    cfg = config()
    stack = Stack(cfg, Steps(console))
    try:
        stack.up(replicas)
    except (StackRunningError, PortTaken) as e:
        fail(str(e))
    except (RuntimeError, ValueError, OSError) as e:
        fail(f"{e}\n(everything started was stopped again)")
    try:
        state = running_state(cfg)
        console.print(f"API {state.api_url}/v1 · Prometheus {state.prometheus_url}")
        traffic_session(cfg, state, rate, duration, profile, seed=0, as_json=False)
        show_server_view(state)
    finally:
        if keep_up:
            console.print("stack left running: `sandbox down` stops it")
        else:
            stack.down()


def register(app: typer.Typer) -> None:
    app.command()(up)
    app.command()(down)
    app.command()(status)
    app.command()(run)
