"""Rates in capacity units: `rate: 0.6 knee` is 0.6 times the traffic profile's knee, the highest Poisson
rate (requests/s) whose TTFT p99 stays within a factor of the one-at-a-time figure, measured by `sandbox calibrate`.

An incident written this way loads every machine to the same point of its own curve; a plain number
stays requests/s. Which profile's knee a rate takes is decided here, for the drill plan and for
whoever calibrates alike.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from incidents.reader import Reader
from incidents.script import CEILING, KNEE, Incident, Peak, Rate, Traffic
from incidents.source import Path_
from incidents.taxonomy import suggestion

_WITH_UNIT = re.compile(r"(?P<number>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>[A-Za-z_]+)")


def read_rate(r: Reader, m: dict | None, path: Path_, key: str = "rate") -> Rate | None:
    """`m[key]` as a Rate: a number > 0 (requests/s), "<number > 0> knee" (`0.6 knee`, `0.6knee`) or
    "<number > 0> ceiling"."""
    if m is None or key not in m:
        return None
    value = m[key]
    if not isinstance(value, str):
        number = r.number(m, path, key, positive=True)  # its messages for a bad number: "must be > 0, got -3.0"
        return None if number is None else Rate(number)
    written = _WITH_UNIT.fullmatch(value.strip())
    if written is None:
        r.error(path + (key,), f"expected a number (requests/s) or '<number> {KNEE}' (a fraction of the "
                               f"profile's knee), got string {value!r}")
        return None
    unit = written.group("unit")
    if unit not in (KNEE, CEILING):
        r.error(path + (key,), f"unknown rate unit {unit!r}{suggestion(unit, [KNEE, CEILING])}: write requests/s "
                               f"as a plain number, or a fraction of the profile's knee as '<number> {KNEE}' "
                               f"(or of its ceiling as '<number> {CEILING}')")
        return None
    fraction = float(written.group("number"))
    if not fraction > 0:
        r.error(path + (key,), f"must be > 0, got {value!r}")
        return None
    return Rate(fraction, unit)


def knee_profile(traffic: Traffic, peak: Peak | None = None) -> str:
    """The profile whose knee a rate of `traffic` (of its `peak`, when given) is a fraction of: the peak's own
    profile if it names one, else the traffic's. A variant's profile change at injection is left out on
    purpose: a decoy changes the mix, not the load."""
    return peak.profile if peak is not None and peak.profile else traffic.profile


def knee_profiles(incidents: Iterable[Incident]) -> list[str]:
    """Sorted names of the profiles whose knee these incidents need (a catalogue: pass its `.values()`)."""
    needed = set()
    for incident in incidents:
        traffic = incident.traffic
        if traffic.rate.unit in (KNEE, CEILING):
            needed.add(knee_profile(traffic))
        needed |= {knee_profile(traffic, p) for p in traffic.peaks
                   if p.rate is not None and p.rate.unit in (KNEE, CEILING)}
    return sorted(needed)
