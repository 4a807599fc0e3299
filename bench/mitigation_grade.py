"""The grader's remediation points for a mitigation case: issue 17's point 4 on the table's own runs.

A case's drill is graded with the answer key's own diagnosis (its root cause, its evidence, its remedies), so the
only thing that varies between the cases of one variant is what the candidate did and what the oracle saw: the
remediation criterion then reads 10 for the best action that recovered, partial for an accepted one, 0 for a wrong
one, and 0 "made it worse" for any change to the control's healthy stack.

    .venv/bin/python bench/mitigation_grade.py RUN_DIR INCIDENT VARIANT     one JSON object: points and sentence

`sandbox grade RUN -d DIAGNOSIS --json --no-debrief` does the grading (the run's key from the sandbox home).
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from incidents.schema import load_incident  # noqa: E402 - after the repo is on the path

SANDBOX = REPO / ".venv" / "bin" / "sandbox"


def key_diagnosis(run_id: str, incident_id: str, variant: str) -> dict:
    """The answer key as a candidate would write it: right cause, its evidence, its remedies."""
    incident = load_incident(REPO / "incidents" / f"{incident_id}.yaml")
    answer = incident.variants[variant].answer
    cited = list(answer.evidence) or [incident.primary]
    other = "capacity-exceeded" if answer.root_cause == "no-fault" else "no-fault"
    return {"run": run_id, "root_cause": answer.root_cause,
            "location": {k: None for k in ("replica", "version", "component")},
            "evidence": [{"query": incident.signals[s], "observation": f"{s} moved"} for s in cited],
            "hypotheses": [{"root_cause": other, "ruled_out_by": incident.signals[incident.primary]}],
            "remediation": list(answer.remediation), "summary": "the answer key's cause"}


def grade_remediation(run_dir: Path, incident_id: str, variant: str, timeout_s: float = 180.0) -> dict:
    """{"points", "max", "sentence"} of the remediation criterion, or {"error": why} where grading failed."""
    run_dir = Path(run_dir)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(key_diagnosis(run_dir.name, incident_id, variant), f)
    try:
        out = subprocess.run([str(SANDBOX), "grade", str(run_dir), "-d", f.name, "--json", "--no-debrief"],
                             capture_output=True, text=True, timeout=timeout_s, check=False)
    finally:
        Path(f.name).unlink(missing_ok=True)
    try:
        report = json.loads(out.stdout)
        c = next(c for c in report["criteria"] if c["name"] == "remediation")
    except (json.JSONDecodeError, KeyError, StopIteration, TypeError):
        return {"error": f"rc {out.returncode}: {(out.stderr or out.stdout)[-300:]}"}
    return {"points": c["points"], "max": c["max"], "sentence": c["sentence"]}


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    print(json.dumps(grade_remediation(Path(sys.argv[1]), sys.argv[2], sys.argv[3])))
