"""How `sandbox verify` reads a signal: its direction against the baseline's noise, from range queries."""
from types import SimpleNamespace

from sandbox.drill import margins, verify
from tests.drill.series_prom import ExprProm, SeriesProm


def test_a_step_up_beyond_noise_reads_up_and_a_wobble_reads_flat():
    up = verify.observe(SeriesProm(lambda t: 1.0 if t < 100 else 2.0), "x", "q", 0, 100, 200)
    assert up.direction == "up" and up.baseline == 1.0 and up.incident == 2.0
    wobble = verify.observe(SeriesProm(lambda t: 1.0 + 0.05 * ((t // 2) % 2)), "x", "q", 0, 100, 200)
    assert wobble.direction == "flat"


def test_a_drop_to_zero_reads_down_and_missing_data_says_so():
    down = verify.observe(SeriesProm(lambda t: 0.9 if t < 100 else 0.0), "x", "q", 0, 100, 200)
    assert down.direction == "down"
    none = verify.observe(SeriesProm(lambda t: None), "x", "q", 0, 100, 200)
    assert none.direction == "no data"


def test_the_warm_up_and_the_settling_time_are_left_out():
    # A spike in the first 30 s (caches filling) and right after the injection (rate windows) is not the signal.
    fn = lambda t: 50.0 if t < verify.WARMUP_S or 100 <= t < 100 + verify.SETTLE_S else 1.0
    assert verify.observe(SeriesProm(fn), "x", "q", 0, 100, 200).direction == "flat"


def test_a_noisy_baseline_needs_a_bigger_change():
    noisy = lambda t: (1.0 if (t // 2) % 2 else 2.0) if t < 100 else 1.9
    assert verify.observe(SeriesProm(noisy), "x", "q", 0, 100, 200).direction == "flat"


def test_a_signal_over_a_minute_window_is_read_once_the_window_has_cleared_the_transition():
    assert verify.settle_after("rate(x[30s])") == verify.SETTLE_S
    assert verify.settle_after("histogram_quantile(0.99, rate(x_bucket[1m]))") == 60
    assert verify.settle_after("min_over_time(max(x)[2m:2s])") == 120
    # a recorded series settles as the expression that records it: a replica's TTFT p99 reads 2m
    assert verify.settle_after("max(replica:time_to_first_token_seconds:p99_2m)") == 120
    # a transition that lingers for the 1m window after the injection completed is not the new regime
    fn = lambda t: 50.0 if 100 <= t < 160 else 1.0
    assert verify.observe(SeriesProm(fn), "x", "rate(x[1m])", 0, 100, 260).direction == "flat"
    assert verify.observe(SeriesProm(fn), "x", "rate(x[30s])", 0, 100, 260).direction == "up"


# -- separation on the data a candidate has a minute after the page ------------------------------------

def _incident(**signatures):
    """An incident whose signals are A (a 30 s rate) and B (a 1m rate), with variants of these signatures."""
    variant = lambda sig, cause: SimpleNamespace(signature=sig, answer=SimpleNamespace(root_cause=cause, location={}))
    return SimpleNamespace(id="x", page=SimpleNamespace(alert="TimeToFirstTokenHigh"), primary="a",
                           signals={"a": "rate(a[30s])", "b": "rate(b[1m])"},
                           variants={name: variant(sig, name) for name, sig in signatures.items()})


# A steps up at the injection (t = 100); B stays flat. Sibling `both` would move B too.
PROM = {"rate(a[30s])": lambda t: 1.0 if t < 100 else 2.0, "rate(b[1m])": lambda t: 1.0}
INCIDENT = _incident(one={"a": "up", "b": "flat"}, both={"a": "up", "b": "up"})


def test_separation_a_minute_after_the_page_reads_only_the_data_until_then():
    prom = ExprProm(PROM)
    got = verify.separation_by(prom, INCIDENT, "one", 0, 100, 100, until_s=180, rel=verify.REL_CHANGE)
    assert got["pass"] and got["siblings"] == {"both": {"separated": True, "by": ["b"]}}
    assert got["until_s"] == 180 and got["unsettled"] == []
    assert [(s["signal"], s["direction"]) for s in got["signals"]] == [("a", "up"), ("b", "flat")]
    assert max(end for _, _, end in prom.queries) == 180


def test_a_signal_whose_rate_window_still_holds_the_injection_at_the_cut_separates_nothing():
    # 61 s after the injection a 1m window has one sample of the new regime: no reading yet
    got = verify.separation_by(ExprProm(PROM), INCIDENT, "one", 0, 100, 100, until_s=161, rel=verify.REL_CHANGE)
    assert not got["pass"] and got["unsettled"] == ["b"]
    assert got["siblings"] == {"both": {"separated": False, "by": []}}
    assert [(s["signal"], s["direction"]) for s in got["signals"]] == [("a", "up"), ("b", "no data")]


def test_a_drill_that_never_paged_has_no_separation_by_the_page():
    got = verify.separation_by(ExprProm(PROM), INCIDENT, "one", 0, 100, 100, until_s=None, rel=verify.REL_CHANGE)
    assert got == {"pass": False, "until_s": None, "note": "no page", "unsettled": [], "siblings": {}, "signals": []}


def test_separation_passes_only_when_it_holds_both_over_the_window_and_by_the_page_plus_60s():
    late = verify.separation_check(ExprProm(PROM), INCIDENT, "one", 0, 100, 100, end_s=300, page_s=101)
    assert late["siblings"] == {"both": {"separated": True, "by": ["b"]}}
    assert late["by_page_plus_60s"]["until_s"] == 161 and not late["by_page_plus_60s"]["pass"]
    assert not late["pass"]
    on_time = verify.separation_check(ExprProm(PROM), INCIDENT, "one", 0, 100, 100, end_s=300, page_s=130)
    assert on_time["by_page_plus_60s"]["until_s"] == 190 and on_time["pass"]
    # the cut never runs past the end of the traffic
    assert verify.separation_check(ExprProm(PROM), INCIDENT, "one", 0, 100, 100, end_s=170,
                                   page_s=130)["by_page_plus_60s"]["until_s"] == 170


# -- the page's margins -----------------------------------------------------------------------------------

FIRED = 'max by (alertname) (ALERTS{alertstate="firing",alertname="TimeToFirstTokenHigh"})'


def _paging(margin_fn) -> ExprProm:
    """TimeToFirstTokenHigh fires 40 s after an injection at t = 100, its margin as margin_fn(t)."""
    return ExprProm({FIRED: ({"alertname": "TimeToFirstTokenHigh"}, lambda t: 1 if t >= 140 else None),
                     margins.MARGINS["TimeToFirstTokenHigh"]: margin_fn})


def test_a_page_by_a_wide_margin_over_a_quiet_baseline_passes():
    page = verify.page_check(_paging(lambda t: 0.4 if t < 100 else 2.0), INCIDENT, 0, 100, 300)
    assert page == {"pass": True, "alert": "TimeToFirstTokenHigh", "seconds_to_page": 40.0, "baseline_alerts": [],
                    "page_margin": 2.0, "baseline_margin": 0.4, "margins_ok": True}


def test_a_page_by_a_narrow_margin_or_over_a_near_baseline_fails():
    narrow = verify.page_check(_paging(lambda t: 0.4 if t < 100 else 1.3), INCIDENT, 0, 100, 300)
    assert (narrow["page_margin"], narrow["margins_ok"], narrow["pass"]) == (1.3, False, False)
    near = verify.page_check(_paging(lambda t: 0.9 if t < 100 else 2.0), INCIDENT, 0, 100, 300)
    assert (near["baseline_margin"], near["margins_ok"], near["pass"]) == (0.9, False, False)
    # a spike during the warm-up (the first 30 s) is not baseline
    warm = verify.page_check(_paging(lambda t: 5.0 if t < 30 else 0.4 if t < 100 else 2.0), INCIDENT, 0, 100, 300)
    assert warm["baseline_margin"] == 0.4 and warm["pass"]


def test_a_baseline_margin_is_read_once_the_alerts_windows_hold_no_warm_up_against_the_thresholds_at_its_end():
    # a 1m window holds the warm-up (to 30 s) until 90 s; a replica's 2m TTFT p99 until 150 s; at the latest
    # from 15 s before the injection (when a calibrated drill's thresholds are set), at the earliest from 30 s
    assert verify.baseline_from("TimeToFirstTokenHigh", 0, 200) == 90
    assert verify.baseline_from("ReplicaTimeToFirstTokenHigh", 0, 200) == 150
    assert verify.baseline_from("ReplicaTimeToFirstTokenHigh", 0, 100) == 85
    assert verify.baseline_from("TimeToFirstTokenHigh", 0, 40) == 30
    prom = _paging(lambda t: 5.0 if t < 90 else 0.4 if t < 200 else 2.0)
    page = verify.page_check(prom, INCIDENT, 0, 200, 400)
    assert (page["baseline_margin"], page["pass"]) == (0.4, True)
    assert (margins.margin_expr("TimeToFirstTokenHigh", thresholds_at=199), 90, 199) in prom.queries


def test_a_margin_only_the_injections_transition_carries_is_not_the_page_margin():
    # a rolling deploy from t = 100 to t = 140: 4.7x while the versions overlap, 1.2x once the new one serves alone
    def rollout(t):
        return 0.4 if t < 100 else 4.7 if t < 170 else 1.2
    page = verify.page_check(_paging(rollout), INCIDENT, 0, 100, 300, settled_wall=140)
    # TimeToFirstTokenHigh reads a 1m window: its margin counts from 60 s after the rollout completed
    assert verify.steady_from("TimeToFirstTokenHigh", 100, 140) == 200
    assert (page["seconds_to_page"], page["page_margin"], page["pass"]) == (40.0, 1.2, False)
    # an injection with no transition of its own (settled when injected) is read from the injection
    assert verify.page_check(_paging(rollout), INCIDENT, 0, 100, 300, settled_wall=100)["page_margin"] == 4.7


def test_a_control_drill_reports_the_nearest_alert_of_all_in_its_baseline():
    control = SimpleNamespace(**{**vars(INCIDENT), "page": SimpleNamespace(alert=None)})
    prom = ExprProm({margins.MARGINS["TimeToFirstTokenHigh"]: lambda t: 0.3,
                     margins.MARGINS["CanaryAccuracyLow"]: lambda t: 0.123456})
    page = verify.page_check(prom, control, 0, 100, 300)
    assert page == {"pass": True, "alert": None, "seconds_to_page": None, "baseline_alerts": [],
                    "alerts_after_report": [], "page_margin": None, "baseline_margin": 0.3,
                    "baseline_margin_alert": "TimeToFirstTokenHigh", "margins_ok": None}
