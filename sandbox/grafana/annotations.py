"""A graded run's timeline as Grafana annotations: the incident window, the deploys, the page, the diagnosis.

Written only after grading (the incident window and its start are the answer's business until
then). Each annotation is posted to every sandbox dashboard (`dashboardUID`), so the built-in
"Annotations & Alerts" layer of each shows it with no annotation query to set up. Tags say what
kind of mark it is and which run it belongs to; none names a cause.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sandbox.grading.recorded import RecordedRun
from sandbox.grafana.push import board_files
from sandbox.grafana.target import GrafanaTarget, call

TAG = "sandbox"


@dataclass(frozen=True)
class Annotation:
    time_ms: int
    text: str
    tags: tuple[str, ...]
    time_end_ms: int | None = None  # a region when set

    def __post_init__(self):
        if self.time_end_ms is not None and self.time_end_ms < self.time_ms:
            raise ValueError(f"annotation {self.text!r} ends before it starts")


def ms(t: float) -> int:
    """Epoch seconds to the epoch milliseconds Grafana takes."""
    return round(t * 1000)


def counted_grade(run_dir: Path) -> tuple[dict, float] | None:
    """The counted submission's grade and when it was written (epoch s), or None if the run is ungraded."""
    for path in sorted((Path(run_dir) / "diagnoses").glob("*.grade.json")):
        grade = json.loads(path.read_text())
        if grade.get("counted", True):
            return grade, path.stat().st_mtime
    return None


def run_annotations(run_dir: Path, key_file: Path, grade: dict, graded_at: float) -> list[Annotation]:
    """The marks for one graded run; times in epoch milliseconds, as Grafana takes them."""
    # live=True: only the windows' start and injection time are read here, and a run graded
    # during its drill has no Prometheus snapshot yet.
    run = RecordedRun(Path(run_dir), Path(key_file), live=True)
    run_id = run.run_id
    tags = (TAG, f"run:{run_id}")
    w = run.windows()
    inject_at = w.t0 + w.inject_s
    marks = [Annotation(ms(inject_at), f"incident window, run {run_id}: from its start to the grade",
                        tags + ("incident-window",), ms(max(graded_at, inject_at)))]
    for event in run.record.events():
        if event.get("kind") == "deploy":
            marks.append(Annotation(ms(event["time"]), f"deploy: version {event.get('version')}", tags + ("deploy",)))
        elif event.get("kind") == "page" and event.get("alert"):
            marks.append(Annotation(ms(event["time"]), f"page: {event['alert']}", tags + ("page",)))
    took = grade.get("time_to_diagnosis_s")
    after = "" if took is None else f", {took:.0f}s after the page"
    marks.append(Annotation(ms(graded_at), f"diagnosis graded: {grade.get('score')}/100{after}",
                            tags + ("diagnosis",)))
    return marks


def post(target: GrafanaTarget, marks: list[Annotation], boards_dir: Path | None = None) -> list[int]:
    """Post every mark to every sandbox dashboard; the ids Grafana gave them."""
    uids = [json.loads(p.read_text())["uid"] for p in (board_files(boards_dir) if boards_dir else board_files())]
    api = target.api()
    ids = []
    for uid in uids:
        for m in marks:
            made = call(target, f"add an annotation to dashboard {uid!r}", api.annotations.add_annotation,
                        dashboard_uid=uid, time_from=m.time_ms, time_to=m.time_end_ms, tags=list(m.tags),
                        text=m.text)
            ids.append(made.get("id"))
    return ids


def annotate_run(target: GrafanaTarget, run_dir: Path, key_file: Path, graded_at: float | None = None) -> dict:
    """Annotate a graded run; ValueError when it has no counted grade."""
    found = counted_grade(run_dir)
    if found is None:
        raise ValueError(f"run {Path(run_dir).name} has not been graded: annotations come after the grade")
    grade, written_at = found
    marks = run_annotations(run_dir, key_file, grade, graded_at or written_at)
    ids = post(target, marks)
    return {"run": Path(run_dir).name, "annotations": len(marks), "posted": len(ids),
            "kinds": sorted({m.tags[-1] for m in marks})}
