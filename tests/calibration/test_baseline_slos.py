"""A drill's latency thresholds from its own healthy baseline (sandbox/calibration/baseline_slos.py)."""
import math
import subprocess

import pytest
import yaml

from sandbox.calibration import baseline_slos
from sandbox.calibration.baseline_slos import READINGS, derive, measure, window
from services.stack.alerts import RULES_DIR, recorded_exprs

TTFT = "sandbox:threshold:ttft_p99_seconds"
TPOT = "sandbox:threshold:tpot_p50_seconds"
REPLICA_TTFT = "sandbox:threshold:replica_ttft_p99_floor_seconds"
ITL_FLOOR = "sandbox:threshold:replica_itl_p99_floor_seconds"


def _alert_exprs() -> dict[str, str]:
    """{threshold name: every alert expression that compares against it, joined}."""
    out: dict[str, str] = {}
    for group in yaml.safe_load((RULES_DIR / "serving.rules.yml").read_text())["groups"]:
        for rule in group["rules"]:
            for name in READINGS:
                if "alert" in rule and f"scalar({name})" in rule["expr"]:
                    out[name] = out.get(name, "") + rule["expr"]
    return out


def test_each_reading_is_the_statistic_its_alert_compares_with_the_threshold_over_the_alerts_window():
    exprs = _alert_exprs()
    assert set(exprs) == set(READINGS)
    recorded = recorded_exprs()
    squash = lambda s: "".join(s.split())
    for name, reading in READINGS.items():
        alert = squash(exprs[name])
        # a by-replica alert compares a recorded series: the reading must be what that series records
        alert += "".join(squash(rec) for rec_name, rec in recorded.items() if rec_name in alert)
        inner = lambda window: squash(reading.expr(window)).removeprefix("max(").removesuffix(")") \
            if reading.by_replica else squash(reading.expr(window))
        assert any(inner(w) in alert for w in ("1m", "2m")), name


def test_a_threshold_is_its_multiple_of_the_top_of_the_bucket_its_highest_reading_falls_in():
    got = derive({TTFT: 1.7, TPOT: 0.22, REPLICA_TTFT: 0.33, ITL_FLOOR: 0.41}, {})
    assert got[TPOT] == 0.45  # 0.22 reads up to 0.3; x 1.5: a reading that stays in its bucket is <= 0.67 of it
    assert got[ITL_FLOOR] == 0.75  # 0.41 reads up to 0.5
    assert got[REPLICA_TTFT] == 0.525  # 0.33 reads up to 0.35 (a replica's two-minute p99)
    # The fleet's one-minute TTFT p99 is its slowest request or two: one bucket more (1.5) on top of the 1.5
    assert got[TTFT] == 4.5  # 1.7 reads up to 2.0


def test_a_missing_or_nan_reading_keeps_the_calibrations_value_and_a_tiny_one_gets_the_floor():
    current = {TTFT: 5.0, TPOT: 0.45}
    got = derive({TTFT: None, TPOT: math.nan, REPLICA_TTFT: 0.0001}, current)
    assert got[TTFT] == 5.0 and got[TPOT] == 0.45
    assert got[REPLICA_TTFT] == 0.1  # the TTFT floor: 1.5 x 1 ms would sit below what the buckets tell apart
    assert ITL_FLOOR not in got  # neither read nor calibrated


def test_a_reading_that_sets_no_threshold_is_refused():
    with pytest.raises(ValueError, match="sandbox:threshold:error_share"):
        derive({"sandbox:threshold:error_share": 0.01}, {})


def test_the_window_is_the_baseline_after_the_warm_up_until_one_lead_before_its_first_change():
    assert window(90.0) == (30.0, 75.0)
    assert window(60.0) == (30.0, 45.0)  # oom-at-peak
    assert window(55.0) is None  # 30-40 s: too little to read


def test_the_window_is_read_at_once_at_its_end_and_nan_or_nothing_is_no_reading():
    class InstantProm:  # the instant-query side of the API: {expr: rows}, every query kept
        def __init__(self, rows):
            self.rows, self.queries = rows, []

        def query(self, expr, at=None):
            self.queries.append((expr, at))
            return self.rows.get(expr, [])

    ttft, tpot, replica = (READINGS[n].expr("45s") for n in (TTFT, TPOT, REPLICA_TTFT))
    prom = InstantProm({ttft: [{"metric": {}, "value": [0, "0.9"]}],
                        tpot: [{"metric": {}, "value": [0, "NaN"]}],
                        replica: [{"metric": {}, "value": [0, "0.3"]}]})
    got = measure(prom, 1_000_030, 1_000_075)
    assert got[TTFT] == 0.9 and got[REPLICA_TTFT] == 0.3
    assert got[TPOT] is None and got[ITL_FLOOR] is None
    assert {at for _, at in prom.queries} == {1_000_075}
    assert replica == ("max(histogram_quantile(0.99, sum by (le, replica) "
                       "(rate(vllm:time_to_first_token_seconds_bucket[45s]))))")


def test_every_latency_drill_first_changes_once_the_alerts_windows_hold_no_warm_up():
    from incidents.schema import load_catalogue
    from sandbox.drill.verify import family
    from services.stack.alerts import longest_window_s

    earliest = baseline_slos.earliest_change_s(longest_window_s())
    assert earliest == 30.0 + 120.0 + 15.0
    checked = []
    for incident in load_catalogue().values():
        if family(incident) not in ("latency", "control"):
            continue
        tl = incident.timeline
        first = min([tl.inject_at_s, *(p.at_s for p in incident.traffic.peaks), *(e.at_s for e in tl.events)])
        assert first >= earliest, f"{incident.id} first changes at {first}s, before {earliest}s"
        checked.append(incident.id)
    assert {"slow-replica", "ttft-after-deploy", "tpot-regression", "traffic-surge", "quiet-shift"} <= set(checked)


def test_until_the_baseline_sets_them_its_thresholds_are_unset_and_prometheus_reads_them_back_as_such():
    from services.stack import threshold_rules
    current = {TTFT: 1.2, TPOT: 0.05, "sandbox:threshold:replica_ttft_p99_ratio": 4.0}
    unset = baseline_slos.unset(current)
    assert unset == {**{name: math.inf for name in READINGS}, "sandbox:threshold:replica_ttft_p99_ratio": 4.0}
    assert current[TTFT] == 1.2  # what the baseline's missing readings fall back on stays the calibration's
    rendered = yaml.safe_load(threshold_rules.render(unset, "note"))
    exprs = {r["record"]: r["expr"] for g in rendered["groups"] for r in g["rules"]}
    assert exprs[TTFT] == "vector(inf)" and exprs["sandbox:threshold:replica_ttft_p99_ratio"] == "vector(4)"
    # Prometheus prints the rule it loaded back as `vector(+Inf)`: install waits until it reads what it wrote
    assert threshold_rules._constant("vector(+Inf)") == math.inf and threshold_rules._close(math.inf, math.inf)
    assert threshold_rules._constant("vector(2.25)") == 2.25 and not threshold_rules._close(math.inf, 2.25)


def test_the_tpot_threshold_is_read_from_the_highest_rolling_minute_when_that_is_higher():
    class InstantProm:
        def __init__(self, rows):
            self.rows = rows

        def query(self, expr, at=None):
            return self.rows.get(expr, [])

    reading = READINGS[TPOT]
    highest = reading.highest(120)
    assert highest == ("max_over_time((histogram_quantile(0.5, sum by (le) "
                       "(rate(vllm:request_time_per_output_token_seconds_bucket[60s]))))[60s:2s])")
    assert reading.highest(65) is None  # five seconds of whole minutes: the window's own reading alone
    assert READINGS[TTFT].highest(120) is None  # a p99 per minute is its slowest requests: a bucket more instead
    row = lambda v: [{"metric": {}, "value": [0, v]}]
    got = measure(InstantProm({reading.expr("120s"): row("0.0132"), highest: row("0.0159")}), 1_000_000, 1_000_120)
    assert got[TPOT] == 0.0159
    assert derive(got, {})[TPOT] == 0.03  # 0.0159 reads up to 0.02; the whole window's 0.0132 gave 0.0225
    got = measure(InstantProm({reading.expr("120s"): row("0.0132"), highest: row("0.0120")}), 1_000_000, 1_000_120)
    assert got[TPOT] == 0.0132


def test_prometheus_reads_the_highest_rolling_minute_inside_the_window_and_the_window_at_once(tmp_path):
    from incidents.promql import PromtoolNotFound, promtool_binary
    try:
        promtool = promtool_binary()
    except PromtoolNotFound as e:
        pytest.skip(str(e))
    # 10 requests a second: a minute (120-180 s) of medians in 0.015-0.02 s between two in 0-0.01 s
    low = "0+10x120 1200+0x60 1200+10x60"
    family = "vllm:request_time_per_output_token_seconds"
    series = [{"series": f'{family}_bucket{{le="{le}"}}', "values": low} for le in ("0.01", "0.015")]
    series += [{"series": f'{family}_bucket{{le="{le}"}}', "values": "0+10x240"} for le in ("0.02", "+Inf")]
    series += [{"series": f"{family}_count", "values": "0+10x240"}]
    reading = READINGS[TPOT]
    within = lambda expr, lo, hi: f"({expr} > bool {lo}) * ({expr} <= bool {hi})"
    tests = [{"expr": within(reading.expr("180s"), 0, 0.01), "eval_time": "240s",
              "exp_samples": [{"labels": "{}", "value": 1}]},
             {"expr": within(reading.highest(180), 0.015, 0.02), "eval_time": "240s",
              "exp_samples": [{"labels": "{}", "value": 1}]}]
    spec = {"rule_files": [], "evaluation_interval": "1s",
            "tests": [{"name": "a slow minute in a fast window", "interval": "1s", "input_series": series,
                       "promql_expr_test": tests}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(tmp_path / "test.yml")], capture_output=True,
                            text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
