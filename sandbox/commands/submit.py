"""`sandbox diagnose` during a drill: take the diagnosis (file or prompts), grade it at once, end the drill.

The first submission counts; later ones (a drill that has not ended yet, or a second terminal) are
recorded under `diagnoses/` too, marked as not counted. The grade is computed on the drill's live
Prometheus, over the baseline and the incident up to now; the debrief is written beside it.
"""
from __future__ import annotations

# Lazy imports: each command imports its work when it runs, so `sandbox --help` and every command
# start without loading what other commands need (the grader's plots, the engine, Ray's client).
import json
import os
import signal
import time
from pathlib import Path

import yaml
from rich.prompt import Confirm, Prompt

from sandbox.commands.common import config, console, fail, print_json, running_state


def _ask_text(label: str, optional: bool = False) -> str | None:
    while True:
        value = Prompt.ask(label + (" [dim](enter: none)[/dim]" if optional else ""), default="" if optional else None,
                           show_default=False)
        if value.strip():
            return value.strip()
        if optional:
            return None
        console.print("[red]required[/red]")


def _ask_query(label: str) -> str | None:
    from incidents.promql import check_promql

    while True:
        q = Prompt.ask(label + " [dim](enter: done)[/dim]", default="", show_default=False).strip()
        if not q:
            return None
        try:
            check_promql(q)
            return q
        except ValueError as e:
            console.print(f"[red]{e}[/red]")


def prompt_diagnosis(run_id: str) -> dict:
    from incidents import taxonomy

    causes = [t.id for t in taxonomy.ROOT_CAUSES]
    remedies = [t.id for t in taxonomy.REMEDIATIONS]
    console.print("root causes: " + ", ".join(causes), soft_wrap=True)
    d = {"run": run_id, "root_cause": Prompt.ask("root cause", choices=causes, show_choices=False)}
    d["location"] = {k: _ask_text(f"location: {k}", optional=True) for k in ("replica", "version")}
    components = [c.id for c in taxonomy.COMPONENTS]
    console.print("components: " + ", ".join(components) + " (enter: none)", soft_wrap=True)
    d["location"]["component"] = Prompt.ask("location: component", choices=components + [""], show_choices=False,
                                            default="", show_default=False) or None
    d["evidence"] = []
    while (q := _ask_query("evidence query")) is not None:
        d["evidence"].append({"query": q, "observation": _ask_text("  what it shows")})
    d["hypotheses"] = []
    while Confirm.ask("rule out an alternative?", default=not d["hypotheses"]):
        cause = Prompt.ask("  alternative root cause", choices=causes, show_choices=False)
        q = _ask_query("  the query that rules it out")
        if q:
            d["hypotheses"].append({"root_cause": cause, "ruled_out_by": q})
    console.print("remediations: " + ", ".join(remedies), soft_wrap=True)
    d["remediation"] = [Prompt.ask("remediation", choices=remedies, show_choices=False)]
    d["summary"] = _ask_text("summary (one or two sentences)")
    return d


def submit(file: Path | None, as_json: bool) -> None:
    from sandbox.drill.record import running_drill
    from sandbox.grading.diagnosis import DiagnosisError, load_diagnosis, parse_diagnosis

    cfg = config()
    drill = running_drill(cfg.home)
    if drill is None:
        fail("no drill is running here; to grade a finished run: sandbox grade RUN --diagnosis FILE", code=2)
    run_dir = Path(drill["run_dir"])
    run_id = run_dir.name
    try:
        if file is not None:
            diagnosis = load_diagnosis(file)
            text = file.read_text()
        else:
            text = yaml.safe_dump(prompt_diagnosis(run_id), sort_keys=False)
            diagnosis = parse_diagnosis(text, "<prompts>")
    except DiagnosisError as e:
        fail(str(e), code=2)
    if diagnosis.run != run_id:
        fail(f"{file}: run: names {diagnosis.run!r}, but the drill running is {run_id!r}", code=2)
    report, debrief = grade_live(cfg, run_dir, diagnosis, drill.get("mode") == "interview")
    out_dir = run_dir / "diagnoses"
    out_dir.mkdir(exist_ok=True)
    n = len(list(out_dir.glob("*.yaml"))) + 1
    counted = n == 1
    (out_dir / f"{n:02d}.yaml").write_text(text)
    result = {**report.to_dict(), "counted": counted, "submission": n,
              "debrief": None if debrief is None else str(debrief)}
    (out_dir / f"{n:02d}.grade.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    if as_json:
        print_json(result)
    else:
        for c in report.criteria:
            console.print(f"  {c.name:<16} {c.points:>3}/{c.max_points:<3} {c.sentence}", soft_wrap=True)
        console.print(f"[bold]score {report.score}/100[/bold]"
                      + ("" if counted else f"  [yellow](submission {n}: recorded, not counted)[/yellow]"))
        if debrief:
            console.print(f"debrief: {debrief}")
    if counted:
        graded_at = time.time()
        os.kill(drill["pid"], signal.SIGINT)  # the drill ends as after Ctrl-C: faults reverted, record kept
        from sandbox.commands.grafana import annotate_after_drill

        annotate_after_drill(cfg, run_dir, drill["pid"], graded_at)  # only once the drill has ended


def grade_live(cfg, run_dir: Path, diagnosis, interview: bool):
    from incidents.schema import load_catalogue
    from sandbox.grading.debrief import write_debrief
    from sandbox.grading.grader import Grader
    from sandbox.grading.recorded import RecordedRun
    from services.stack.prometheus import PrometheusClient, PrometheusError

    recorded = RecordedRun(run_dir, cfg.keys_dir / f"{run_dir.name}.key", live=True)
    catalogue = load_catalogue(cfg.incidents)
    incident = catalogue[recorded.incident_id]
    page = recorded.public.get("page") or {}
    took = time.time() - page["paged_at"] if page.get("paged_at") else None
    asks = None
    if interview:
        path = run_dir / "asks.jsonl"
        asks = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    prom = PrometheusClient(running_state(cfg).prometheus_url)
    try:
        windows = recorded.windows()
        report = Grader(incident, recorded.sealed["variant"], recorded.sealed["answer"], windows, prom,
                        catalogue, recorded.sealed.get("mitigation")).grade(diagnosis, took, asks)
        debrief = write_debrief(run_dir, incident, recorded.sealed, windows, report, prom, recorded.record.events())
    except PrometheusError as e:
        fail(str(e))
    finally:
        prom.close()
    return report, debrief


