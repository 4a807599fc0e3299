"""`sandbox taxonomy` and `sandbox diagnose`: the ids a diagnosis may use, and the diagnosis format."""
from __future__ import annotations

from pathlib import Path

import typer

from sandbox.commands.common import console, fail, print_json


def register(app: typer.Typer) -> None:
    @app.command()
    def taxonomy(as_json: bool = typer.Option(False, "--json", help="one JSON object: root_causes, remediations")):
        """The root-cause and remediation ids a diagnosis names, with a line on each."""
        from incidents import taxonomy as tx

        if as_json:
            print_json(tx.as_dict())
            return
        for title, terms in (("Root causes", tx.ROOT_CAUSES), ("Remediations", tx.REMEDIATIONS)):
            console.print(f"[bold]{title}[/bold]")
            for t in terms:
                console.print(f"  {t.id:<32} {t.description}", soft_wrap=True)

    @app.command()
    def diagnose(
        schema: bool = typer.Option(False, "--schema", help="print the diagnosis format's JSON Schema and exit"),
        check: Path = typer.Option(None, "--check", metavar="FILE",
                                   help="validate a diagnosis file (YAML or JSON) and exit: 0 valid, 2 not"),
        as_json: bool = typer.Option(False, "--json", help="with --check: one JSON object"),
    ):
        """The diagnosis format: `--schema` prints it, `--check FILE` validates a file.

        A diagnosis names the run, the root cause (an id from `sandbox taxonomy`), where it is
        (replica, version, component; each may be null), the evidence (PromQL and what it shows),
        the alternatives ruled out (each with the PromQL that rules it out), the remediation and a
        summary. Every problem is reported with its file, line and field.
        """
        from sandbox.grading.diagnosis import DiagnosisError, json_schema, load_diagnosis

        if schema:
            print_json(json_schema())
            return
        if check is None:
            fail("pass --schema or --check FILE (grading a live drill comes with `sandbox grade`)", code=2)
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


def register_grade(app: typer.Typer) -> None:
    @app.command()
    def grade(
        run: Path = typer.Argument(..., help="a run directory (runs/<run-id>) or a recording (case.tar.gz)"),
        diagnosis_file: Path = typer.Option(..., "--diagnosis", "-d", help="the diagnosis (YAML or JSON)"),
        key: Path = typer.Option(None, "--key", help="the run's key (default: keys/<run-id>.key in the sandbox "
                                 "home; for a recording, the .key file beside it)"),
        as_json: bool = typer.Option(False, "--json", help="one JSON object: score and criteria"),
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
        try:
            if is_archive(run):
                key = key or key_path_for(run)
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
            report = _grade(cfg, recorded, run, diagnosis)
        finally:
            _cleanup(scratch)
        if as_json:
            print_json(report.to_dict())
            return
        for c in report.criteria:
            console.print(f"  {c.name:<12} {c.points:>3}/{c.max_points:<3} {c.sentence}", soft_wrap=True)
        console.print(f"[bold]score {report.score}/100[/bold]")


def _cleanup(scratch: Path | None) -> None:
    import shutil

    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


def _grade(cfg, recorded, run: Path, diagnosis):
    from incidents.schema import IncidentError, load_catalogue
    from sandbox.grading.grader import Grader
    from sandbox.grading.recorded import RecordedPrometheus
    from sandbox.prometheus import PrometheusError

    try:
        incident = load_catalogue(cfg.incidents)[recorded.incident_id]
    except (IncidentError, KeyError) as e:
        fail(f"the run's incident {recorded.incident_id!r} cannot be loaded: {e}")
    try:
        with RecordedPrometheus(run / "prometheus") as prom:
            grader = Grader(incident, recorded.sealed["variant"], recorded.sealed["answer"], recorded.windows(), prom)
            return grader.grade(diagnosis)
    except PrometheusError as e:
        fail(str(e))
