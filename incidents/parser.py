"""Validation of incident scripts: marked YAML data in, a typed `Incident` out, or every problem at once.

Each problem reads FILE:LINE: field.path: message. Fault specs go to the `fault_validator` hook
(faults/ owns their fields); all signals of a file are parsed in one promtool run.
"""
from __future__ import annotations

from typing import Any

from faults.deploys import Deploy
from faults.registry import fault_class
from incidents import promql, taxonomy
from incidents.capacity import read_rate
from incidents.reader import IDENTIFIER, KEBAB, Reader, spec_field
from incidents.script import (
    DIRECTIONS,
    INJECTED,
    NODES,
    AnswerKey,
    Event,
    FaultValidator,
    Incident,
    Location,
    Page,
    Peak,
    Timeline,
    Traffic,
    TrafficChange,
    Variant,
)
from incidents.source import Path_, Problems


def parse_incident(data: Any, problems: Problems, stem: str, fault_validator: FaultValidator,
                   profiles: set[str] | None) -> Incident:
    """Build an Incident from marked data, or raise IncidentError listing every problem."""
    r = Reader(problems)
    top = r.mapping(data, (), required=("id", "page", "traffic", "timeline", "signals", "primary", "variants"),
                    optional=("setup",))
    incident_id = _incident_id(r, top, stem)
    page = _page(r, top)
    setup = _setup(r, top, fault_validator)
    timeline = _timeline(r, top, fault_validator)
    traffic = _traffic(r, top, timeline, profiles)
    signals = _signals(r, top)
    primary = r.string(top, (), "primary")
    if primary is not None and signals is not None and primary not in signals:
        r.error(("primary",), f"{primary!r} is not a declared signal{taxonomy.suggestion(primary, signals)}")
    variants = _variants(r, top, signals, fault_validator, profiles)
    problems.raise_if_any()
    return Incident(incident_id, problems.file, page, setup, traffic, timeline, signals, primary, variants)


def _incident_id(r: Reader, top: dict | None, stem: str) -> str | None:
    incident_id = r.string(top, (), "id", pattern=KEBAB, what="kebab-case (a-z, 0-9, single dashes)")
    if incident_id is None:
        return None
    if incident_id != stem:
        r.error(("id",), f"{incident_id!r} must equal the file name stem {stem!r}")
    for cause in taxonomy.ROOT_CAUSES:
        if cause.id in incident_id:
            r.error(("id",), f"{incident_id!r} names the root cause {cause.id!r}; incident ids name the symptom")
    return incident_id


def _page(r: Reader, top: dict | None) -> Page | None:
    path: Path_ = ("page",)
    m = _section(r, top, "page", required=("alert",), optional=("report",))
    alert = m.get("alert") if m else None
    if alert is not None:
        alert = r.string(m, path, "alert", pattern=IDENTIFIER, what="an identifier (an alert rule name)")
    report = r.string(m, path, "report")
    if m is not None and "alert" in m and m["alert"] is None and "report" not in m:
        r.error(path + ("report",), "a page with no alert (alert: null) needs a report: what a person says")
    return Page(alert, report) if m is not None else None


def _setup(r: Reader, top: dict | None, fault_validator: FaultValidator) -> dict[str, Any]:
    """Settings deployed before traffic, checked as the `set` of a deploy fault."""
    m = _section(r, top, "setup", closed=False)
    if m is None:
        return {}
    try:
        fault_validator({"type": Deploy.type, "set": dict(m)})
    except ValueError as e:
        field, message = spec_field({"set": m}, e)
        r.error(("setup",) + (field[1:] if field[:1] == ("set",) else field), message)
    return dict(m)


def _section(r: Reader, top: dict | None, key: str, **keys) -> dict | None:
    return r.mapping(top[key], (key,), **keys) if top is not None and key in top else None


def _timeline(r: Reader, top: dict | None, fault_validator: FaultValidator) -> Timeline | None:
    path: Path_ = ("timeline",)
    m = _section(r, top, "timeline", required=("baseline_s", "inject_at_s", "duration_s"),
                 optional=("jitter_s", "events"))
    baseline, inject = r.number(m, path, "baseline_s"), r.number(m, path, "inject_at_s")
    jitter, duration = r.number(m, path, "jitter_s", default=0.0), r.number(m, path, "duration_s", positive=True)
    if baseline is not None and inject is not None and inject < baseline:
        r.error(path + ("inject_at_s",), f"must be >= baseline_s ({baseline:g}), got {inject:g}: "
                                         "injection may not start inside the baseline")
    if None not in (inject, jitter, duration) and inject + jitter >= duration:
        r.error(path + ("inject_at_s",), f"inject_at_s + jitter_s ({inject + jitter:g}) must be < duration_s "
                                         f"({duration:g})")
    events = []
    for i, item in enumerate(r.sequence(m, path, "events") or []):
        ipath = path + ("events", i)
        e = r.mapping(item, ipath, required=("at_s",), optional=("fault", "note"))
        at = r.number(e, ipath, "at_s")
        if at is not None and duration is not None and at > duration:
            r.error(ipath + ("at_s",), f"must be <= duration_s ({duration:g}), got {at:g}")
        if e is not None and "fault" in e:
            _fault(r, e["fault"], ipath + ("fault",), fault_validator)
        note = r.string(e, ipath, "note")
        if e is not None and "fault" not in e and "note" not in e:
            r.error(ipath, "an event needs a fault, a note or both")
        events.append(Event(at, e.get("fault") if e else None, note))
    return Timeline(baseline, inject, jitter, duration, tuple(events)) if m is not None else None


def _traffic(r: Reader, top: dict | None, timeline: Timeline | None, profiles: set[str] | None) -> Traffic | None:
    path: Path_ = ("traffic",)
    m = _section(r, top, "traffic", required=("profile", "rate"), optional=("peaks",))
    profile = _profile(r, m, path, profiles)
    rate = read_rate(r, m, path)
    peaks = []
    for i, item in enumerate(r.sequence(m, path, "peaks") or []):
        ipath = path + ("peaks", i)
        p = r.mapping(item, ipath, required=("at_s", "duration_s"), optional=("rate", "concurrency", "profile"))
        at, length = r.number(p, ipath, "at_s"), r.number(p, ipath, "duration_s", positive=True)
        peak_rate = read_rate(r, p, ipath)
        concurrency = r.number(p, ipath, "concurrency", positive=True) if p and "concurrency" in p else None
        if p is not None and ("rate" in p) == ("concurrency" in p):
            r.error(ipath, "a peak needs exactly one of `rate` (requests/s) or `concurrency` (a batch job's clients)")
        if concurrency is not None and concurrency != int(concurrency):
            r.error(ipath + ("concurrency",), f"must be a whole number of clients, got {concurrency!r}")
        peak_profile = _profile(r, p, ipath, profiles) if p and "profile" in p else None
        end = timeline.duration_s if timeline is not None else None
        if None not in (at, length, end) and at + length > end:
            r.error(ipath, f"peak ends at {at + length:g} s, after timeline.duration_s ({end:g})")
        peaks.append(Peak(at, length, peak_rate, None if concurrency is None else int(concurrency), peak_profile))
    return Traffic(profile, rate, tuple(peaks)) if m is not None else None


def _profile(r: Reader, m: dict | None, path: Path_, profiles: set[str] | None) -> str | None:
    name = r.string(m, path, "profile")
    if name is not None and profiles is not None and name not in profiles:
        r.error(path + ("profile",), f"unknown traffic profile {name!r}{taxonomy.suggestion(name, profiles)}; "
                                     f"profiles: {', '.join(sorted(profiles))}")
    return name


def _signals(r: Reader, top: dict | None) -> dict[str, str] | None:
    m = _section(r, top, "signals", closed=False)
    if m is None:
        return None
    if not m:
        r.error(("signals",), "declare at least one signal")
    valid = {}
    for name in m:
        if not IDENTIFIER.fullmatch(name):
            r.error(("signals", name), f"signal name {name!r} is not an identifier")
        expr = r.string(m, ("signals",), name)
        if expr is not None:
            valid[name] = expr
    for (name, expr), error in zip(valid.items(), promql.check_many(list(valid.values()))):
        if error is not None:
            r.error(("signals", name), f"PromQL does not parse: {error}")
    return dict(m)


def _fault(r: Reader, spec: Any, path: Path_, fault_validator: FaultValidator) -> None:
    if r.mapping(spec, path, closed=False) is None:
        return
    try:
        fault_validator(spec)
    except ValueError as e:
        field, message = spec_field(spec, e)
        r.error(path + field, message)


def _variants(r: Reader, top: dict | None, signals: dict | None, fault_validator: FaultValidator,
              profiles: set[str] | None) -> dict[str, Variant]:
    m = _section(r, top, "variants", closed=False)
    if m is None:
        return {}
    if not m:
        r.error(("variants",), "declare at least one variant")
    variants = {}
    for key, value in m.items():
        path: Path_ = ("variants", key)
        if not KEBAB.fullmatch(key):
            r.error(path, f"variant key {key!r} is not kebab-case (a-z, 0-9, single dashes)")
        v = r.mapping(value, path, required=("signature", "answer"),
                      optional=("weight", "faults", "traffic", "node"))
        weight = r.number(v, path, "weight", default=1.0)  # 0: run by name only, never drawn
        node = r.choice(v["node"], path + ("node",), NODES, "node") if v is not None and "node" in v else None
        faults = r.sequence(v, path, "faults") or []
        for i, spec in enumerate(faults):
            _fault(r, spec, path + ("faults", i), fault_validator)
            cls = fault_class(spec)
            if cls is not None and cls.node == "container" and node is None:
                r.error(path + ("faults", i, "type"), "a container fault needs a container node: "
                                                      "add `node: container` to the variant")
        traffic = None
        if v is not None and "traffic" in v:
            t = r.mapping(v["traffic"], path + ("traffic",), optional=("profile", "rate_factor", "concurrency"))
            if t is not None and not t:
                r.error(path + ("traffic",), "name a profile, a rate_factor, a concurrency or some of them "
                                             "(or leave traffic out)")
            clients = r.number(t, path + ("traffic",), "concurrency", positive=True)
            if clients is not None and clients != int(clients):
                r.error(path + ("traffic", "concurrency"), f"must be a whole number of clients, got {clients:g}")
                clients = None
            traffic = TrafficChange(_profile(r, t, path + ("traffic",), profiles),
                                    r.number(t, path + ("traffic",), "rate_factor", positive=True, default=1.0),
                                    None if clients is None else int(clients))
        signature = _signature(r, v, path, signals)
        answer = _answer(r, v, path, signals, signature, faults)
        variants[key] = Variant(key, weight, tuple(faults), traffic, signature, answer, node)
    if variants and not any(v.weight for v in variants.values()):
        r.error(("variants",), "every variant has weight 0: at least one must be drawn (weight > 0)")
    return variants


def _declared(r: Reader, name: Any, path: Path_, signals: dict | None) -> bool:
    if not isinstance(name, str):
        r.error(path, f"expected a signal name, got {name!r}")
        return False
    if signals is not None and name not in signals:
        r.error(path, f"{name!r} is not a declared signal{taxonomy.suggestion(name, signals)}; "
                      f"signals: {', '.join(signals)}")
        return False
    return True


def _signature(r: Reader, v: dict | None, path: Path_, signals: dict | None) -> dict[str, str]:
    m = r.mapping(v["signature"], path + ("signature",), closed=False) if v is not None and "signature" in v else None
    if m is not None and not m:
        r.error(path + ("signature",), "give the expected direction of at least one signal")
    for name, direction in (m or {}).items():
        spath = path + ("signature", name)
        _declared(r, name, spath, signals)
        r.choice(direction, spath, DIRECTIONS, "direction")
    return dict(m or {})


def _answer(r: Reader, v: dict | None, path: Path_, signals: dict | None, signature: dict,
            faults: list) -> AnswerKey | None:
    path = path + ("answer",)
    m = r.mapping(v["answer"], path, required=("root_cause", "remediation", "location", "evidence")) \
        if v is not None and "answer" in v else None
    cause = r.string(m, path, "root_cause")
    if cause is not None:
        try:
            taxonomy.root_cause(cause)
        except ValueError as e:
            r.error(path + ("root_cause",), str(e))
    remedies = r.sequence(m, path, "remediation", non_empty=True) or []
    for i, remedy in enumerate(remedies):
        try:
            taxonomy.remediation(remedy if isinstance(remedy, str) else repr(remedy))
        except ValueError as e:
            r.error(path + ("remediation", i), str(e))
    location = _location(r, m, path, faults)
    evidence = r.sequence(m, path, "evidence", non_empty=True) or []
    for i, name in enumerate(evidence):
        if _declared(r, name, path + ("evidence", i), signals) and name not in signature:
            r.error(path + ("evidence", i), f"evidence signal {name!r} has no expected direction in signature")
    return AnswerKey(cause, tuple(remedies), location, tuple(evidence)) if m is not None else None


def _location(r: Reader, answer: dict | None, path: Path_, faults: list) -> Location | None:
    path = path + ("location",)
    m = r.mapping(answer["location"], path, required=("replica", "version", "component")) \
        if answer is not None and "location" in answer else None
    if m is None:
        return None
    replica, version = (_null_or_injected(r, m, path, key) for key in ("replica", "version"))
    component = m.get("component")
    if component is not None:
        component = r.string(m, path, "component", pattern=KEBAB, what="kebab-case (or null)")
    specs = [f for f in faults if isinstance(f, dict)]
    if replica == INJECTED and not any("replica" in f for f in specs):
        r.error(path + ("replica",), "is 'injected' but no fault of this variant targets a replica")
    if version == INJECTED and not any(getattr(fault_class(f), "new_version", False) for f in specs):
        r.error(path + ("version",), "is 'injected' but no fault of this variant rolls out a new version")
    return Location(replica, version, component)


def _null_or_injected(r: Reader, m: dict, path: Path_, key: str) -> str | None:
    value = m.get(key)
    if value not in (None, INJECTED):
        r.error(path + (key,), f"must be null (does not matter) or {INJECTED!r} (resolved at injection), "
                               f"got {value!r}")
        return None
    return value
