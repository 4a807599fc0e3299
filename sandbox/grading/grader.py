"""The grader: a 0-100 score for a diagnosis of a recorded run, with points and a sentence per criterion.

    root cause   30  the answer key's root cause, exactly
    location     10  shared over what the key locates (replica, version, component); a component
                     outside the stack (traffic, capacity) locates nothing, so null is as right
    evidence     30  cited queries re-run on the run's data, judged by the quantities they read
                     (sandbox/grading/citations.py): a query counts when it reads one the key's
                     distinguishing signals read, in any form, and shows the variant's direction
                     (for a drill with no fault: that nothing moved); one that shows nothing earns nothing
    hypotheses   20  an alternative ruled out by a query that reads a quantity on which its signature
                     and the true variant's disagree, the data showing the true direction: all 20 for
                     the strongest sibling (the variant this run looks most like), 10 for another;
                     in an incident with one cause, 20 for any
    remediation  10  where the candidate acted on the live stack (`sandbox mitigate` during the drill), what
                     the action achieved, by the recovery oracle's verdict (sandbox/mitigation/oracle.py):
                     recovered with the key's first remedy 10, with another action 5, not recovered or
                     made worse 0; otherwise (a replay, no action taken) the first remedy named among the
                     key's (5 when only a later one is). A remedy of the key the candidate tried and the
                     machine could not take (scale-out with no core free: nothing changed) counts as named:
                     10 for the first, 5 for another, where it scores more than what was then done

A right cause with no evidence scores at most 50. A diagnosis whose cause is wrong keeps half its
evidence points (real signals, read into the wrong conclusion) and none for alternatives (they
were set against the wrong cause): at most 35. Where the key blames one replica, naming another
is a wrong diagnosis (that replica is healthy) and its remedy would act on the healthy replica:
no cause, no remedy points.

Deterministic: the same run, key and diagnosis give the same report, byte for byte (queries run
over fixed windows and steps; figures are rounded; nothing depends on the clock).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from incidents import taxonomy
from incidents.readings import readings
from incidents.schema import load_catalogue
from sandbox.drill.verify import family
from sandbox.grading.citations import Citations
from sandbox.grading.criterion import POINTS, Criterion
from sandbox.grading.diagnosis import Diagnosis
from sandbox.grading.evidence import BY_NAME
from sandbox.grading.recorded import Windows
from sandbox.grading.remediation import acted_remedy, refused_remedy

_CATALOGUES: dict[str, dict] = {}  # incidents directory -> catalogue: loading validates through promtool


def catalogue_of(incident) -> dict:
    """The catalogue the incident came from (for the signatures of causes from other incidents)."""
    home = str(Path(incident.file).resolve().parent)
    if home not in _CATALOGUES:
        _CATALOGUES[home] = load_catalogue(home)
    return _CATALOGUES[home]


@dataclass
class Report:
    run: str
    score: int
    criteria: list[Criterion]
    time_to_diagnosis_s: float | None

    def to_dict(self) -> dict:
        return {"run": self.run, "score": self.score, "criteria": [c.to_dict() for c in self.criteria],
                "time_to_diagnosis_s": self.time_to_diagnosis_s}


class Grader:
    def __init__(self, incident, variant: str, answer: dict, windows: Windows, prom, catalogue: dict | None = None,
                 mitigation: dict | None = None):
        """mitigation: the run's sealed record of the candidate's actions and the oracle's verdict, if any."""
        self.incident, self.variant, self.answer, self.w, self.prom = incident, variant, answer, windows, prom
        self.mitigation = mitigation
        self.cite = Citations(incident, variant, answer, windows, prom,
                              catalogue if catalogue is not None else catalogue_of(incident))

    def observe(self, expr: str):
        """Direction of `expr` between the baseline and the incident window of this run (memoized)."""
        return self.cite.look(expr)

    def strongest_sibling(self) -> tuple[str | None, list[str]]:
        return self.cite.strongest_sibling()

    # -- criteria -------------------------------------------------------------------
    def grade(self, d: Diagnosis, time_to_diagnosis_s: float | None = None, asks: list[dict] | None = None) -> Report:
        """asks: the interview's log of `sandbox ask` ([{time, evidence}]); None outside an interview."""
        criteria = [self.root_cause(d), self.location(d), self.evidence(d), self.hypotheses(d), self.remediation(d)]
        if not self.cause_right(d):
            for c in criteria:
                if c.name == "evidence" and c.points:  # real signals, read into the wrong conclusion: half
                    c.points //= 2
                    c.sentence += "; halved: they support a cause that is not what happened"
                if c.name == "hypotheses" and c.points:
                    c.points = 0
                    c.sentence += "; no points: they were ruled out in favour of a cause that is not what happened"
        if asks is not None:  # an interview: the order of the asks is graded too, on 20 of the 100 points
            for c in criteria:
                c.points, c.max_points = round(c.points * 0.8), round(c.max_points * 0.8)
            criteria += self.discipline(asks)
        return Report(d.run, sum(c.points for c in criteria), criteria,
                      None if time_to_diagnosis_s is None else round(time_to_diagnosis_s, 1))

    def wrong_replica(self, d: Diagnosis) -> bool:
        """The key blames one replica and the diagnosis another: acting on it would drain a healthy one."""
        want = self.answer["location"].get("replica")
        return bool(want) and d.location.replica is not None and not _same_place("replica", d.location.replica, want)

    def cause_right(self, d: Diagnosis) -> bool:
        return d.root_cause == self.answer["root_cause"] and not self.wrong_replica(d)

    def root_cause(self, d: Diagnosis) -> Criterion:
        right = self.cause_right(d)
        if d.root_cause == self.answer["root_cause"] and not right:
            sentence = f"root cause {d.root_cause!r} is right, but on replica {d.location.replica}, which is healthy"
        else:
            sentence = f"root cause {d.root_cause!r} is " + ("right" if right else "not what happened")
        return Criterion("root_cause", POINTS["root_cause"] if right else 0, POINTS["root_cause"], sentence)

    def location(self, d: Diagnosis) -> Criterion:
        key = {k: v for k, v in self.answer["location"].items() if v is not None}
        notes = []
        if "component" in key and not _in_stack(key["component"]):
            notes.append(f"the component does not matter here ({key.pop('component')} is not a part of the stack)")
        if not key:
            return Criterion("location", POINTS["location"], POINTS["location"],
                             "; ".join(["nothing to locate"] + notes))
        got = {"replica": d.location.replica, "version": d.location.version, "component": d.location.component}
        hits = {k: _same_place(k, got[k], v) for k, v in sorted(key.items())}
        points = round(POINTS["location"] * sum(hits.values()) / len(hits))
        right = [k for k, ok in hits.items() if ok]
        wrong = [f"{k}: expected {key[k]!r}, " + (f"named {got[k]!r}" if got[k] is not None else "named none")
                 for k, ok in hits.items() if not ok]
        sentence = (f"located by {', '.join(right)}" if right else "not located") + \
                   (f"; {'; '.join(wrong)}" if wrong else "") + (f"; {'; '.join(notes)}" if notes else "")
        return Criterion("location", points, POINTS["location"], sentence,
                         [{"field": k, "right": ok} for k, ok in hits.items()])

    def evidence(self, d: Diagnosis) -> Criterion:
        wanted = self.cite.evidence_quantities()
        covered, details = [], []
        for item in d.evidence:
            detail, shown = self.cite.judge_evidence(item.query)
            details.append(detail)
            if shown is not None and shown not in covered:
                covered.append(shown)
        need = min(2, len(wanted)) or 1
        points = round(POINTS["evidence"] * min(len(covered), need) / need)
        counted = sum(x["counts"] for x in details)
        shown_names = ", ".join(sorted({q for q, _ in covered}))
        if not d.evidence:
            sentence = "no evidence cited"
        elif not counted:
            sentence = "no cited query both reads what tells this cause apart and " + \
                       ("stays flat" if self.cite.no_fault else "shows the change it makes")
        else:
            sentence = f"{counted} of {len(details)} cited queries show what tells this cause apart ({shown_names})"
        if counted and len(covered) < need:
            missing = [q + "".join(f" ({k} {v})" for k, v in part) for q, part in wanted if (q, part) not in covered]
            sentence += f"; {need - len(covered)} more wanted (here: {', '.join(missing)})"
        return Criterion("evidence", points, POINTS["evidence"], sentence, details)

    def hypotheses(self, d: Diagnosis) -> Criterion:
        sibling, _ = self.cite.strongest_sibling()
        target = self.incident.variants[sibling].answer.root_cause if sibling else None
        details, best = [], 0
        for h in d.hypotheses:
            x = self.cite.rule_out(h.root_cause, h.ruled_out_by)
            x["strongest"] = target is None or h.root_cause == target
            details.append(x)
            if x["separates"]:
                best = max(best, POINTS["hypotheses"] if x["strongest"] else POINTS["hypotheses"] // 2)
        ruled = [x for x in details if x["separates"]]
        if ruled and (target is None or any(x["strongest"] for x in ruled)):
            x = next(x for x in ruled if x["strongest"])
            sentence = f"{x['root_cause']} is ruled out by {x['separated_by']}: {x['why']}"
        elif ruled:
            sentence = (f"{ruled[0]['root_cause']} is ruled out by {ruled[0]['separated_by']}, but not the strongest "
                        f"alternative ({target})")
        elif not d.hypotheses:
            sentence = "no alternative ruled out"
        else:
            sentence = "no alternative ruled out by a quantity that separates it from what happened: " + \
                       details[0]["why"]
        return Criterion("hypotheses", best, POINTS["hypotheses"], sentence, details)

    def discipline(self, asks: list[dict]) -> list[Criterion]:
        asked = [BY_NAME[a["evidence"]] for a in asks if a.get("evidence") in BY_NAME]
        names = [p.name for p in asked]
        if family(self.incident) == "latency":
            looked = any(p.decomposes_latency for p in asked)
            did, didnt = ("split latency into its phases (queue, prefill, decode; by replica or version)",
                          "split latency into its phases (queue, prefill, decode; by replica or version)")
        else:
            page = {r.quantity for r in readings(self.incident.signals[self.incident.primary])}
            looked = any(page & {r.quantity for _, q in p.queries for r in readings(q)} for p in asked)
            did, didnt = "looked at the paged signal itself", "look at the paged signal itself"
        first = Criterion("decomposed_first", 8 if looked else 0, 8,
                          (did if looked else f"did not {didnt}") + " before concluding", names)
        sibling, _ = self.cite.strongest_sibling()
        if sibling is None:
            sep = Criterion("asked_separating", 8, 8, "a single-cause incident: nothing to separate")
        else:
            cause = self.incident.variants[sibling].answer.root_cause
            hit = [p.name for p in asked if any(self.cite.separating(cause, q) for _, q in p.queries)]
            sep = Criterion("asked_separating", 8 if hit else 0, 8,
                            f"asked for what separates the top two causes ({', '.join(hit)})" if hit else
                            f"never asked for what separates the top two causes (this cause and {cause})")
        n = len(asks)
        count = Criterion("asks", 4 if n <= 6 else 2 if n <= 10 else 0, 4, f"{n} asks (6 or fewer earn all 4 points)")
        return [first, sep, count]

    def remediation(self, d: Diagnosis) -> Criterion:
        right = self.answer["remediation"]
        tried = refused_remedy(self.mitigation, right)
        if self.mitigation and self.mitigation.get("actions"):
            acted = acted_remedy(self.mitigation, right, control=self.incident.page.alert is None)
            return tried if tried is not None and tried.points > acted.points else acted
        if tried is not None:
            return tried
        if self.wrong_replica(d):
            return Criterion("remediation", 0, POINTS["remediation"],
                             f"the remedy would act on replica {d.location.replica}, a healthy one")
        if d.remediation and d.remediation[0] in right:
            return Criterion("remediation", POINTS["remediation"], POINTS["remediation"],
                             f"{d.remediation[0]!r} fixes it")
        later = [r for r in d.remediation if r in right]
        if later:
            return Criterion("remediation", POINTS["remediation"] // 2, POINTS["remediation"],
                             f"{later[0]!r} fixes it, but comes after {d.remediation[0]!r}")
        return Criterion("remediation", 0, POINTS["remediation"], "none of the remedies fixes it")


def _r(v):
    return None if v is None else round(v, 4)


def _in_stack(component: str) -> bool:
    try:
        return taxonomy.component(component).in_stack
    except ValueError:  # a key written before the list was closed: graded as a part of the stack
        return True


def _same_place(key: str, got: str | None, want: str) -> bool:
    if got is None:
        return False
    if key in ("replica", "version"):
        return got.strip().lower() == str(want).strip().lower()
    # components are ids from a closed list; a diagnosis may write one in other case or spacing ("KV cache")
    try:
        return taxonomy.component(got).id == taxonomy.component(want).id
    except ValueError:
        return got.strip().lower() == str(want).strip().lower()
