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
