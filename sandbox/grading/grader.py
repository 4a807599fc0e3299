"""The grader: a 0-100 score for a diagnosis of a recorded run, with points and a sentence per criterion.

    root cause   35  the answer key's root cause, exactly
    location     15  shared over what the key locates (replica, version, component)
    evidence     25  cited queries re-run on the run's data: each must read a metric of the variant's
                     distinguishing signals and show a change beyond baseline noise (for a drill with
                     no fault: show that nothing moved); a query that shows nothing earns nothing
    hypotheses   15  the strongest sibling cause (the variant whose signature this run matches best)
                     ruled out by a query that really separates them: it reads a signal that
                     contradicts the sibling here and moves the way that signal moved
    remediation  10  the first remedy among the key's (5 when only a later one is)

A diagnosis whose cause is wrong keeps half its evidence and hypothesis points (real signals, read
into the wrong conclusion). Where the key blames one replica, naming another is a wrong diagnosis
(that replica is healthy) and its remedy would act on the healthy replica: no cause, no remedy points.

Deterministic: the same run, key and diagnosis give the same report, byte for byte (queries run
over fixed windows and steps; figures are rounded; nothing depends on the clock).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from incidents.promql import metric_families
from sandbox.drill.verify import OTHERS_REL_CHANGE, REL_CHANGE, family, observe
from sandbox.grading.diagnosis import Diagnosis
from sandbox.grading.evidence import BY_NAME
from sandbox.grading.recorded import Windows

POINTS = {"root_cause": 35, "location": 15, "evidence": 25, "hypotheses": 15, "remediation": 10}


@dataclass
class Criterion:
    name: str
    points: int
    max_points: int
    sentence: str
    details: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"name": self.name, "points": self.points, "max": self.max_points, "sentence": self.sentence,
                "details": self.details}


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
    def __init__(self, incident, variant: str, answer: dict, windows: Windows, prom):
        self.incident, self.variant, self.answer, self.w, self.prom = incident, variant, answer, windows, prom
        self._observed: dict[str, object] = {}

    # -- measuring ------------------------------------------------------------------
    def observe(self, expr: str):
        """Direction of `expr` between the baseline and the incident window of this run (memoized)."""
        if expr not in self._observed:
            w = self.w
            # judged as `sandbox verify` judges: a control drill's "flat" allows the machine's drift
            rel = OTHERS_REL_CHANGE["latency"] if family(self.incident) == "control" else REL_CHANGE
            self._observed[expr] = observe(self.prom, expr, expr, w.t0, w.inject_s, w.end_s, settled_s=w.settled_s,
                                           rel_change=rel)
        return self._observed[expr]

    def signal_families(self, names) -> dict[str, set[str]]:
        return {n: set(metric_families(self.incident.signals[n])) for n in names if n in self.incident.signals}

    # -- criteria -------------------------------------------------------------------
    def grade(self, d: Diagnosis, time_to_diagnosis_s: float | None = None, asks: list[dict] | None = None) -> Report:
        """asks: the interview's log of `sandbox ask` ([{time, evidence}]); None outside an interview."""
        criteria = [self.root_cause(d), self.location(d), self.evidence(d), self.hypotheses(d), self.remediation(d)]
        if not self.cause_right(d):  # real signals read into the wrong conclusion: half the work
            for c in criteria:
                if c.name in ("evidence", "hypotheses") and c.points:
                    c.points //= 2
                    c.sentence += "; halved: they support a cause that is not what happened"
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
        if not key:
            return Criterion("location", POINTS["location"], POINTS["location"], "nothing to locate")
        got = {"replica": d.location.replica, "version": d.location.version, "component": d.location.component}
        hits = {k: _same_place(k, got[k], v) for k, v in sorted(key.items())}
        points = round(POINTS["location"] * sum(hits.values()) / len(hits))
        right = [k for k, ok in hits.items() if ok]
        wrong = [k for k, ok in hits.items() if not ok]
        sentence = (f"located by {', '.join(right)}" if right else "not located") + \
                   (f"; {', '.join(wrong)} missing or wrong" if wrong else "")
        return Criterion("location", points, POINTS["location"], sentence,
                         [{"field": k, "right": ok} for k, ok in hits.items()])

    def evidence(self, d: Diagnosis) -> Criterion:
        wanted = self.signal_families(self.answer["evidence"])
        no_fault = self.answer["root_cause"] == "no-fault"
        covered, details = set(), []
        for item in d.evidence:
            fams = set(metric_families(item.query))
            touched = sorted(n for n, f in wanted.items() if fams & f)
            o = self.observe(item.query)
            shows = o.direction == "flat" if no_fault else o.direction in ("up", "down")
            ok = bool(touched) and shows
            if ok:
                covered.update(touched)
            details.append({"query": item.query, "touches": touched, "baseline": _r(o.baseline),
                            "incident": _r(o.incident), "direction": o.direction, "counts": ok})
        need = min(2, len(wanted)) or 1
        points = round(POINTS["evidence"] * min(len(covered), need) / need)
        counted = sum(x["counts"] for x in details)
        if not d.evidence:
            sentence = "no evidence cited"
        elif not counted:
            sentence = "no cited query both reads the distinguishing signal and " + \
                       ("stays flat" if no_fault else "shows a change beyond baseline noise")
        else:
            sentence = f"{counted} of {len(details)} cited queries show the distinguishing signal " + \
                       ("staying flat" if no_fault else "changing") + f" ({', '.join(sorted(covered))})"
        return Criterion("evidence", points, POINTS["evidence"], sentence, details)

    def strongest_sibling(self) -> tuple[str | None, list[str]]:
        """The sibling variant this run looks most like, and the signals that contradict it here."""
        best = None
        own_cause = self.incident.variants[self.variant].answer.root_cause
        for name in sorted(self.incident.variants):
            sib = self.incident.variants[name]
            # the same cause through another mechanism (a CPU quota on a process or on its container)
            # is the same diagnosis, not an alternative to rule out
            if name == self.variant or sib.answer.root_cause == own_cause:
                continue
            by = [s for s, want in sorted(sib.signature.items())
                  if self.observe(self.incident.signals[s]).direction not in ("no data", want)]
            if best is None or len(by) < len(best[1]):
                best = (name, by)
        return best if best else (None, [])

    def hypotheses(self, d: Diagnosis) -> Criterion:
        sibling, separating = self.strongest_sibling()
        details = []
        if sibling is None:  # a single-cause incident: any alternative ruled out by a real observation
            fams = self.signal_families(self.incident.signals)
            for h in d.hypotheses:
                o = self.observe(h.ruled_out_by)
                reads = sorted(n for n, f in fams.items() if set(metric_families(h.ruled_out_by)) & f)
                ok = h.root_cause != self.answer["root_cause"] and bool(reads) and o.direction != "no data"
                details.append({"root_cause": h.root_cause, "reads": reads, "direction": o.direction, "counts": ok})
            ok = any(x["counts"] for x in details)
            return Criterion("hypotheses", POINTS["hypotheses"] if ok else 0, POINTS["hypotheses"],
                             "an alternative ruled out with a query on this run's signals" if ok else
                             "no alternative ruled out by a query that reads this incident's signals", details)
        causes = {n: v.answer.root_cause for n, v in self.incident.variants.items()}
        sep_fams = self.signal_families(separating)
        best = 0
        for h in d.hypotheses:
            o = self.observe(h.ruled_out_by)
            fams = set(metric_families(h.ruled_out_by))
            reads = sorted(s for s, f in sep_fams.items() if fams & f)
            moves = [s for s in reads if self.observe(self.incident.signals[s]).direction == o.direction]
            target = h.root_cause == causes[sibling]
            ok = bool(moves)
            if ok:
                best = max(best, POINTS["hypotheses"] if target else POINTS["hypotheses"] // 2)
            details.append({"root_cause": h.root_cause, "strongest_sibling": target, "reads": reads,
                            "direction": o.direction, "separates": ok})
        ruled = [x for x in details if x["separates"] and x["strongest_sibling"]]
        if ruled:
            sentence = f"the strongest alternative ({causes[sibling]}) is ruled out by a query that separates them"
        elif best:
            sentence = f"an alternative is ruled out, but not the strongest ({causes[sibling]})"
        else:
            sentence = f"the strongest alternative ({causes[sibling]}) is not ruled out by a query that " \
                       f"separates them (here: {', '.join(separating) or 'nothing'})"
        return Criterion("hypotheses", best, POINTS["hypotheses"], sentence, details)

    def discipline(self, asks: list[dict]) -> list[Criterion]:
        asked = [BY_NAME[a["evidence"]] for a in asks if a.get("evidence") in BY_NAME]
        names = [p.name for p in asked]
        latency = family(self.incident) == "latency"
        page_fams = set(metric_families(self.incident.signals[self.incident.primary]))
        if latency:
            looked = any(p.decomposes_latency for p in asked)
            why = "split latency into its phases (queue, prefill, decode; by replica or version)"
        else:
            looked = any(page_fams & set(metric_families(q)) for p in asked for _, q in p.queries)
            why = "looked at the paged signal itself"
        first = Criterion("decomposed_first", 8 if looked else 0, 8,
                          ("did " if looked else "did not ") + why + " before concluding", names)
        _, separating = self.strongest_sibling()
        sep_fams = set().union(*self.signal_families(separating).values()) if separating else set()
        hit = [p.name for p in asked if any(sep_fams & set(metric_families(q)) for _, q in p.queries)]
        if not separating:
            sep = Criterion("asked_separating", 8, 8, "a single-cause incident: nothing to separate")
        else:
            sep = Criterion("asked_separating", 8 if hit else 0, 8,
                            f"asked for what separates the top two causes ({', '.join(hit)})" if hit else
                            f"never asked for what separates the top two causes ({', '.join(separating)})")
        n = len(asks)
        count = Criterion("asks", 4 if n <= 6 else 2 if n <= 10 else 0, 4, f"{n} asks (6 or fewer earn all 4 points)")
        return [first, sep, count]

    def remediation(self, d: Diagnosis) -> Criterion:
        right = self.answer["remediation"]
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


_WORD = re.compile(r"[a-z0-9]+")
_GENERIC = {"the", "a", "of", "engine", "replica", "model", "config", "settings", "layer"}


def _same_place(key: str, got: str | None, want: str) -> bool:
    if got is None:
        return False
    if key in ("replica", "version"):
        return got.strip().lower() == str(want).strip().lower()
    # components are free text: "kv-cache" matches "KV cache", "the kv cache manager"
    g = set(_WORD.findall(got.lower())) - _GENERIC
    w = set(_WORD.findall(str(want).lower())) - _GENERIC
    return bool(w & g)
