"""Golden diagnoses for a recorded run, written from its incident and answer key (then committed).

    good           the right cause, located, the key's evidence signals, the strongest sibling ruled out
                   by the signal that separates them, the first remedy
    no-evidence    the same cause, location and remedy, nothing cited
    wrong-cause    a cause from another incident, with a query that shows nothing of this one
    decoy          the look-alike: the strongest sibling's cause (or, for a single-cause incident, its
                   classic misreading), argued with that cause's own signals
    wrong-replica  the good diagnosis pointed at a healthy replica (where the key locates one)

    python tests/grading/golden.py FIXTURE_RUN_DIR   # writes FIXTURE_RUN_DIR/golden/*.yaml
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from incidents import taxonomy  # noqa: E402
from sandbox.grading.grader import Grader  # noqa: E402
from sandbox.grading.recorded import RecordedPrometheus, RecordedRun  # noqa: E402

# The classic misreading of each single-cause incident (no sibling to mistake it for).
DECOYS = {"tpot-regression": "slow-attention-kernel", "traffic-surge": "prompt-length-shift",
          "quiet-shift": "capacity-exceeded"}
LOAD = "sum(rate(sandbox_traffic_requests_total[1m]))"


def _plain(location) -> dict:
    return dict(location) if isinstance(location, dict) else dict(vars(location))


def golden(run_dir: Path, key: Path, incident) -> dict[str, dict]:
    run = RecordedRun(run_dir, key)
    answer, variant = run.sealed["answer"], run.sealed["variant"]
    sig = incident.signals
    with RecordedPrometheus(run_dir / "prometheus") as prom:
        grader = Grader(incident, variant, answer, run.windows(), prom)
        sibling, separating = grader.strongest_sibling()
        w = run.windows()
        replicas = sorted({r["metric"].get("replica") for r in prom.query(
            'count by (replica) ({replica!=""})', at=w.t0 + w.end_s)} - {None})
    loc = answer["location"]
    good = {
        "run": run.run_id, "root_cause": answer["root_cause"], "location": dict(loc),
        "evidence": [{"query": sig[s], "observation": f"{s} moved between the baseline and the incident"}
                     for s in answer["evidence"]],
        "hypotheses": [], "remediation": [answer["remediation"][0]], "summary": "the answer key's cause",
    }
    if sibling is not None and separating:
        good["hypotheses"] = [{"root_cause": incident.variants[sibling].answer.root_cause,
                               "ruled_out_by": sig[separating[0]]}]
    elif sibling is None:
        alternative = DECOYS.get(incident.id, "capacity-exceeded")
        good["hypotheses"] = [{"root_cause": alternative, "ruled_out_by": sig[incident.primary]}]
    causes = {v.answer.root_cause for v in incident.variants.values()}
    wrong = next(t.id for t in taxonomy.ROOT_CAUSES if t.id not in causes and t.id != DECOYS.get(incident.id))
    out = {
        "good": good,
        "no-evidence": {**good, "evidence": [], "hypotheses": [], "summary": "right cause, nothing shown"},
        "wrong-cause": {"run": run.run_id, "root_cause": wrong, "location": {"replica": None, "version": None,
                        "component": "traffic"}, "evidence": [{"query": LOAD, "observation": "load"}],
                        "hypotheses": [], "remediation": ["no-action"], "summary": "a cause from elsewhere"},
    }
    if sibling is not None:
        sib = incident.variants[sibling].answer
        out["decoy"] = {"run": run.run_id, "root_cause": sib.root_cause,
                        "location": {k: (loc.get(k) if v == "injected" else v) for k, v in _plain(sib.location).items()},
                        "evidence": [{"query": sig[s], "observation": f"{s}"} for s in sib.evidence],
                        "hypotheses": [], "remediation": [sib.remediation[0]], "summary": "the look-alike"}
    else:
        out["decoy"] = {"run": run.run_id, "root_cause": DECOYS.get(incident.id, "capacity-exceeded"),
                        "location": {"replica": None, "version": None, "component": None},
                        "evidence": [{"query": LOAD, "observation": "load"}], "hypotheses": [],
                        "remediation": ["rollback-deploy"], "summary": "the classic misreading"}
    if loc.get("replica") and len(replicas) > 1:
        other = next(r for r in replicas if r != loc["replica"])
        out["wrong-replica"] = {**good, "location": {**loc, "replica": other}, "summary": "a healthy replica"}
    return out


def write(run_dir: Path, key: Path, incident) -> list[Path]:
    (run_dir / "golden").mkdir(exist_ok=True)
    paths = []
    for name, d in golden(run_dir, key, incident).items():
        path = run_dir / "golden" / f"{name}.yaml"
        path.write_text(yaml.safe_dump(d, sort_keys=False, width=200))
        paths.append(path)
    return paths


if __name__ == "__main__":
    from incidents.schema import load_catalogue

    run_dir = Path(sys.argv[1]).resolve()
    key = run_dir.parent / f"{run_dir.name}.key"
    incident_id = RecordedRun(run_dir, key).incident_id
    for p in write(run_dir, key, load_catalogue(ROOT / "incidents")[incident_id]):
        print(p)
