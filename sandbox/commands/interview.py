"""`sandbox interview` and `sandbox ask`: a drill where evidence comes only when asked for, and is logged."""
from __future__ import annotations

# Lazy imports: each command imports its work when it runs, so `sandbox --help` and every command
# start without loading what other commands need (the grader's plots, the engine, Ray's client).
import json
import math
import time
from pathlib import Path

import typer
from rich.panel import Panel
from rich.table import Table

from sandbox.commands.common import config, console, fail, print_json

ASKS_FILE = "asks.jsonl"  # in the run directory (or the replay's): one line per ask
WINDOW_S = 300.0  # what an ask shows: the last five minutes (of the recording, in a replay)


def active_interview(cfg) -> dict | None:
    from sandbox.drill.record import running_drill

    info = running_drill(cfg.home)
    return info if info and info.get("mode") == "interview" else None


def interview_panel(page: dict) -> Panel:
    lines = [f"[bold red]{page['alert'] or 'a report'}[/bold red]  firing since {page.get('active_at') or '?'}", "",
             page.get("summary", ""), "",
             "[bold]Evidence is given when you ask for it[/bold] (each ask is logged with its time):",
             "  sandbox ask --list      what can be asked",
             "  sandbox ask NAME        one piece, as a table and a plot of the last five minutes",
             "  sandbox mitigate ACTION act on the live stack (`sandbox mitigate --help`); logged with its "
             "time, judged by whether service recovers",
             "  sandbox diagnose        your diagnosis (or: sandbox diagnose --file d.yaml)"]
    return Panel("\n".join(lines), title="PAGE (interview)", border_style="red")


def series_names(labelsets: list[dict], wide: bool = False) -> list[str]:
    """A name per series: the labels whose values differ between the series (all labels with `wide`, or
    when there is one series), so settings that tell the series apart are not cut off behind the ones
    they share."""
    sets = [{k: v for k, v in m.items() if k != "__name__"} for m in labelsets]
    keys = sorted({k for s in sets for k in s})
    differ = [k for k in keys if len({s.get(k) for s in sets}) > 1]
    shown = keys if wide or len(sets) < 2 or not differ else differ
    return [",".join(f"{k}={s[k]}" for k in shown if k in s) or "-" for s in sets]


def series_rows(rows: list[dict], wide: bool = False) -> list[dict]:
    """One row per series of a range query: its name, labels, last/min/max over the points that have a
    value (a ratio is NaN where it was 0/0) and a sparkline."""
    from sandbox.grading.evidence import sparkline

    out = []
    for r, name in zip(rows, series_names([r["metric"] for r in rows], wide)):
        vals = [float(v) for _, v in r["values"]]
        seen = [v for v in vals if math.isfinite(v)]
        out.append({"series": name, "labels": {k: v for k, v in r["metric"].items() if k != "__name__"},
                    "last": seen[-1] if seen else None, "min": min(seen) if seen else None,
                    "max": max(seen) if seen else None, "plot": sparkline(vals)})
    return out


def register(app: typer.Typer) -> None:
    @app.command()
    def interview(
        incident: str = typer.Argument(None, help="incident id (default: a random one, chosen by --seed)"),
        seed: int = typer.Option(None, "--seed", help="fixes the incident, variant and timeline"),
    ):
        """An interview drill: the page and no dashboards; evidence only through `sandbox ask`, logged.

        The drill goes on until the diagnosis (`sandbox diagnose`) or Ctrl-C; the grader adds
        evidence-discipline criteria from the log of asks.
        """
        import random

        from sandbox.commands.drill import _catalogue, _pick
        from sandbox.drill.runner import Drill, DrillSettings
        from services.stack.progress import Steps

        cfg = config()
        if active_interview(cfg):
            fail("an interview is already running")
        catalogue = _catalogue()
        seed = random.SystemRandom().randrange(1_000_000) if seed is None else seed
        inc, variant = _pick(catalogue, incident, incident is None, seed, None)
        def on_page(page) -> None:
            console.print(interview_panel(page))

        try:
            drill = Drill(cfg, inc, variant, seed, DrillSettings(open_ended=True, mode="interview"),
                          steps=Steps(console), on_page=on_page)
        except ValueError as e:
            fail(f"{inc.id}: {e}", code=2)
        console.print(f"interview (seed {seed}): the stack comes up; you will be paged")
        try:
            result = drill.run()
        except Exception as e:  # noqa: BLE001 - clean-up already ran; say what failed
            fail(f"interview failed: {e}")
        console.print(f"interview {result.status}: run {result.run_id} ({result.run_dir})" if result.run_id
                      else f"interview {result.status} before its run began: nothing recorded")
        if result.status == "interrupted":
            raise typer.Exit(130)

    @app.command()
    def ask(
        name: str = typer.Argument(None, help="the evidence to reveal (see --list)"),
        list_all: bool = typer.Option(False, "--list", help="what can be asked"),
        as_json: bool = typer.Option(False, "--json", help="one JSON object (every series with all its labels)"),
        wide: bool = typer.Option(False, "--wide", help="every label of every series, not only those that differ"),
    ):
        """Reveal one named piece of evidence: its queries' last values, ranges and a terminal plot.

        A series is named by the labels that differ between the series of its query (all of them
        with --wide or --json); last, min and max skip the points with no value (0/0)."""
        from sandbox.commands.replay import active_replay
        from sandbox.grading.evidence import CATALOGUE, piece
        from services.stack.prometheus import PrometheusClient, PrometheusError

        if list_all:
            rows = [{"name": p.name, "what": p.title} for p in CATALOGUE]
            if as_json:
                print_json(rows)
            else:
                for r in rows:
                    console.print(f"  {r['name']:<20} {r['what']}")
            return
        if name is None:
            fail("name a piece of evidence (`sandbox ask --list`)", code=2)
        try:
            p = piece(name)
        except ValueError as e:
            fail(str(e), code=2)
        cfg = config()
        replay, live = active_replay(cfg), active_interview(cfg)
        if replay:
            url, end, log_dir = replay["prometheus_url"], replay["at"], Path(replay["run_dir"])
        else:
            from sandbox.commands.common import running_state

            url, end = running_state(cfg).prometheus_url, time.time()
            log_dir = Path(live["run_dir"]) if live else None
        client = PrometheusClient(url)
        out = {"evidence": p.name, "title": p.title, "queries": []}
        try:
            for label, expr in p.queries:
                rows = client.query_range(expr, end - WINDOW_S, end, 5.0)
                out["queries"].append({"label": label, "query": expr, "series": series_rows(rows, wide or as_json)})
        except PrometheusError as e:
            fail(str(e))
        finally:
            client.close()
        if log_dir is not None:
            with open(log_dir / ASKS_FILE, "a") as f:
                f.write(json.dumps({"time": round(time.time(), 3), "evidence": p.name}) + "\n")
        if as_json:
            print_json(out)
            return
        table = Table("what", "series", "last", "min", "max", f"last {WINDOW_S / 60:.0f} min", title=p.title)
        fmt = lambda v: "-" if v is None else f"{v:.4g}"  # noqa: E731
        for q in out["queries"]:
            if not q["series"]:
                table.add_row(q["label"], "[dim]no data[/dim]", "", "", "", "")
            for s in q["series"]:
                table.add_row(q["label"], s["series"], fmt(s["last"]), fmt(s["min"]), fmt(s["max"]), s["plot"])
        console.print(table)
