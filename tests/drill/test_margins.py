"""An alert's margin: its expression over its threshold, above 1 exactly when the alert's condition holds.

Prometheus' own evaluator (`promtool test rules`, synthetic series at 1 s) decides the PromQL; the
page and baseline margins over a window are read from a fake range-query API.
"""
import re
import subprocess

import pytest
import yaml

from incidents.promql import PromtoolNotFound, promtool_binary
from sandbox.drill import margins
from services.stack import alerts
from tests.drill.series_prom import ExprProm, SeriesProm
from tests.promql_series import counter, histogram

THRESHOLD = re.compile(r"sandbox:threshold:\w+")


def test_every_alert_has_a_margin_that_reads_its_alerts_thresholds():
    rules = alerts.alert_rules()
    assert sorted(margins.MARGINS) == sorted(alerts.alert_names())
    for name, rule in rules.items():
        assert set(THRESHOLD.findall(margins.MARGINS[name])) == set(THRESHOLD.findall(rule["expr"])), name


def test_an_alerts_for_is_read_from_the_rule_files_in_seconds():
    assert alerts.alert_for_seconds("TimeToFirstTokenHigh") == 20.0
    assert alerts.alert_for_seconds("ReplicaTimeToFirstTokenHigh") == 30.0
    assert alerts.alert_for_seconds("CanaryOutputsInconsistent") == 15.0
    with pytest.raises(ValueError, match="no alert 'Nope'"):
        alerts.alert_for_seconds("Nope")


def test_a_for_of_minutes_and_seconds_and_none_at_all_parse(tmp_path):
    path = tmp_path / "x.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [
        {"alert": "A", "expr": "up", "for": "1m30s"}, {"alert": "B", "expr": "up"},
        {"alert": "C", "expr": "up", "for": "soon"}]}]}))
    assert alerts.alert_for_seconds("A", [path]) == 90.0
    assert alerts.alert_for_seconds("B", [path]) == 0.0
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        alerts.alert_for_seconds("C", [path])


def test_an_unknown_alert_has_no_margin():
    with pytest.raises(ValueError, match="no margin for alert 'Nope'"):
        margins.margin_expr("Nope")


# -- page and baseline margins over a window ------------------------------------------------------

def test_a_margin_held_for_less_than_for_does_not_count():
    # 3.0 for 10 s, then 1.2: a 20 s `for` is held at 1.2 at most
    prom = SeriesProm(lambda t: 3.0 if 100 <= t < 110 else 1.2)
    assert margins.page_margin(prom, "TimeToFirstTokenHigh", 100, 200, for_s=20) == 1.2
    assert margins.baseline_margin(prom, "TimeToFirstTokenHigh", 100, 200) == 3.0


def test_the_page_margin_is_the_lowest_value_of_the_best_held_stretch():
    # 2.5 for 21 samples (20 s), 4.0 for 20 samples (19 s): only the first is held for 20 s
    fn = lambda t: 2.5 if 120 <= t <= 140 else 4.0 if 160 <= t < 180 else 0.5
    assert margins.page_margin(SeriesProm(fn), "ServingErrorRateHigh", 100, 200, for_s=20) == 2.5
    assert margins.page_margin(SeriesProm(fn), "ServingErrorRateHigh", 100, 200, for_s=19) == 4.0


def test_a_stretch_must_lie_inside_the_window_and_gaps_break_it():
    fn = lambda t: None if t == 130 else 2.0 if t < 150 else 1.0
    # [100, 129] is 29 s at 2.0 but the window starts at 110: 19 s held; [131, 149] is 18 s
    assert margins.page_margin(SeriesProm(fn), "ServingErrorRateHigh", 110, 200, for_s=20) == 1.0
    assert margins.page_margin(SeriesProm(fn), "ServingErrorRateHigh", 100, 200, for_s=20) == 2.0


def test_no_readings_or_too_few_are_none():
    assert margins.page_margin(SeriesProm(lambda t: None), "ReplicaRestarted", 0, 100, 15) is None
    assert margins.baseline_margin(SeriesProm(lambda t: None), "ReplicaRestarted", 0, 100) is None
    assert margins.page_margin(SeriesProm(lambda t: 9.0), "ReplicaRestarted", 0, 10, 15) is None
    assert margins.baseline_margin(SeriesProm(lambda t: float("nan") if t < 50 else 0.25),
                                   "ReplicaRestarted", 0, 100) == 0.25


# -- the PromQL, evaluated by Prometheus ---------------------------------------------------------------
# A counter is "start+step x n" (n + 1 samples); "_" is no sample.

TTFT = "vllm:time_to_first_token_seconds"
CLIENT_TTFT = "sandbox_traffic_time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
REQ = 'sandbox_traffic_requests_total{status="%s"}'
CHECK = 'sandbox_canary_checks_total{task="%s",result="%s"}'
REPEAT = 'sandbox_canary_consistency_checks_total{mode="greedy",replica="a",result="%s"}'
STARTS = 'ray_serve_deployment_replica_starts_total{application="llm",deployment="LLMServer",replica="%s"}'
HC_FAIL = 'ray_serve_health_check_failures_total{application="llm",deployment="LLMServer",replica="%s"}'

# No error, wrong answer or mismatch series yet: the margins read 0 there, not "no data".
HEALTHY = (histogram(TTFT, 'replica="a"', 3, 0.3) + histogram(TTFT, 'replica="b"', 3, 0.4)
           + histogram(CLIENT_TTFT, "", 3, 0.4)
           + histogram(ITL, 'replica="a"', 40, 0.05) + histogram(ITL, 'replica="b"', 40, 0.08)
           + [{"series": REQ % "200", "values": counter(3)}]
           + [{"series": CHECK % (t, "correct"), "values": counter(0.2)} for t in ("add", "sort")]
           + [{"series": REPEAT % "match", "values": counter(1)}]
           + [{"series": STARTS % r, "values": "1x300"} for r in ("r1", "r2")])


def _with(replaced: list[dict], drop: str | None = None) -> list[dict]:
    """HEALTHY with `replaced` in place of its series of the same name (and none named drop...)."""
    names = {s["series"] for s in replaced}
    return [s for s in HEALTHY if s["series"] not in names and not (drop and s["series"].startswith(drop))] + replaced


# (scenario, input series, eval times, {(eval time, alert): margin rounded to 0.001})
SCENARIOS = [
    ("healthy", HEALTHY, ["30s", "1m30s", "4m"],
     {("4m", "TimeToFirstTokenHigh"): 0.198, ("4m", "ServingErrorRateHigh"): 0.0,
      ("4m", "ReplicaRestarted"): 0.0, ("4m", "CanaryAccuracyLow"): 0.0, ("4m", "CanaryOutputsInconsistent"): 0.0,
      ("4m", "ReplicaTimeToFirstTokenHigh"): 0.248}),
    ("server time to first token up", _with(histogram(TTFT, 'replica="a"', 3, 4.0)
                                            + histogram(TTFT, 'replica="b"', 3, 4.0)), ["1m", "4m"],
     {("4m", "TimeToFirstTokenHigh"): 1.99}),
    # half the requests in (2.5, 2.52]: p99 = 2.5 + 0.02 * 0.98; then in (2.4, 2.5]: 2.4 + 0.1 * 0.98
    ("server time to first token just over its threshold",
     _with(histogram(TTFT, 'replica="a"', 3, 2.51, les=(1.0, 2.5, 2.52))
           + histogram(TTFT, 'replica="b"', 3, 0.3, les=(1.0, 2.5, 2.52)), drop=TTFT), ["2m"],
     {("2m", "TimeToFirstTokenHigh"): 1.008}),
    ("server time to first token just under its threshold",
     _with(histogram(TTFT, 'replica="a"', 3, 2.45, les=(1.0, 2.4, 2.5))
           + histogram(TTFT, 'replica="b"', 3, 0.3, les=(1.0, 2.4, 2.5)), drop=TTFT), ["2m"],
     {("2m", "TimeToFirstTokenHigh"): 0.999}),
    ("client time to first token up", _with(histogram(CLIENT_TTFT, "", 3, 4.5)), ["1m", "4m"], {}),
    ("inter-token latency up on one replica", _with(histogram(ITL, 'replica="b"', 40, 2.0)), ["1m", "4m"],
     {("4m", "ReplicaInterTokenLatencyHigh"): 4.97}),
    ("one replica a bit behind the other", _with(histogram(ITL, 'replica="b"', 40, 0.4)), ["2m"], {}),
    ("time to first token up on one replica", _with(histogram(TTFT, 'replica="b"', 3, 4.0)), ["1m", "4m"],
     {("4m", "ReplicaTimeToFirstTokenHigh"): 2.488}),
    # b's p99 is 10x a's (over the ratio) but under the 2 s floor: the smaller ratio, the floor's, is the margin
    ("a slow replica under the floor", _with(histogram(TTFT, 'replica="a"', 3, 0.05)
                                             + histogram(TTFT, 'replica="b"', 3, 0.9)), ["2m"],
     {("2m", "ReplicaTimeToFirstTokenHigh"): 0.497}),
    ("client errors", _with([{"series": REQ % "503", "values": counter(0.3)}]), ["1m", "4m"],
     {("4m", "ServingErrorRateHigh"): 1.818}),
    ("clients giving up is no error", _with([{"series": REQ % "499", "values": counter(0.3)}]), ["1m"],
     {("1m", "ServingErrorRateHigh"): 0.0}),
    ("a replica replaced after failing health checks",
     _with([{"series": STARTS % "r3", "values": "_x179 1x120"}, {"series": HC_FAIL % "r1", "values": "_x174 1x125"}]),
     ["3m", "3m20s", "4m30s"], {("3m20s", "ReplicaRestarted"): 2.0, ("4m30s", "ReplicaRestarted"): 0.0}),
    ("a rolling deploy is no restart", _with([{"series": STARTS % "r3", "values": "_x179 1x120"}]), ["3m20s"],
     {("3m20s", "ReplicaRestarted"): 0.0}),
    ("a task answered wrong", _with([{"series": CHECK % ("sort", "wrong"), "values": counter(0.2)}]),
     ["1m", "4m"], {("4m", "CanaryAccuracyLow"): 3.333}),
    ("one wrong answer a minute",
     _with([{"series": CHECK % ("sort", "wrong"), "values": "0x59 1x59 2x59 3x59 4x59"}]), ["2m", "4m"], {}),
    ("a repeated prompt changes its answer", _with([{"series": REPEAT % "mismatch", "values": "0x150 1x149"}]),
     ["2m30s", "2m50s", "4m"], {("2m50s", "CanaryOutputsInconsistent"): 2.0}),
]
TOO_FEW = _with([{"series": CHECK % ("sort", "correct"), "values": counter(0.02)},
                 {"series": CHECK % ("sort", "wrong"), "values": counter(0.02)},
                 {"series": CHECK % ("add", "correct"), "values": counter(0.02)}])


@pytest.fixture
def promtool():
    try:
        return promtool_binary()
    except PromtoolNotFound as e:
        pytest.skip(str(e))


# The thresholds the expected margins below are worked out with, in place of the shipped ones (which
# calibration replaces and re-tuning moves).
THRESHOLDS = {"ttft_p99_seconds": 2.5, "client_ttft_p99_seconds": 4, "tpot_p50_seconds": 0.15,
              "replica_itl_p99_ratio": 2.5, "replica_itl_p99_floor_seconds": 0.5, "replica_ttft_p99_ratio": 4,
              "replica_ttft_p99_floor_seconds": 2, "error_share": 0.05, "canary_accuracy_min": 0.85,
              "canary_min_checks": 5, "canary_mismatch_share": 0}


def _rules_with_fixed_thresholds(tmp_path) -> str:
    groups = [g for path in alerts.rule_files() for g in yaml.safe_load(path.read_text())["groups"]
              if g["name"] != alerts.THRESHOLD_GROUP]
    groups.append({"name": alerts.THRESHOLD_GROUP, "rules": [{"record": f"sandbox:threshold:{k}", "expr": f"vector({v})"}
                                                            for k, v in THRESHOLDS.items()]})
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return str(path)


def test_the_fixed_thresholds_are_the_ones_the_alerts_read():
    assert {f"sandbox:threshold:{k}" for k in THRESHOLDS} == set(alerts.thresholds())


def _promtool_test(promtool, tmp_path, name: str, series: list[dict], expr_tests: list[dict]) -> None:
    spec = {"rule_files": [_rules_with_fixed_thresholds(tmp_path)], "evaluation_interval": "1s",
            "tests": [{"name": name, "interval": "1s", "input_series": series, "promql_expr_test": expr_tests}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(tmp_path / "test.yml")], capture_output=True, text=True,
                            check=False, timeout=60)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def _holds(expr: str) -> str:
    """1 when any series of expr exists (the alert's condition holds), else 0."""
    return f"(count({expr}) > bool 0) or on() vector(0)"


@pytest.mark.parametrize(("scenario", "series", "times", "values"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_a_margin_is_above_one_exactly_when_its_alerts_condition_holds(promtool, tmp_path, scenario, series,
                                                                         times, values):
    rules = alerts.alert_rules()
    tests = [{"expr": f"((({margins.MARGINS[a]}) > bool 1) or on() vector(0)) - on() ({_holds(rules[a]['expr'])})",
              "eval_time": t, "exp_samples": [{"labels": "{}", "value": 0}]}
             for t in times for a in rules]
    tests += [{"expr": f"round({margins.MARGINS[a]}, 0.001)", "eval_time": t,
               "exp_samples": [{"labels": "{}", "value": v}]} for (t, a), v in values.items()]
    _promtool_test(promtool, tmp_path, scenario, series, tests)


def test_a_task_with_too_few_checks_has_no_accuracy_margin(promtool, tmp_path):
    tests = [{"expr": margins.MARGINS["CanaryAccuracyLow"], "eval_time": "2m", "exp_samples": []}]
    _promtool_test(promtool, tmp_path, "too few checks", TOO_FEW, tests)


def test_a_margin_read_at_one_moments_thresholds_reads_them_there_and_not_at_each_step(promtool, tmp_path):
    # verify reads a baseline against the thresholds at its end, after the drill (a calibrated drill's latency
    # thresholds are unset, +Inf, until its baseline sets them). promtool holds series only up to each
    # evaluation, so here the moment is in the past: 2.5 until 2m, +Inf after, read at 4m.
    name = "sandbox:threshold:ttft_p99_seconds"
    expr = margins.margin_expr("TimeToFirstTokenHigh", thresholds_at=100)
    assert expr == margins.MARGINS["TimeToFirstTokenHigh"].replace(name, f"{name} @ 100.000")
    spec = {"rule_files": [_rules_with_fixed_thresholds(tmp_path)], "evaluation_interval": "1s",
            "tests": [{"name": "thresholds unset later", "interval": "1s", "input_series": HEALTHY + [
                {"series": f"{name}_set", "values": "2.5x119 " + "+Inf " * 181}],
                "promql_expr_test": [
                    {"expr": f"round({m.replace(name, f'{name}_set')}, 0.001)", "eval_time": "4m",
                     "exp_samples": [{"labels": "{}", "value": v}]}
                    for m, v in ((margins.MARGINS["TimeToFirstTokenHigh"], 0), (expr, 0.198))]}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(tmp_path / "test.yml")], capture_output=True, text=True,
                            check=False, timeout=60)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_a_baseline_margin_asks_for_the_thresholds_at_its_windows_end():
    prom = ExprProm({margins.MARGINS["ServingErrorRateHigh"]: lambda t: 0.2})
    assert margins.baseline_margin(prom, "ServingErrorRateHigh", 100, 199) == 0.2
    assert prom.queries == [(margins.margin_expr("ServingErrorRateHigh", thresholds_at=199), 100, 199)]
    assert "sandbox:threshold:error_share @ 199.000" in prom.queries[0][0]
