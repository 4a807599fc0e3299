"""What a drill's faults are, built before anything starts, and the answer key they resolve to."""
from __future__ import annotations

from faults.deploys import Deploy
from faults.registry import build
from sandbox.drill.plan import DrillPlan
from services.stack.state import StackState


def build_faults(plan: DrillPlan) -> list[list[tuple[dict, object]]]:
    """(spec, fault) for every fault of every planned event, built and validated; ValueError names the problem."""

    built = []
    for ev in plan.events:
        faults = [(dict(spec), build(spec)) for spec in ev.faults]
        for _, f in faults:
            f.validate()
        built.append(faults)
    return built


def resolved_answer(answer, fault_log: list[dict], state: StackState | None) -> dict:
    """The answer key with `injected` locations replaced by what the faults actually targeted."""
    loc = dict(answer.location) if isinstance(answer.location, dict) else vars(answer.location).copy()
    injected = [f["location"] or {} for f in fault_log if f["event"] == "inject"]
    for key in ("replica", "version"):
        if loc.get(key) == "injected":
            loc[key] = next((l.get(key) for l in injected if l.get(key)), None)
    return {"root_cause": answer.root_cause, "remediation": list(answer.remediation), "location": loc,
            "evidence": list(answer.evidence)}


def setup_fault(incident):
    """The incident's healthy baseline settings as a deploy (before traffic starts), or None."""
    setup = getattr(incident, "setup", None)
    if not setup:
        return None

    spec = {"type": Deploy.type, "set": dict(setup)}
    fault = build(spec)
    fault.validate()
    return spec, fault
