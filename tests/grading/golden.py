"""Golden diagnoses for a recorded run, written from its incident and answer key (then committed).

    good                 the right cause, located, the key's evidence signals, the strongest alternative
                         ruled out by a signal that separates them, the first remedy
    other-forms          the same diagnosis with its evidence and ruling-out query in other forms
                         (tests/grading/forms.py: server for client side, mean for quantile, per
                         replica for fleet): must score what `good` scores
    no-evidence          the same cause, location and remedy, nothing cited
    irrelevant-evidence  the same cause, location and remedy, citing quantities that do not tell it apart
    wrong-reason         the right cause argued with the look-alike's evidence (where that differs)
    wrong-cause          a cause from another incident, with a query that shows nothing of this one
    decoy                the look-alike: the strongest sibling's cause (or, for a single-cause incident,
                         its classic misreading), argued with that cause's own signals
    wrong-replica        the good diagnosis pointed at a healthy replica (where the key locates one)

    python tests/grading/golden.py FIXTURE_RUN_DIR   # writes FIXTURE_RUN_DIR/golden/*.yaml
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from incidents import taxonomy  # noqa: E402
from incidents.readings import readings  # noqa: E402
from sandbox.grading.grader import Grader  # noqa: E402
from sandbox.grading.recorded import RecordedPrometheus, RecordedRun  # noqa: E402
from tests.grading.forms import FORMS  # noqa: E402

# The classic misreading of each single-cause incident (no sibling to mistake it for).
DECOYS = {"traffic-surge": "prompt-length-shift",
          "quiet-shift": "capacity-exceeded"}
LOAD = "sum(rate(sandbox_traffic_requests_total[1m]))"
# Queries that read something real and rarely what separates a cause: the first two that read none of
# the key's evidence quantities are the irrelevant evidence.
ASIDES = ("sum(rate(vllm:generation_tokens_total[1m]))", "max(vllm:kv_cache_usage_perc)", LOAD,
          "histogram_quantile(0.99, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[1m])))",
          "sum(vllm:num_requests_waiting)")


def _plain(location) -> dict:
    return dict(location) if isinstance(location, dict) else dict(vars(location))


def _diagnosis(run_id: str, cause: str, location: dict, evidence: list[str], hypotheses: list[tuple[str, str]],
               remedy: str, summary: str) -> dict:
    return {"run": run_id, "root_cause": cause, "location": dict(location),
            "evidence": [{"query": q, "observation": "moved between the baseline and the incident"} for q in evidence],
            "hypotheses": [{"root_cause": c, "ruled_out_by": q} for c, q in hypotheses],
            "remediation": [remedy], "summary": summary}


def golden(run_dir: Path, key: Path, incident) -> dict[str, dict]:
    run = RecordedRun(run_dir, key)
    answer, variant = run.sealed["answer"], run.sealed["variant"]
    sig = incident.signals
    with RecordedPrometheus(run_dir / "prometheus") as prom:
        grader = Grader(incident, variant, answer, run.windows(), prom)
        sibling, _ = grader.strongest_sibling()
        alternative = incident.variants[sibling].answer.root_cause if sibling else DECOYS.get(incident.id,
                                                                                               "capacity-exceeded")
        separating = next((sig[s] for s in sorted(sig) if grader.cite.rule_out(alternative, sig[s])["separates"]), None)
        w = run.windows()
        replicas = sorted({r["metric"].get("replica") for r in prom.query(
            'count by (replica) ({replica!=""})', at=w.t0 + w.end_s)} - {None})
    loc, rid, cause, remedy = answer["location"], run.run_id, answer["root_cause"], answer["remediation"][0]
    ruled = [(alternative, separating)] if separating else []
    good = _diagnosis(rid, cause, loc, [sig[s] for s in answer["evidence"]], ruled, remedy, "the answer key's cause")
    forms, form_rule = FORMS[(incident.id, variant)]
    wanted = {r.quantity for s in answer["evidence"] for r in readings(sig[s])}
    asides = [q for q in ASIDES if not {r.quantity for r in readings(q)} & wanted][:2]
    out = {
        "good": good,
        "other-forms": _diagnosis(rid, cause, loc, forms, [(alternative, form_rule)], remedy, "the same, other forms"),
        "no-evidence": {**good, "evidence": [], "hypotheses": [], "summary": "right cause, nothing shown"},
        "irrelevant-evidence": _diagnosis(rid, cause, loc, asides, [(alternative, asides[0])], remedy,
                                          "right cause, evidence that does not tell it apart"),
    }
    causes = {v.answer.root_cause for v in incident.variants.values()}
    wrong = next(t.id for t in taxonomy.ROOT_CAUSES if t.id not in causes and t.id != DECOYS.get(incident.id))
    out["wrong-cause"] = _diagnosis(rid, wrong, {"replica": None, "version": None, "component": "traffic"}, [LOAD],
                                    [], "no-action", "a cause from elsewhere")
    if sibling is not None:
        sib = incident.variants[sibling].answer
        sib_loc = {k: (loc.get(k) if v == "injected" else v) for k, v in _plain(sib.location).items()}
        out["decoy"] = _diagnosis(rid, sib.root_cause, sib_loc, [sig[s] for s in sib.evidence], [],
                                  sib.remediation[0], "the look-alike")
        theirs = [sig[s] for s in sib.evidence if not {r.quantity for r in readings(sig[s])} & wanted]
        if theirs:
            out["wrong-reason"] = _diagnosis(rid, cause, loc, theirs, [(alternative, sig[incident.primary])], remedy,
                                             "right cause, the look-alike's reasons")
    else:
        out["decoy"] = _diagnosis(rid, alternative, {"replica": None, "version": None, "component": None}, [LOAD], [],
                                  "rollback-deploy", "the classic misreading")
    if loc.get("replica") and len(replicas) > 1:
        other = next(r for r in replicas if r != loc["replica"])
        out["wrong-replica"] = {**good, "location": {**loc, "replica": other}, "summary": "a healthy replica"}
    return out


def write(run_dir: Path, key: Path, incident) -> list[Path]:
    (run_dir / "golden").mkdir(exist_ok=True)
    for old in (run_dir / "golden").glob("*.yaml"):
        old.unlink()
    paths = []
    for name, d in golden(run_dir, key, incident).items():
        path = run_dir / "golden" / f"{name}.yaml"
        path.write_text(yaml.safe_dump(d, sort_keys=False, width=200))
        paths.append(path)
    return paths


if __name__ == "__main__":
    from incidents.schema import load_catalogue

    catalogue = load_catalogue(ROOT / "incidents")
    for arg in sys.argv[1:]:
        run_dir = Path(arg).resolve()
        key = run_dir.parent / f"{run_dir.name}.key"
        for p in write(run_dir, key, catalogue[RecordedRun(run_dir, key).incident_id]):
            print(p)
