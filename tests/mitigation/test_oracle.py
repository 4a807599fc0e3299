"""The recovery oracle on series of known shape: quiet for the window (with traffic), no new page, errors under
the SLO and the cause gone make `recovered`, with the time from the page; anything short of that says why."""
from __future__ import annotations

import pytest

from sandbox.drill.margins import margin_expr
from sandbox.mitigation.oracle import RecoveryOracle, first_quiet
from tests.drill.series_prom import ExprProm

ALERT = "TimeToFirstTokenHigh"
PAGE, ACTION = 1000.0, 1060.0


class Prom(ExprProm):
    """Range queries per expression (ExprProm), and instant queries: the firing alerts at a time, the request
    counts by status."""

    def __init__(self, margin, *, firing_after: dict[str, float] | None = None, failed=0.0, shed=0.0, total=600.0):
        super().__init__({margin_expr(ALERT): margin})
        self.firing_after = firing_after or {}
        self.counts = {"failed": failed, "shed": shed, "all": total}

    def query_range(self, expr, start, end, step_s):
        if expr.startswith("ALERTS"):  # firing from its time on, until `until` where one is given
            rows = []
            for a, t in self.firing_after.items():
                t, until = t if isinstance(t, tuple) else (t, float("inf"))
                values = [[start + i * step_s, "1"] for i in range(int((end - start) / step_s) + 1)
                          if t <= start + i * step_s <= until]
                rows += [{"metric": {"alertname": a}, "values": values}] if values else []
            return rows
        return super().query_range(expr, start, end, step_s)

    def query(self, expr, at=None):
        if expr.startswith("ALERTS"):
            return [{"metric": {"alertname": a}, "value": [at, "1"]} for a, t in self.firing_after.items()
                    if (t[0] if isinstance(t, tuple) else t) <= at <= (t[1] if isinstance(t, tuple) else float("inf"))]
        key = "shed" if 'status="429"' in expr else "failed" if "status!~" in expr else "all"
        return [{"metric": {}, "value": [at, str(self.counts[key])]}]


def _margin_falls_at(t_quiet: float):
    return lambda t: 2.0 if t < t_quiet else 0.4


def test_first_quiet_is_the_start_of_the_first_run_below_one_that_spans_the_window():
    assert first_quiet({0: 2.0, 1: 0.5, 2: 0.5, 3: 1.2, 4: 0.9, 5: 0.9, 6: 0.9}, 2) == 4
    assert first_quiet({0: 0.5, 1: 0.5, 3: 0.5, 4: 0.5}, 2) is None  # a missing reading breaks the run
    assert first_quiet({}, 1) is None


def test_quiet_for_the_window_with_the_cause_gone_is_recovered_with_its_time_from_the_page():
    oracle = RecoveryOracle(Prom(_margin_falls_at(1100.0)), ALERT, PAGE, window_s=60, invariant=lambda: None)
    verdict = oracle.judge(ACTION, 1200.0)
    assert verdict.outcome == "recovered" and verdict.quiet_from == 1100.0 and verdict.ttm_s == 100.0
    assert verdict.error_share == 0.0 and verdict.other_pages == ()


def test_quiet_for_less_than_the_window_is_not_recovered_yet():
    verdict = RecoveryOracle(Prom(_margin_falls_at(1180.0)), ALERT, PAGE, window_s=60).judge(ACTION, 1200.0)
    assert verdict.outcome == "not recovered" and verdict.ttm_s is None
    assert verdict.reason == ("TimeToFirstTokenHigh's expression did not stay under its threshold for 60 s with "
                              "traffic flowing")


def test_a_page_that_went_quiet_because_traffic_stopped_is_not_recovery():
    def no_requests(t):  # a quantile of no requests is no reading
        return 2.0 if t < 1100.0 else None

    verdict = RecoveryOracle(Prom(no_requests), ALERT, PAGE, window_s=60).judge(ACTION, 1200.0)
    assert verdict.outcome == "not recovered"


def test_quiet_while_the_cause_is_still_in_place_is_not_recovered_and_says_what_remains():
    still = "the serving version v3 runs with engine.enable_prefix_caching=false"
    verdict = RecoveryOracle(Prom(_margin_falls_at(1100.0)), ALERT, PAGE, window_s=60,
                             invariant=lambda: still).judge(ACTION, 1200.0)
    assert verdict.outcome == "not recovered" and verdict.invariant == still
    assert verdict.reason == f"quiet, but the cause is still in place: {still}"


def test_another_page_firing_through_a_window_since_the_action_makes_it_worse():
    worse = RecoveryOracle(Prom(_margin_falls_at(1100.0), firing_after={"ReplicaRestarted": 1090.0}), ALERT, PAGE,
                           window_s=60).judge(ACTION, 1200.0)
    assert worse.outcome == "worse" and worse.other_pages == ("ReplicaRestarted",)


def test_a_page_firing_before_the_action_or_only_for_a_while_after_it_is_no_verdict_on_it():
    before = RecoveryOracle(Prom(_margin_falls_at(1100.0), firing_after={"ReplicaRestarted": 1050.0}), ALERT, PAGE,
                            window_s=60).judge(ACTION, 1200.0)
    assert before.outcome == "recovered"
    # a rollout's transient: pages 1070-1150, quiet since
    transient = RecoveryOracle(Prom(_margin_falls_at(1100.0), firing_after={"InterTokenLatencyHigh": (1070.0, 1150.0)}),
                               ALERT, PAGE, window_s=60).judge(ACTION, 1200.0)
    assert transient.outcome == "recovered" and transient.other_pages == ()


def test_errors_over_the_slo_are_not_recovery_and_shed_requests_are_counted_apart():
    failing = RecoveryOracle(Prom(_margin_falls_at(1100.0), failed=12.0), ALERT, PAGE, window_s=60)
    verdict = failing.judge(ACTION, 1200.0)
    assert verdict.outcome == "not recovered" and verdict.error_share == 0.02
    assert verdict.reason == "quiet, but 2.0% of requests failed (the SLO allows 1.0%)"
    shed = RecoveryOracle(Prom(_margin_falls_at(1100.0), shed=120.0), ALERT, PAGE, window_s=60).judge(ACTION, 1200.0)
    assert shed.outcome == "recovered" and shed.shed_share == 0.2 and shed.error_share == 0.0


@pytest.mark.parametrize("kwargs", [{"window_s": 0}, {"step_s": -1}, {"error_slo": 1.0}])
def test_a_window_step_or_slo_out_of_range_is_refused(kwargs):
    with pytest.raises(ValueError):
        RecoveryOracle(Prom(lambda t: 0.0), ALERT, PAGE, **kwargs)


def test_while_the_page_still_fires_other_pages_are_its_own_symptoms_and_the_verdict_is_not_recovered():
    still_paging = RecoveryOracle(Prom(lambda t: 4.3, firing_after={"ClientTimeToFirstTokenHigh": 1090.0}), ALERT,
                                  PAGE, window_s=60).judge(ACTION, 1200.0)
    assert still_paging.outcome == "not recovered" and still_paging.other_pages == ()
