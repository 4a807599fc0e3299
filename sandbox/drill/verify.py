"""`sandbox verify`: is this variant a fair drill? Checked on a real headless run, from Prometheus.

  (a) page     the incident's alert fires within 120 s of the injection, and no alert fires in the baseline;
               its condition held by a margin (PAGE_MARGIN_MIN x its threshold, for its whole `for:`, once
               the injection's own transition is out of its windows: steady_from) and the baseline
               stayed well under it (BASELINE_MARGIN_MAX, from baseline_from): sandbox/drill/margins.py;
  (b) separate the run matches its own signature (each signal's direction vs the baseline), and for
               every sibling variant with another answer at least one signal contradicts the sibling's signature,
               both over the whole window and on the data up to a minute after the page;
  (c) quiet    once the injection has settled, no incident with another kind of symptom (latency,
               errors, accuracy, consistency) pages or moves its primary signal the way its symptom
               does (alerts while a 1m rate window still holds the injection's transition
               are reported apart); same-kind figures are reported beside it (one slow
               replica also slows the fleet's p99: latency moves together; a fleet whose replicas
               fail and restart queues what is left: latency follows errors).

A signal's direction compares its mean over the incident window with the
baseline window: `up` / `down` when the change exceeds both 3 standard
deviations of the baseline samples and 20 % of the baseline mean (or a small
absolute floor for signals near zero), else `flat`.
"""
from __future__ import annotations

import functools
import math
import re
import statistics
from dataclasses import dataclass

from sandbox.calibration.baseline_slos import EARLIEST_S, LEAD_S
from sandbox.drill.leaks import scan_drill
from sandbox.drill.margins import baseline_margin, page_margin
from services.stack.alerts import alert_for_seconds, alert_rules, first_firing, longest_window_s, recorded_exprs

PAGE_WITHIN_S = 120.0
WARMUP_S = 30.0  # the first seconds of traffic fill caches and rate windows: not baseline
SETTLE_S = 30.0  # rate windows need this long after the injection to show the new regime
# Other-kind alerts count from longest_window_s() (2m) + this after the injection completed: until then an
# alert's windows still hold the transition (a rolling deploy on 2 cores stalls traffic while replicas load).
ALERT_SETTLE_PAD_S = 5.0
# Symptoms that follow an incident's own: replicas that fail and restart leave the rest a queue (not conversely).
FOLLOWS = {"errors": ("errors", "latency")}
REL_CHANGE = 0.2
# (c): another kind's latency primary must double: healthy, a minute's TTFT p99 read 0.99-1.52x its baseline in six
# accuracy drills (2026-12-05); a latency page needs 2.25x its healthy bucket's top, and latency faults move 2-70x.
OTHERS_REL_CHANGE = {"latency": 1.0}
SIGMAS = 3.0
ABS_FLOOR = 1e-3
OBSERVE_STEP_S = 2.0
# A fair page is not a near thing: its alert's condition held at 1.5x its threshold for the rule's
# whole `for:`, and the healthy baseline stayed under two thirds of it (sandbox/drill/margins.py).
PAGE_MARGIN_MIN = 1.5
BASELINE_MARGIN_MAX = 0.67
MARGIN_STEP_S = 1.0  # Prometheus evaluates the rules every second
# What a candidate has seen a minute after the page must already tell the variants apart: the
# separation is checked again on the data up to then.
SEPARATE_WITHIN_S = 60.0


@dataclass
class Observed:
    signal: str
    baseline: float | None
    incident: float | None
    noise: float
    direction: str  # up | down | flat | no data

    def to_dict(self) -> dict:
        r = lambda v: None if v is None else round(v, 4)
        return {"signal": self.signal, "baseline": r(self.baseline), "incident": r(self.incident),
                "noise": r(self.noise), "direction": self.direction}


def _samples(prom, expr: str, start: float, end: float, step_s: float) -> list[float]:
    if end - start < step_s:
        return []
    rows = prom.query_range(expr, start, end, step_s)
    by_time: dict[float, float] = {}
    for row in rows:  # several series (e.g. by replica): the largest, the one that would page
        for ts, v in row["values"]:
            f = float(v)
            if math.isfinite(f):
                by_time[ts] = max(by_time.get(ts, -math.inf), f)
    return [by_time[t] for t in sorted(by_time)]


_RANGE = re.compile(r"\[(\d+)([smh])[\]:]")


@functools.cache
def _recorded() -> dict[str, str]:
    """The rule files' recording rules, read once: settle_after is asked for every signal of every check."""
    return recorded_exprs()


def settle_after(expr: str) -> float:
    """Seconds after the injection completed before `expr` shows only the new regime: SETTLE_S, or
    longer when the expression reads a longer range (a 1m window holds the transition for a minute)."""
    # a recorded series reads the ranges of the expression that records it (a replica's TTFT p99: 2m)
    expr += " ".join(rec for name, rec in _recorded().items() if name in expr)
    ranges = [int(n) * {"s": 1, "m": 60, "h": 3600}[u] for n, u in _RANGE.findall(expr)]
    return max([SETTLE_S, *ranges])


def observe(prom, name: str, expr: str, t0: float, inject_s: float, end_s: float, step_s: float = OBSERVE_STEP_S,
            settled_s: float | None = None, rel_change: float = REL_CHANGE) -> Observed:
    """Baseline: warm-up to the injection. Incident: from settle_after(expr) after the injection completed (settled_s)."""
    settled_s = inject_s if settled_s is None else settled_s
    base = _samples(prom, expr, t0 + WARMUP_S, t0 + inject_s - step_s, step_s)  # the injection is not baseline
    inc = _samples(prom, expr, t0 + settled_s + settle_after(expr), t0 + end_s, step_s)
    if not base or not inc:
        return Observed(name, statistics.fmean(base) if base else None, statistics.fmean(inc) if inc else None,
                        0.0, "no data")
    b, i = statistics.fmean(base), statistics.fmean(inc)
    noise = statistics.pstdev(base) if len(base) > 1 else 0.0
    threshold = max(SIGMAS * noise, rel_change * abs(b), ABS_FLOOR)
    direction = "up" if i - b > threshold else "down" if b - i > threshold else "flat"
    return Observed(name, b, i, noise, direction)


FAMILIES = {"TimeToFirstTokenHigh": "latency", "ClientTimeToFirstTokenHigh": "latency",
            "InterTokenLatencyHigh": "latency", "ReplicaInterTokenLatencyHigh": "latency",
            "ReplicaTimeToFirstTokenHigh": "latency",
            "ServingErrorRateHigh": "errors", "ReplicaRestarted": "errors",
            "CanaryAccuracyLow": "accuracy", "CanaryOutputsInconsistent": "consistency"}


def family(incident) -> str:
    """The kind of symptom an incident pages on: latency, errors, accuracy, consistency (or control)."""
    return "control" if incident.page.alert is None else FAMILIES.get(incident.page.alert, incident.page.alert)


def symptom_direction(incident) -> str:
    """Which way the incident's primary signal moves when it is the problem (latency up, accuracy down).

    The other way is no symptom: a new version that answers faster is not a latency incident."""
    for variant in incident.variants.values():
        if incident.primary in variant.signature:
            return variant.signature[incident.primary]
    return "up"


def baseline_alerts(prom, start: float, end: float) -> list[str]:
    if end <= start:
        return []
    rows = prom.query_range('ALERTS{alertstate="firing"}', start, end, 1.0)
    return sorted({row["metric"].get("alertname", "?") for row in rows})


def _same_answer(a, b) -> bool:
    return (a.answer.root_cause, a.answer.location) == (b.answer.root_cause, b.answer.location)


def paging_alerts() -> list[str]:
    return [name for name, rule in alert_rules().items() if rule.get("labels", {}).get("severity") == "page"]


def _r3(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def steady_from(alert: str, inject_wall: float, settled_wall: float | None) -> float:
    """Where a page margin is read from: the injection, or, for an injection with a transition of its own
    (a rolling deploy, a replica rebuilt), the first moment the alert's windows hold none of it: a rollout on 2
    cores slows every request (tpot-regression/draft: 4.7x its threshold with both versions up, 0.9-1.2x after)."""
    if settled_wall is None or settled_wall - inject_wall < MARGIN_STEP_S:
        return inject_wall
    return settled_wall + settle_after(alert_rules()[alert]["expr"])


def baseline_from(alert: str, t0: float, inject_wall: float) -> float:
    """Where a baseline margin is read from: once the alert's windows hold no warm-up request (the thresholds
    are set from the requests after it: baseline_slos.EARLIEST_S), at the latest when they are in force."""
    steady = t0 + EARLIEST_S + settle_after(alert_rules()[alert]["expr"])
    return max(t0 + WARMUP_S, min(steady, inject_wall - LEAD_S))


def page_check(prom, incident, t0: float, inject_wall: float, end_wall: float,
               settled_wall: float | None = None) -> dict:
    """(a): the page within PAGE_WITHIN_S, none in the baseline, how far its alert's condition held past the
    injection's own transition (page margin: steady_from) and how near the baseline came (baseline_from)."""
    early = baseline_alerts(prom, t0, inject_wall)
    baseline = lambda a: (baseline_from(a, t0, inject_wall), inject_wall - MARGIN_STEP_S)  # the injection left out
    if incident.page.alert is None:  # a control drill: nothing may fire at all; margins only reported
        later = baseline_alerts(prom, inject_wall, end_wall)
        near = {a: baseline_margin(prom, a, *baseline(a), MARGIN_STEP_S) for a in paging_alerts()}
        read = {a: m for a, m in near.items() if m is not None}
        top = max(read, key=read.get) if read else None
        return {"pass": not early and not later, "alert": None, "seconds_to_page": None,
                "baseline_alerts": early, "alerts_after_report": later, "page_margin": None,
                "baseline_margin": _r3(read.get(top)), "baseline_margin_alert": top, "margins_ok": None}
    alert = incident.page.alert
    fired = first_firing(prom, alert, inject_wall, end_wall)
    delay = None if fired is None else round(fired - inject_wall, 1)
    page_m = _r3(page_margin(prom, alert, steady_from(alert, inject_wall, settled_wall), end_wall,
                             alert_for_seconds(alert), MARGIN_STEP_S))
    base_m = _r3(baseline_margin(prom, alert, *baseline(alert), MARGIN_STEP_S))
    # A margin that could not be read is evidence of neither: it does not pass.
    margins_ok = (page_m is not None and page_m >= PAGE_MARGIN_MIN
                  and base_m is not None and base_m <= BASELINE_MARGIN_MAX)
    return {"pass": delay is not None and delay <= PAGE_WITHIN_S and not early and margins_ok,
            "alert": alert, "seconds_to_page": delay, "baseline_alerts": early,
            "page_margin": page_m, "baseline_margin": base_m, "margins_ok": margins_ok}


def separation(observed: dict[str, Observed], incident, variant_name: str) -> dict:
    """(b) on signals already observed: the variant's own signature, and for each sibling with another
    answer the signals that contradict the sibling's signature ("no data" contradicts nothing)."""
    variant = incident.variants[variant_name]
    own = {s: (want, observed[s].direction) for s, want in variant.signature.items()}
    siblings = {}
    for name, sib in incident.variants.items():
        if name == variant_name or _same_answer(sib, variant):
            continue  # the same diagnosis is right for both (e.g. one cause in a process and in a container)
        contradicting = [s for s, want in sib.signature.items()
                         if observed[s].direction not in ("no data", want)]
        siblings[name] = {"separated": bool(contradicting), "by": contradicting}
    return {"own_ok": all(want == got for want, got in own.values()),
            "own_signature": {s: {"expected": w, "observed": g} for s, (w, g) in own.items()},
            "siblings": siblings, "signals": [o.to_dict() for o in observed.values()]}


def separation_by(prom, incident, variant_name: str, t0: float, inject_s: float, settled_s: float,
                  until_s: float | None, rel: float) -> dict:
    """Sibling separation from the data a candidate has `until_s` seconds into the traffic (None: never
    paged, so no such moment). A signal whose incident window has not begun by then (its rate window
    still holds the injection) reads "no data", which separates nothing."""
    if until_s is None:
        return {"pass": False, "until_s": None, "note": "no page", "unsettled": [], "siblings": {}, "signals": []}
    observed = {name: observe(prom, name, expr, t0, inject_s, until_s, settled_s=settled_s, rel_change=rel)
                for name, expr in incident.signals.items()}
    sep = separation(observed, incident, variant_name)
    unsettled = [name for name, expr in incident.signals.items()
                 if settled_s + settle_after(expr) > until_s - OBSERVE_STEP_S]
    return {"pass": all(s["separated"] for s in sep["siblings"].values()), "until_s": round(until_s, 1),
            "unsettled": unsettled, "siblings": sep["siblings"], "signals": sep["signals"]}


def separation_check(prom, incident, variant_name: str, t0: float, inject_s: float, settled_s: float,
                     end_s: float, page_s: float | None) -> dict:
    """(b) over the whole window, and again with only the data up to SEPARATE_WITHIN_S after the page."""
    # A control drill's signals are the other incidents' symptoms: "flat" means within the same drift.
    rel = OTHERS_REL_CHANGE["latency"] if family(incident) == "control" else REL_CHANGE
    observed = {name: observe(prom, name, expr, t0, inject_s, end_s, settled_s=settled_s, rel_change=rel)
                for name, expr in incident.signals.items()}
    sep = separation(observed, incident, variant_name)
    until = None if page_s is None else min(page_s + SEPARATE_WITHIN_S, end_s)
    early = separation_by(prom, incident, variant_name, t0, inject_s, settled_s, until, rel)
    return {"pass": sep["own_ok"] and all(s["separated"] for s in sep["siblings"].values()) and early["pass"],
            "own_signature": sep["own_signature"], "siblings": sep["siblings"], "signals": sep["signals"],
            "by_page_plus_60s": early}


def quiet_check(prom, incident, catalogue: dict, t0: float, inject_s: float, settled_s: float, end_s: float) -> dict:
    """(c): no incident of another kind pages or moves its primary signal its symptom's way."""
    inject_wall = t0 + inject_s
    quiet, moved_foreign = {}, []
    own_family = family(incident)
    for other in catalogue.values():
        if other.id == incident.id or family(other) == "control":
            continue
        o = observe(prom, other.primary, other.signals[other.primary], t0, inject_s, end_s, settled_s=settled_s,
                    rel_change=OTHERS_REL_CHANGE.get(family(other), REL_CHANGE)).to_dict()
        o["family"] = family(other)
        quiet[other.id] = o
        o["symptom"] = symptom_direction(other)
        if o["family"] not in FOLLOWS.get(own_family, (own_family,)) and o["direction"] == o["symptom"]:
            moved_foreign.append(other.id)
    # One slow replica also slows the fleet's p99: latency figures move together (physics, not unfairness).
    # What must not happen is a symptom of another kind: a latency drill that moves errors or answers.
    foreign = sorted({o.page.alert for o in catalogue.values()
                      if o.page.alert and family(o) not in FOLLOWS.get(own_family, (own_family,))})
    # A rolling deploy on a 2-core machine slows everything while new replicas load: alerts that
    # fire only during the injection's transition are reported, not held against the variant.
    steady = t0 + settled_s + longest_window_s() + ALERT_SETTLE_PAD_S
    transition = [a for a in baseline_alerts(prom, inject_wall, steady) if a in foreign]
    fired = [a for a in baseline_alerts(prom, steady, t0 + end_s) if a in foreign]
    return {"pass": not fired and not moved_foreign, "family": own_family,
            "other_pages_fired": fired, "other_pages_in_transition": transition,
            "other_kinds_moved": moved_foreign, "primary_signals": quiet}


def check_run(drill, prom, catalogue: dict) -> dict:
    """All the checks for a drill that has just run its timeline (Prometheus still up)."""
    incident, plan = drill.incident, drill.plan
    t0 = drill.t0_wall
    injected = [f["at_s"] for f in drill.fault_log if f["event"] == "inject" and f["at_s"] is not None]
    inject_s = injected[0] if injected else plan.inject_at_s
    done = [f.get("done_s") or f["at_s"] for f in drill.fault_log if f["event"] == "inject" and f["at_s"] is not None]
    settled_s = max(done) if done else inject_s  # a rolling deploy's own disruption is not the incident
    end_s = drill.traffic.elapsed()
    checks = {"page": page_check(prom, incident, t0, t0 + inject_s, t0 + end_s, t0 + settled_s)}
    delay = checks["page"]["seconds_to_page"]
    # A control drill's page is the report, shown at the injection.
    page_s = inject_s if incident.page.alert is None else None if delay is None else inject_s + delay
    checks["separation"] = separation_check(prom, incident, plan.variant, t0, inject_s, settled_s, end_s, page_s)
    checks["others_quiet"] = quiet_check(prom, incident, catalogue, t0, inject_s, settled_s, end_s)
    checks["no_leaks"] = scan_drill(drill, prom)
    checks["pass"] = all(c["pass"] for c in checks.values() if isinstance(c, dict))
    return checks
