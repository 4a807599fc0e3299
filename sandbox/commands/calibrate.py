"""`sandbox calibrate`: measure the running stack's capacity per traffic profile; the SLOs that follow.

Prints a table per profile (its ceiling and knee), the reference profile's latency curve
as a table and a terminal plot, and the thresholds the drills will page on; `--plot
PATH` writes the curve as a PNG, `--json` one object for scripts. The result is cached
(runs/sandbox/calibration/) and reused by drills until the machine, the serve config or
the catalogue changes; `--force` measures again.
"""
from __future__ import annotations

# Lazy imports: each command imports its work when it runs, so `sandbox --help` and every command
# start without loading what other commands need (the grader's plots, the engine, Ray's client).
from pathlib import Path

import typer
from rich.table import Table

from sandbox.commands.common import config, console, fail, print_json

PLOT_WIDTH = 40


def _ms(v) -> str:
    return "-" if v is None else f"{v * 1000:.0f}"


def profile_table(cal) -> Table:
    table = Table("profile", "knee req/s", "ceiling req/s", "out tok/s", "ceiling TTFT p50/p99 ms",
                  "busy TTFT p99 ms", "busy ITL p99 ms", "one at a time: TTFT p50 ms", title=f"capacity (knee = {cal.knee_share:.2f} x ceiling, "
                  f"from the {cal.reference} profile's sweep)")
    for name, p in sorted(cal.profiles.items()):
        c = p.ceiling
        b = p.busy
        table.add_row(name, f"{p.knee_rps:.2f}", f"{c.rate:.2f}", f"{c.output_tokens_per_s:.0f}",
                      f"{_ms(c.ttft_p50_s)} / {_ms(c.ttft_p99_s)}", _ms(b.ttft_p99_s) if b else "-",
                      _ms(b.itl_p99_s) if b else "-", _ms(p.single.ttft_p50_s) if p.single else "-")
    return table


def curve_points(cal) -> list:
    ref = cal.profiles[cal.reference]
    return [ref.single, *cal.curve, ref.ceiling]


def curve_table(cal) -> Table:
    table = Table("phase", "offered", "finished req/s", "requests", "TTFT p50/p99 ms", "ITL p50/p99 ms", "out tok/s",
                  title=f"the {cal.reference} profile's sweep")
    for p in curve_points(cal):
        offered = f"{p.offered:.0f} client(s)" if p.phase != "rate" else f"{p.offered:.2f} req/s"
        table.add_row(p.phase, offered, f"{p.rate:.2f}", str(p.requests), f"{_ms(p.ttft_p50_s)} / {_ms(p.ttft_p99_s)}",
                      f"{_ms(p.itl_p50_s)} / {_ms(p.itl_p99_s)}", f"{p.output_tokens_per_s:.0f}")
    return table


def terminal_plot(cal) -> str:
    """TTFT p99 against the rate finished, one bar per point, the knee marked."""
    points = [p for p in curve_points(cal) if p.ttft_p99_s is not None]
    top = max(p.ttft_p99_s for p in points) or 1.0
    knee = cal.profiles[cal.reference].knee_rps
    lines = [f"TTFT p99 by load ({cal.reference}; | marks {top * 1000:.0f} ms)"]
    for p in sorted(points, key=lambda p: p.rate):
        bar = "#" * max(1, round(PLOT_WIDTH * p.ttft_p99_s / top))
        mark = "  <- knee" if p.phase == "rate" and abs(p.offered - knee) < 1e-6 else ""
        lines.append(f"{p.rate:6.2f} req/s {bar:<{PLOT_WIDTH}}| {_ms(p.ttft_p99_s)} ms{mark}")
    lines.append(f"knee {knee:.2f} req/s: the highest rate whose TTFT p99 stays within {cal.knee_factor:g}x "
                 "the one-at-a-time median")
    return "\n".join(lines)


def write_png(cal, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = sorted((p for p in curve_points(cal) if p.ttft_p99_s is not None), key=lambda p: p.rate)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([p.rate for p in points], [p.ttft_p99_s for p in points], "o-", label="TTFT p99")
    ax.plot([p.rate for p in points], [p.ttft_p50_s for p in points], "s--", label="TTFT p50")
    ax.axvline(cal.profiles[cal.reference].knee_rps, color="grey", linestyle=":", label="knee")
    slo = cal.thresholds.get("sandbox:threshold:ttft_p99_seconds")
    if slo:
        ax.axhline(slo, color="red", linestyle=":", label="TTFT p99 SLO")
    ax.set_xlabel("requests/s finished")
    ax.set_ylabel("seconds")
    ax.set_title(f"capacity sweep: {cal.reference} profile")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def calibrate(
    profiles: list[str] = typer.Option(None, "--profile", help="a traffic profile to measure (repeat for more; "  # noqa: B008
                                       "default: every profile the catalogue's rates are written against)"),
    force: bool = typer.Option(False, "--force", help="measure again even if a calibration is cached"),
    plot: Path = typer.Option(None, "--plot", help="write the reference profile's curve as a PNG here"),  # noqa: B008
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
):
    """Measure the running stack's capacity (one request at a time, the throughput ceiling, Poisson rates
    between) and derive the knee of each traffic profile and the latency SLOs the alerts page on.

    Drills calibrate on their own when nothing is cached; this shows the figures, and redoes them with --force.
    """
    from incidents.profiles import PROFILES
    from incidents.schema import IncidentError, knee_profiles, load_catalogue
    from sandbox.calibration.calibrator import calibrate_stack
    from sandbox.calibration.capacity import CalibrationError
    from services.stack.progress import Steps
    from services.stack.prometheus import PrometheusClient
    from services.stack.state import NoStackError, StackState

    cfg = config()
    if plot is not None and not plot.parent.is_dir():
        fail(f"--plot: no such directory {plot.parent}", code=2)
    unknown = sorted(set(profiles or ()) - set(PROFILES))
    if unknown:
        fail(f"unknown traffic profile(s) {', '.join(unknown)}; choose from {', '.join(PROFILES)}", code=2)
    if not profiles:
        try:
            profiles = knee_profiles(load_catalogue(cfg.incidents).values()) or ["default"]
        except IncidentError as e:
            fail(str(e), code=2)
    try:
        state = StackState.load(cfg.state_file)
    except NoStackError as e:
        fail(f"{e}: a calibration measures a running stack", code=2)
    client = PrometheusClient(state.prometheus_url)
    try:
        if not client.ready():
            fail(f"the sandbox's Prometheus ({state.prometheus_url}) does not answer: is the stack down? "
                 "(`sandbox down`, then `sandbox up`)", code=2)
    finally:
        client.close()
    steps = Steps(None if as_json else console)
    try:
        cal, installed, measured = calibrate_stack(cfg, state, sorted(set(profiles)), steps, force=force)
    except CalibrationError as e:
        fail(str(e), code=2)
    except RuntimeError as e:
        fail(f"calibration failed: {e}")
    if plot is not None:
        write_png(cal, plot)
    if as_json:
        print_json({"measured_now": measured, **cal.to_dict(), "installed_thresholds": installed,
                    "plot": None if plot is None else str(plot)})
        return
    for warning in cal.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    if not measured:
        console.print("[dim]cached calibration (this machine, serve config and catalogue); --force measures "
                      "again[/dim]")
    console.print(profile_table(cal))
    console.print(curve_table(cal))
    console.print(terminal_plot(cal), highlight=False)
    console.print("thresholds the alerts page on: " + ", ".join(
        f"{k.removeprefix('sandbox:threshold:')} {v:g}" for k, v in sorted(installed.items())))
    if cal.tpot_line is not None:
        line = cal.tpot_line
        console.print(f"median time per output token by load: {line.idle_s * 1000:.0f} ms at {line.idle_share:.2f} "
                      f"of the ceiling, {line.busy_s * 1000:.0f} ms at {line.busy_share:.2f}; a drill installs "
                      "the TPOT SLO of its own base load (shown: the busy load's)")
    if plot is not None:
        console.print(f"plot: {plot}")


def register(app: typer.Typer) -> None:
    app.command()(calibrate)
