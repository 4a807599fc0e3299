"""What a diagnosis cites, judged by what it measures: evidence for the cause, and alternatives ruled out.

    evidence    a cited query counts when it reads a quantity of the answer key's evidence (the
                quantities its distinguishing signals read, in any form: server or client side,
                quantile or mean, per replica or fleet) and its re-run on the recording shows the
                direction the variant's signature gives that quantity at that scope
    hypotheses  an alternative is ruled out when its query reads a quantity on which the
                alternative's signature and the true variant's disagree, and the recording shows
                the true direction; the report names the quantity that separated them

Signatures are over quantities (incidents/signatures.py): the true variant's, a sibling
variant's, or, for a cause from another incident, that cause's over the whole catalogue.
"""
from __future__ import annotations

from incidents.readings import Reading, readings
from incidents.signatures import Expected, Signature, cause_signatures, covers, variant_signature
from sandbox.drill.verify import OTHERS_REL_CHANGE, REL_CHANGE, family
from sandbox.grading.observation import Look, look, look_reading


def _r(v):
    return None if v is None else round(v, 4)


class Citations:
    def __init__(self, incident, variant: str, answer: dict, windows, prom, catalogue: dict):
        self.incident, self.variant, self.answer, self.w, self.prom = incident, variant, answer, windows, prom
        self.truth = variant_signature(incident, incident.variants[variant])
        self.causes = cause_signatures(catalogue)
        self.no_fault = answer["root_cause"] == "no-fault"
        # judged as `sandbox verify` judges: a control drill's "flat" allows the machine's drift
        self.rel = OTHERS_REL_CHANGE["latency"] if family(incident) == "control" else REL_CHANGE
        self._looks: dict[tuple, Look] = {}

    # -- reading the recording --------------------------------------------------------------------
    def look(self, expr: str, r: Reading | None = None, reduce: str = "max") -> Look:
        key = (expr, r, reduce)
        if key not in self._looks:
            self._looks[key] = (look(self.prom, expr, self.w, reduce, self.rel) if r is None
                                else look_reading(self.prom, expr, r, self.w, reduce, self.rel))
        return self._looks[key]

    def evidence_quantities(self) -> list[tuple[str, tuple]]:
        out = []
        for name in self.answer["evidence"]:
            for r in readings(self.incident.signals[name]) if name in self.incident.signals else []:
                if (r.quantity, r.part) not in out:
                    out.append((r.quantity, r.part))
        return out

    def flat_evidence(self) -> list[tuple[str, tuple]]:
        """The key's evidence quantities whose signal stays flat (one replica: the best replica stays clean)."""
        sig = self.incident.variants[self.variant].signature
        return [(r.quantity, r.part) for name in self.answer["evidence"] if sig.get(name) == "flat"
                for r in readings(self.incident.signals[name])]

    def alternative(self, cause: str) -> Signature | None:
        """A sibling variant's signature where this incident has the cause, else the cause's own."""
        for name in sorted(self.incident.variants):
            v = self.incident.variants[name]
            if name != self.variant and v.answer.root_cause == cause:
                return variant_signature(self.incident, v)
        return self.causes.get(cause)

    # -- evidence ---------------------------------------------------------------------------------
    def judge_evidence(self, query: str) -> tuple[dict, tuple | None]:
        """One cited query: the detail for the report, and the evidence quantity it shows (None: none)."""
        wanted = self.evidence_quantities()
        found = readings(query)
        detail = {"query": query, "reads": [r.describe() for r in found], "counts": False}
        if _composite(found):
            detail["why"] = _COMPOSITE.format(", ".join(sorted({r.quantity for r in found})))
            return detail, None
        best = None
        for r in found:
            target = max((w for w in wanted if w[0] == r.quantity and covers(w[1], r.part)),
                         key=lambda w: len(w[1]), default=None)
            exp = self.truth.expected(r) if target else None
            if exp is None or (exp.direction == "flat" and not self.no_fault and target not in self.flat_evidence()):
                continue  # a flat quantity is evidence where the key's own signal is flat, or nothing moved
            lk = self.look(query, r, exp.reduce)
            shows = lk.of_quantity(r.polarity) == exp.direction
            if best is None or shows:
                best = (r, exp, lk, target if shows else None)
            if shows:
                break
        if best is None:
            detail["why"] = ("reads " + "; ".join(detail["reads"]) + ": not what tells this cause apart"
                             if found else "reads no quantity the grader knows")
            return detail, None
        r, exp, lk, shown = best
        detail.update(self._figures(r, exp, lk))
        detail["counts"] = shown is not None
        detail["why"] = (f"{r.quantity} {_moved(exp.direction)}, as this cause moves it" if shown else
                         f"{r.quantity} should have {_moved(exp.direction, past=False)}; the recording shows "
                         f"{_shown(lk.of_quantity(r.polarity))}")
        return detail, shown

    @staticmethod
    def _figures(r: Reading, exp: Expected, lk: Look) -> dict:
        out = {"quantity": r.quantity, "scope": exp.key[2], "expected": exp.direction, "baseline": _r(lk.baseline),
               "incident": _r(lk.incident), "direction": lk.of_quantity(r.polarity)}
        if lk.note:
            out["note"] = lk.note
        return out

    # -- hypotheses -------------------------------------------------------------------------------
    def rule_out(self, cause: str, query: str) -> dict:
        """Does `query` separate `cause` from what happened, on this recording?"""
        detail = {"root_cause": cause, "query": query, "separates": False}
        if cause == self.answer["root_cause"]:
            detail["why"] = "this is the cause itself"
            return detail
        alt = self.alternative(cause)
        reasons = []
        found = readings(query)
        if _composite(found):
            detail["why"] = _COMPOSITE.format(", ".join(sorted({r.quantity for r in found})))
            return detail
        for r in found:
            expectations = self.truth.expectations(r)
            if not expectations or alt is None:
                reasons.append(f"{r.quantity}: no expectation to set against {cause}'s")
                continue
            for exp in expectations:
                theirs = alt.at(exp.key)
                if theirs is None:
                    reasons.append(f"{r.quantity}: no expectation to set against {cause}'s")
                    continue
                if theirs == exp.direction:
                    reasons.append(f"{r.quantity}: {cause} would leave it {exp.direction} too, "
                                   "so it cannot rule it out")
                    continue
                lk = self.look(query, r, exp.reduce)
                got = lk.of_quantity(r.polarity)
                if got != exp.direction:
                    reasons.append(f"{r.quantity}: {cause} would {_would(theirs)}, but the recording shows "
                                   f"{_shown(got)}, not what separates them")
                    continue
                detail.update(self._figures(r, exp, lk), separates=True, separated_by=r.quantity,
                              why=f"{cause} would {_would(theirs, r.quantity)}; the recording shows {_shown(got)}")
                return detail
        detail["why"] = "; ".join(dict.fromkeys(reasons)) if reasons else "reads no quantity the grader knows"
        return detail

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
                  if self.look(self.incident.signals[s]).direction not in ("no data", want)]
            if best is None or len(by) < len(best[1]):
                best = (name, by)
        return best if best else (None, [])

    def separating(self, cause: str, query: str) -> list[str]:
        """The quantities `query` reads on which `cause` and the truth disagree (no data needed)."""
        alt = self.alternative(cause)
        out = []
        for r in readings(query):
            if alt is not None and any(alt.at(e.key) not in (None, e.direction) for e in self.truth.expectations(r)):
                out.append(r.quantity)
        return out


_COMPOSITE = "reads several quantities at once ({}): which of them moved cannot be told from the whole"


def _composite(found: list[Reading]) -> bool:
    """A query that combines quantities (one share minus another): its direction is no single one's."""
    return len({(r.quantity, r.part) for r in found}) > 1


_SHOWS = {"up": "it rising", "down": "it falling", "flat": "it flat", "no data": "no data in its windows"}


def _moved(direction: str, past: bool = True) -> str:
    if direction == "flat":
        return "stayed flat"
    return ("went " if past else "gone ") + direction


def _would(direction: str, what: str = "it") -> str:
    return f"leave {what} flat" if direction == "flat" else f"move {what} {direction}"


def _shown(direction: str) -> str:
    return _SHOWS[direction]
