"""`sandbox taxonomy` and `sandbox diagnose`: the ids a diagnosis may use, and the diagnosis format."""
from __future__ import annotations

# Lazy imports: each command imports its work when it runs, so `sandbox --help` and every command
# start without loading what other commands need (the grader's plots, the engine, Ray's client).

from pathlib import Path

import typer

from sandbox.commands.common import console, fail, print_json


def register(app: typer.Typer) -> None:
    @app.command()
    def taxonomy(
        as_json: bool = typer.Option(False, "--json", help="one JSON object: root_causes, components, remediations"),
        quantities: bool = typer.Option(False, "--quantities",
                                        help="the quantities the grader reads queries as, with the metrics of each"),
    ):
        """The root-cause, component and remediation ids a diagnosis names, with a line on each."""
        from incidents import taxonomy as tx

        if quantities:
            _print_quantities(as_json)
            return
        if as_json:
            print_json(tx.as_dict())
            return
        for title, terms in (("Root causes", tx.ROOT_CAUSES),
                             ("Components (location.component, or null)", tx.COMPONENTS),
                             ("Remediations", tx.REMEDIATIONS)):
            console.print(f"[bold]{title}[/bold]")
            for t in terms:
                console.print(f"  {t.id:<32} {t.description}", soft_wrap=True)

    @app.command()
    def diagnose(
        schema: bool = typer.Option(False, "--schema", help="print the diagnosis format's JSON Schema and exit"),
        check: Path = typer.Option(None, "--check", metavar="FILE",
                                   help="validate a diagnosis file (YAML or JSON) and exit: 0 valid, 2 not"),
        file: Path = typer.Option(None, "--file", "-f", help="submit this diagnosis to the running drill"),
        as_json: bool = typer.Option(False, "--json", help="one JSON object"),
    ):
        """Diagnose the running drill: from --file, or interactively (the taxonomy as choices, each
        query checked as you type). Grades at once, prints the report and ends the drill cleanly.

        A diagnosis names the run, the root cause (an id from `sandbox taxonomy`), where it is
        (replica, version, component; each may be null), the evidence (PromQL and what it shows),
        the alternatives ruled out (each with the PromQL that rules it out), the remediation and a
        summary. `--schema` prints the format's JSON Schema; `--check FILE` only validates a file.
        Every problem is reported with its file, line and field (exit code 2), and changes nothing.
        """
        from sandbox.grading.diagnosis import DiagnosisError, json_schema, load_diagnosis

        if schema:
            print_json(json_schema())
            return
        if check is None:
            from sandbox.commands.submit import submit

            submit(file, as_json)
            return
        try:
            diagnosis = load_diagnosis(check)
        except DiagnosisError as e:
            if as_json:
                print_json({"valid": False, "problems": [
                    {"file": p.file, "line": p.line, "field": p.field, "message": p.message} for p in e.problems]})
                raise typer.Exit(2) from None
            fail(str(e), code=2)
        if as_json:
            print_json({"valid": True, "diagnosis": diagnosis.to_dict()})
        else:
            console.print(f"{check}: a valid diagnosis of run {diagnosis.run} ({diagnosis.root_cause})")


def _print_quantities(as_json: bool) -> None:
    from dataclasses import asdict

    from incidents.quantities import QUANTITIES

    if as_json:
        print_json([asdict(q) for q in QUANTITIES])
        return
    for q in QUANTITIES:
        console.print(f"[bold]{q.id}[/bold]  {q.description}", soft_wrap=True)
        forms = [f"quantiles and mean of {h}" for h in q.histograms]
        forms += [f"{r.numerator.metric} / {r.denominator.metric}" for r in q.ratios]
        forms += [f"{'rate of ' if s.kind == 'rate' else ''}{s.series.metric}" for s in q.singles]
        forms += [f"{d.lhs.metric} - {d.rhs.metric}" for d in q.differences]
        for f in dict.fromkeys(forms):
            console.print(f"    {f}", soft_wrap=True)


def register_grade(app: typer.Typer) -> None:
    @app.command()
    def grade(
        run: Path = typer.Argument(..., help="a run directory (runs/<run-id>) or a recording (case.tar.gz)"),
        diagnosis_file: Path = typer.Option(..., "--diagnosis", "-d", help="the diagnosis (YAML or JSON)"),
        key: Path = typer.Option(None, "--key", help="the run's key (default: keys/<run-id>.key in the sandbox "
                                 "home; for a recording, the .key file beside it)"),
        as_json: bool = typer.Option(False, "--json", help="one JSON object: score and criteria"),
        no_debrief: bool = typer.Option(False, "--no-debrief", help="grade only; write no debrief report"),
    ):
        """Score a diagnosis of a recorded run, 0-100, with points and a sentence per criterion.

        Each cited query is re-run on the run's own Prometheus data (a read-only Prometheus over it),
        over the baseline and the incident windows. The same inputs give the same report, byte for byte.
        """
        from sandbox.commands.common import config
        from sandbox.grading.diagnosis import DiagnosisError, load_diagnosis
        from sandbox.grading.recorded import RecordedRun
        from sandbox.grading.recording import is_archive, key_path_for, unpack

        cfg = config()
        try:
            diagnosis = load_diagnosis(diagnosis_file)
        except DiagnosisError as e:
            fail(str(e), code=2)
        scratch = None
        debrief_home = None  # where the debrief goes: the run directory, or beside a recording
        try:
            if is_archive(run):
                key = key or key_path_for(run)
                debrief_home = run.resolve().parent / (run.name.split(".")[0] + "-debrief")
                run = unpack(run)
                scratch = run.parent
            run = run.resolve()
            recorded = RecordedRun(run, key or cfg.keys_dir / f"{run.name}.key")
            if diagnosis.run != recorded.run_id:
                raise ValueError(f"{diagnosis_file}: run: names {diagnosis.run!r}, but this is run {recorded.run_id!r}")
        except (ValueError, FileNotFoundError) as e:
            _cleanup(scratch)
            fail(str(e), code=2)
        try:
            report, debrief = _grade(cfg, recorded, run, diagnosis, debrief_home, not no_debrief)
        finally:
            _cleanup(scratch)
        if as_json:
            print_json({**report.to_dict(), "debrief": None if debrief is None else str(debrief)})
            return
        for c in report.criteria:
            console.print(f"  {c.name:<12} {c.points:>3}/{c.max_points:<3} {c.sentence}", soft_wrap=True)
        console.print(f"[bold]score {report.score}/100[/bold]")
        if debrief is not None:
            console.print(f"debrief: {debrief} (and .html beside it)")


def _cleanup(scratch: Path | None) -> None:
    import shutil

    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


def _grade(cfg, recorded, run: Path, diagnosis, debrief_home: Path | None, debrief: bool):
    from incidents.schema import IncidentError, load_catalogue
    from sandbox.grading.grader import Grader
    from sandbox.grading.recorded import RecordedPrometheus
    from services.stack.prometheus import PrometheusError

    try:
        catalogue = load_catalogue(cfg.incidents)
        incident = catalogue[recorded.incident_id]
    except (IncidentError, KeyError) as e:
        fail(f"the run's incident {recorded.incident_id!r} cannot be loaded: {e}")
    try:
        with RecordedPrometheus(run / "prometheus") as prom:
            windows = recorded.windows()
            report = Grader(incident, recorded.sealed["variant"], recorded.sealed["answer"], windows,
                            prom, catalogue, recorded.sealed.get("mitigation")).grade(diagnosis)
            path = None
            if debrief:
                from sandbox.grading.debrief import write_debrief

                home = debrief_home or run
                home.mkdir(parents=True, exist_ok=True)
                path = write_debrief(home, incident, recorded.sealed, windows, report, prom, recorded.record.events())
            return report, path
    except PrometheusError as e:
        fail(str(e))
