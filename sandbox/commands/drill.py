# Over 300 lines (about 310): verify is drill runs plus a report, and splitting the two commands would split
# the one `_run` they share.
"""`sandbox drill` and `sandbox verify`: run an incident; check that it is a fair drill.

Both commands share the incident picking and `_run` below; verify's report lives in verify_report.py
and its statistics in sandbox/drill/verify_stats.py."""
from __future__ import annotations

# Lazy imports: each command imports its work when it runs, so `sandbox --help` and every command
# start without loading what other commands need (the grader's plots, the engine, Ray's client).
import random
from pathlib import Path

import typer
from rich.panel import Panel

from sandbox.commands.common import config, console, err_console, fail, print_json
from sandbox.commands.verify_report import print_stats_tables, print_verify_checks, verify_row
from services.stack.compose_backend import BACKEND_HELP, Backend

INCIDENTS_HELP = "incident id (symptom-named), e.g. ttft-after-deploy; `sandbox drill --list` shows them"


def _catalogue():
    from incidents.schema import IncidentError, load_catalogue

    try:
        return load_catalogue(config().incidents)
    except IncidentError as e:
        fail(str(e), code=2)


def _pick(catalogue: dict, incident: str | None, pick_random: bool, seed: int, variant: str | None):
    if incident is None and not pick_random:
        fail("name an incident or pass --random (see `sandbox drill --list`)", code=2)
    if incident is not None and pick_random:
        fail("name an incident or pass --random, not both", code=2)
    if pick_random:
        incident = random.Random(f"incident/{seed}").choice(sorted(catalogue))
    if incident not in catalogue:
        fail(f"unknown incident {incident!r}; choose from {', '.join(sorted(catalogue))}", code=2)
    inc = catalogue[incident]
    if variant is None:
        from incidents.schema import choose_variant

        chosen = choose_variant(inc, seed)
        variant = next(name for name, v in inc.variants.items() if v is chosen)
        variant = _runnable_variant(inc, variant, seed)
    elif variant not in inc.variants:
        fail(f"unknown variant {variant!r} of {incident}; choose from {', '.join(inc.variants)}", code=2)
    return inc, variant


def _runnable_variant(inc, variant: str, seed: int) -> str:
    """The seeded variant, or, when it needs a container node and no Docker engine answers, a seeded
    choice among the others (with a note)."""
    from services.stack.container_node import unrunnable

    problem = unrunnable(inc.variants[variant])
    if problem is None:
        return variant
    others = [name for name, v in inc.variants.items() if v.drawn and unrunnable(v) is None]
    if not others:
        fail(f"every variant of {inc.id} needs a container node: {problem}", code=2)
    err_console.print(f"note: skipping a variant that needs a container node ({problem})")
    return random.Random(f"variant/{seed}").choice(others)


def page_panel(page: dict, state) -> Panel:
    """The page: what paged and where to look. Never the cause."""
    lines = [f"[bold red]{page['alert']}[/bold red]  firing since {page.get('active_at') or '?'}",
             "", page.get("summary", ""), page.get("description", ""), "",
             "[bold]Where to look[/bold]",
             f"  Prometheus UI   {state.prometheus_url}",
             "  PromQL          sandbox query 'QUERY'   (--json for scripts)",
             f"  the API         {state.api_url}/v1   (send your own requests)",
             "  the stack       sandbox status"]
    return Panel("\n".join(line for line in lines if line is not None), title="PAGE", border_style="red")


def register(app: typer.Typer) -> None:
    @app.command()
    def drill(
        incident: str = typer.Argument(None, help=INCIDENTS_HELP),
        pick_random: bool = typer.Option(False, "--random", help="a random incident (chosen by --seed)"),
        seed: int = typer.Option(None, "--seed", help="fixes the incident (with --random), variant and timeline"),
        variant: str = typer.Option(None, "--variant", help="run this variant of the named incident (as `verify` "
                                    "does: a facilitator's or a test's chosen case; default: drawn by --seed)"),
        headless: bool = typer.Option(False, "--headless", help="run the timeline (or --duration) and stop; "
                                      "without it the drill goes on after the page until you end it with Ctrl-C"),
        duration: float = typer.Option(None, "--duration", min=30, help="seconds of traffic, then stop "
                                       "(default: the incident's timeline, headless; open-ended otherwise)"),
        keep_up: bool = typer.Option(False, "--keep-up", help="leave the stack running afterwards"),
        list_incidents: bool = typer.Option(False, "--list", help="list the incidents and exit"),
        as_json: bool = typer.Option(False, "--json", help="print one JSON object at the end"),
        backend: Backend = typer.Option("local", "--backend", help=BACKEND_HELP + "; a running stack "  # noqa: B008
                                        "of either kind is reused"),
    ):
        """Run an incident drill: traffic, a fault at a seeded time, and a page when the alert fires.

        Ctrl-C at any moment reverts what was injected, stops what the drill started and keeps the record
        in runs/<run-id>/.
        """
        catalogue = _catalogue()
        if list_incidents:
            rows = [{"incident": i.id, "page": i.page.alert or "a report (no alert)", "variants": len(i.variants)}
                    for i in catalogue.values()]
            if as_json:
                print_json(rows)
            else:
                for r in rows:
                    console.print(f"{r['incident']:<22} pages {r['page']:<28} {r['variants']} variant(s)")
            return
        if variant is not None and pick_random:
            fail("--variant goes with a named incident, not --random (a random drill's variant is the secret)", code=2)
        seed = random.SystemRandom().randrange(1_000_000) if seed is None else seed
        inc, variant = _pick(catalogue, incident, pick_random, seed, variant)
        compose = None
        if backend is Backend.compose:
            _check_plan(inc, variant, seed, duration)  # before any container starts
            compose = _compose_up(as_json)
        try:
            result = _run(inc, variant, seed, duration, keep_up, as_json, headless,
                          open_ended=not headless and duration is None, named=not pick_random)
        finally:
            if compose is not None and not keep_up:
                compose.down()
        summary = _summary(result)
        if as_json:
            print_json(summary)
        else:
            console.print(f"drill {result.status}: run {result.run_id} ({result.run_dir})" if result.run_id
                          else f"drill {result.status} before its run began: nothing recorded")
        if result.status == "failed":
            raise typer.Exit(1)
        if result.status in ("interrupted", "forced"):
            raise typer.Exit(130)  # the shell's code for "ended by Ctrl-C"

    @app.command()
    def verify(
        incident: str = typer.Argument(None, help=INCIDENTS_HELP),
        variant: str = typer.Option(None, "--variant", help="the variant to check (default: chosen by the "
                                    "(first) seed)"),
        every: bool = typer.Option(False, "--all", help="every variant of the incident (of every incident "
                                                        "when none is named), one after another"),
        seed: int = typer.Option(None, "--seed", help="run this one seed (default: a fresh seed per run, "
                                 "drawn at random and recorded)"),
        runs: int = typer.Option(1, "--runs", help="fresh headless drills per variant, each at a fresh seed"),
        duration: float = typer.Option(None, "--duration", min=30, help="seconds of traffic (default: the incident's)"),
        markdown: Path = typer.Option(None, "--markdown", help="also write the runs and each variant "  # noqa: B008
                                      "in sum to this file, as Markdown tables"),
        as_json: bool = typer.Option(False, "--json", help="one JSON object with a boolean `pass` and the checks "
                                     "(of several runs: `runs` and `variants`)"),
    ):
        """Check a variant is a fair drill: it pages within 120 s and by a margin, never in the baseline, its
        evidence separates it from every sibling variant (also a minute after the page), other incidents'
        signals stay quiet, nothing leaks. Exit code 1 unless every run passes."""
        from sandbox.drill.verify_stats import fresh_seeds, input_problem, run_row, summarise, used_seeds
        from sandbox.drill.verify_stats import markdown as render_markdown

        problem = input_problem(runs, seed, markdown)
        if problem:
            fail(problem, code=2)  # before anything starts
        catalogue = _catalogue()
        if every:
            if variant is not None:
                fail("--all and --variant exclude each other", code=2)
            names = [incident] if incident else sorted(catalogue)
            for name in names:
                if name not in catalogue:
                    fail(f"unknown incident {name!r}; choose from {', '.join(sorted(catalogue))}", code=2)
            cases = _runnable_cases([(catalogue[n], v) for n in names for v in catalogue[n].variants])
        elif incident is None:
            fail("name an incident (or pass --all)", code=2)
        seeds = [seed] if seed is not None else fresh_seeds(runs * (len(cases) if every else 1),
                                                            used_seeds(config().runs), random.SystemRandom())
        if not every:
            cases = [_pick(catalogue, incident, False, seeds[0], variant)]
        planned = [(inc, v, seeds[i * runs + k]) for i, (inc, v) in enumerate(cases) for k in range(runs)]
        def write_markdown(results: list[dict]) -> None:
            """After every run: a long series (the catalogue, N times) keeps what it has if it is cut short."""
            if markdown is None:
                return
            import shlex
            import sys
            from datetime import datetime

            rows = [run_row(r) for r in results]
            when = datetime.now().astimezone().isoformat(timespec="seconds")
            tmp = markdown.with_name(markdown.name + ".tmp")
            tmp.write_text(render_markdown(rows, summarise(rows), when, "sandbox " + shlex.join(sys.argv[1:])))
            tmp.replace(markdown)

        results = _verify_many(catalogue, planned, duration, as_json, after_each=write_markdown)
        rows = [run_row(r) for r in results]
        variants = summarise(rows)
        if len(results) == 1 and not every:
            out = results[0]
        else:
            out = {"pass": all(r["pass"] for r in results), "runs": rows, "variants": variants,
                   "results": results, "table": [verify_row(r) for r in results]}
            if not as_json:
                print_stats_tables(rows, variants)
        if as_json:
            print_json(out)
        if not all(r["pass"] for r in results):
            raise typer.Exit(1)


def _check_plan(inc, variant, seed, duration) -> None:
    from sandbox.drill.fault_plan import build_faults
    from sandbox.drill.plan import make_plan

    try:
        build_faults(make_plan(inc, variant, seed, duration))
    except ValueError as e:
        fail(f"{inc.id}: {e}", code=2)


def _compose_up(as_json: bool):
    """The compose stack for a drill: None if one was running (reused), else the backend that started it."""
    from services.stack.compose_backend import ComposeBackend, ComposeUnavailable
    from services.stack.progress import Steps

    backend = ComposeBackend(config(), Steps(None if as_json else console))
    try:
        return backend if backend.up_unless_running() else None
    except ComposeUnavailable as e:
        fail(str(e), code=2)
    except (RuntimeError, ValueError, OSError) as e:
        fail(f"{e}\n(everything started was stopped again)")


def _runnable_cases(cases: list) -> list:
    """`--all` without a Docker engine: variants that need a container node are skipped, with a note."""
    from services.stack.container_node import unrunnable

    kept = [(inc, v) for inc, v in cases if unrunnable(inc.variants[v]) is None]
    for inc, v in cases:
        if (inc, v) not in kept:
            err_console.print(f"note: skipping {inc.id} / {v}: it needs a container node "
                              f"({unrunnable(inc.variants[v])})")
    return kept


def _verify_one(catalogue, inc, variant, seed, duration, as_json) -> dict:
    from datetime import datetime

    from sandbox.drill.verify import check_run

    ran_at = datetime.now().astimezone().isoformat(timespec="seconds")
    try:
        result = _run(inc, variant, seed, duration, False, as_json, True,
                      before_teardown=lambda d, prom: check_run(d, prom, catalogue))
    except typer.Exit:  # the drill failed (said why on stderr); the other cases still run
        return {"incident": inc.id, "variant": variant, "seed": seed, "run_id": None, "ran_at": ran_at,
                "pass": False, "checks": None, "status": "failed"}
    out = {"incident": inc.id, "variant": variant, "seed": seed, "run_id": result.run_id, "ran_at": ran_at,
           "pass": bool(result.checks and result.checks["pass"]) and result.status == "finished",
           "checks": result.checks, "status": result.status, "capacity_check": result.capacity_check}
    if not as_json:
        print_verify_checks(out)
    return out


def _verify_many(catalogue, planned, duration, as_json, after_each=lambda results: None) -> list[dict]:
    """planned: (incident, variant, seed) per run. One fresh stack per run: series of replicas from earlier
    drills would pile up in Ray's exporter."""
    results = []
    for inc, v, seed in planned:
        results.append(_verify_one(catalogue, inc, v, seed, duration, as_json))
        after_each(results)
        if results[-1]["status"] == "interrupted":
            break  # Ctrl-C ends the series, not only the run it came in
    return results


def _run(inc, variant, seed, duration, keep_up, as_json, headless, before_teardown=None, open_ended=False,
         named=True):
    """named: the user chose the incident; a random drill says nothing of it (not even its timeline's
    length, which tells incidents apart) until the page."""
    from sandbox.drill.runner import Drill, DrillSettings
    from services.stack.progress import Steps

    cfg = config()
    steps = Steps(None if as_json else console)

    def on_page(page):
        if not as_json:
            from services.stack.state import StackState

            console.print(page_panel(page, StackState.load(cfg.state_file)))
            if not headless:
                console.print("Investigate, and act when you know (`sandbox mitigate --help`: each action is "
                              "judged by whether service recovers); the incident goes on until you end the drill "
                              "with Ctrl-C (what is left of the fault is reverted, the stack stopped, the record "
                              "kept).")

    try:
        settings = DrillSettings(duration_s=duration, keep_up=keep_up, open_ended=open_ended)
        drill = Drill(cfg, inc, variant, seed, settings, steps=steps, on_page=on_page, before_teardown=before_teardown)
    except ValueError as e:
        fail(f"{inc.id}: {e}", code=2)
    if not as_json and named:
        console.print(f"drill [bold]{inc.id}[/bold] (seed {seed}): traffic for {drill.plan.duration_s:.0f}s; "
                      "you will be paged when an alert fires")
    elif not as_json:
        console.print(f"drill (seed {seed}): a random incident; you will be paged when an alert fires")
    try:
        return drill.run()
    except Exception as e:  # noqa: BLE001 - clean-up already ran; say what failed
        err_console.print(f"[red]error:[/red] drill failed: {e}")
        raise typer.Exit(1) from None


def _summary(result) -> dict:
    return {"run_id": result.run_id, "run_dir": result.run_dir, "status": result.status,
            "page": result.page, "traffic": result.stats, "mitigation": result.mitigation}
