"""The invariant of a traffic cause (a surge, prompts that grew): the offered load still exceeds what the fleet serves.

A variant whose cause is its traffic has nothing in the stack to take out: the clients keep sending what they
send. What an action can change is whether the fleet keeps up with it. So the mechanism is in place while, over
the last WINDOW_S, the engines hold requests waiting for a batch slot (on average at least one: the fleet has fewer
slots than the load needs), or the ingress refuses requests (429s over SHED_SHARE of the clients' requests: the
load is still there, turned away at the door). Hence:

    scale-out that gives the load the slots it needs   gone: nothing waits, nothing is refused
    shed-load                                          in place: the admitted requests are fast, the rest refused
    a restart, a rollback (of a harmless deploy)       in place: the same load on the same slots
    the traffic going away by itself                   gone (and then there was no incident to mitigate)

Read from Prometheus like the page, at the moment asked: the candidate sees both series too.
"""
from __future__ import annotations

import math

WINDOW_S = 30
SHED_SHARE = 0.01
WAITING = f"sum(avg_over_time(vllm:num_requests_waiting[{WINDOW_S}s]))"
SHED = f'sum(increase(sandbox_traffic_requests_total{{status="429"}}[{WINDOW_S}s]))'
ALL = f"sum(increase(sandbox_traffic_requests_total[{WINDOW_S}s]))"


def _value(prom, expr: str, at: float | None) -> float:
    rows = prom.query(expr, at=at) if at is not None else prom.query(expr)
    v = float(rows[0]["value"][1]) if rows else 0.0
    return v if math.isfinite(v) else 0.0


def excess_load(prom, at: float | None = None) -> str | None:
    """Why the offered load still exceeds the fleet (waiting, or refused), or None once the fleet keeps up."""
    waiting = _value(prom, WAITING, at)
    if waiting >= 1:
        return f"requests wait for a batch slot ({waiting:.1f} on average over the last {WINDOW_S} s)"
    total = _value(prom, ALL, at)
    shed = _value(prom, SHED, at)
    if total > 0 and shed / total > SHED_SHARE:
        return f"{shed / total:.0%} of the clients' requests are refused at the ingress (the last {WINDOW_S} s)"
    return None
