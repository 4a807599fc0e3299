"""The remediation points of a drill where the candidate acted on the live stack (`sandbox mitigate`), from the run's
sealed record of the actions and the recovery oracle's verdict: what was done and what it achieved, and a remedy of
the key the machine had no room for, graded as named. A replay (no action) is graded by the named remedy, in the
grader itself."""
from __future__ import annotations

from sandbox.grading.criterion import POINTS, Criterion


def refused_remedy(mitigation: dict | None, right: list[str]) -> Criterion | None:
    """The key's remedy the candidate tried where the machine had no room for it (`sandbox mitigate` refused it,
    nothing changed): the choice was right and the machine could not carry it out, so it is graded as named.
    None where no such attempt was made."""
    tried = [r["action"] for r in (mitigation or {}).get("refused") or [] if r["action"] in right]
    if not tried:
        return None
    full = right[0] in tried
    how = f"{right[0]}, the key's first remedy" if full else f"{tried[0]}, an accepted remedy, not the best"
    return Criterion("remediation", POINTS["remediation"] if full else POINTS["remediation"] // 2,
                     POINTS["remediation"], f"tried: {how}; this machine had no room for it (refused, nothing "
                                            "changed), so the attempt is graded as named")


def acted_remedy(mitigation: dict, right: list[str], control: bool) -> Criterion:
    """Graded by what the actions achieved: the verdict is about the last one. `control`: the drill has no page to
    recover from (its report only), so any change is a disruption."""
    actions = [a["action"] for a in mitigation["actions"]]
    verdict = mitigation.get("verdict") or {}
    done = ", then ".join(actions)
    if control:
        if set(actions) == {"no-action"}:
            return Criterion("remediation", POINTS["remediation"], POINTS["remediation"],
                             "acted: no-action, the right call on a healthy stack")
        return Criterion("remediation", 0, POINTS["remediation"],
                         f"acted: {done}; made it worse: a change to a healthy stack, with nothing to fix")
    if actions and set(actions) == {"no-action"} and "no-action" in right:
        # the cause is outside the stack (the clients' traffic changed): leaving the stack as it is was the call,
        # and no SLO comes back for it
        full = right[0] == "no-action"
        return Criterion("remediation", POINTS["remediation"] if full else POINTS["remediation"] // 2,
                         POINTS["remediation"], "acted: no-action, " + (
                             "the key's first remedy: nothing in the stack to undo" if full else
                             "an accepted remedy, not the best"))
    outcome = verdict.get("outcome")
    if outcome == "recovered":
        ttm = verdict.get("ttm_s")
        full = actions[-1] == right[0]
        points = POINTS["remediation"] if full else POINTS["remediation"] // 2
        how = "the key's first remedy" if full else \
            "an accepted remedy, not the best" if actions[-1] in right else "an action the key does not list"
        return Criterion("remediation", points, POINTS["remediation"],
                         f"acted: {done}; service recovered ({how}), {ttm:.0f} s after the page"
                         if ttm is not None else f"acted: {done}; service recovered ({how})")
    if outcome == "worse":
        return Criterion("remediation", 0, POINTS["remediation"],
                         f"acted: {done}; made it worse: {', '.join(verdict.get('other_pages') or [])} "
                         "paged after it")
    why = verdict.get("reason") or "the drill ended before the oracle could judge it"
    return Criterion("remediation", 0, POINTS["remediation"], f"acted: {done}; not recovered: {why}")
