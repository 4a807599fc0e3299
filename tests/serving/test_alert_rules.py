"""Alert rules (dashboards/rules): valid, symptom-named, wired into the config, and each one fires on its
symptom and stays silent on a healthy baseline (`promtool test rules` over synthetic series)."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from services.serve import metric_names as names
from services.stack import alerts
from services.stack.prometheus_config import render
from services.stack.settings import REPO_ROOT
from tests.promql_series import counter, histogram

promtool = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(promtool is None, reason="promtool not installed (scripts/setup.sh installs it)")

RULES = alerts.rule_files()
ALERTS = alerts.alert_names()
# What the rules may read besides our own declared metrics: Ray Serve's own, as Ray 2.60 exports them.
RAY_SERVE = {"ray_serve_deployment_replica_starts_total", "ray_serve_health_check_failures_total",
             "ray_serve_deployment_replica_healthy"}
CAUSE_WORDS = ("fault", "inject", "incident", "throttl", "leak", "quantiz", "batch-variant", "batch variant",
               "seed is ignored", "ignores the seed", "kernel", "prefix cach", "slow", "bug", "oom", "out of memory")


def _rules() -> list[dict]:
    return [r for g in alerts._groups(RULES) for r in g["rules"]]


def _alert_rules() -> list[dict]:
    return [r for r in _rules() if "alert" in r]


@needs_promtool
def test_promtool_check_rules_passes():
    result = subprocess.run([promtool, "check", "rules", *map(str, RULES)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_alerts_are_the_ones_incidents_page_with():
    assert RULES == [REPO_ROOT / "dashboards" / "rules" / name for name in ("serving.rules.yml", "thresholds.rules.yml")]
    assert ALERTS == ["TimeToFirstTokenHigh", "ClientTimeToFirstTokenHigh", "InterTokenLatencyHigh",
                      "ReplicaInterTokenLatencyHigh", "ReplicaTimeToFirstTokenHigh", "ServingErrorRateHigh", "ReplicaRestarted",
                      "CanaryAccuracyLow", "CanaryOutputsInconsistent"]
    paged = {yaml.safe_load(p.read_text())["page"]["alert"] for p in (REPO_ROOT / "incidents").glob("*.yaml")}
    assert paged - {None} <= set(ALERTS)


def test_every_alert_pages_with_a_summary_a_description_and_a_short_for():
    for rule in _alert_rules():
        assert rule["labels"] == {"severity": "page"}, rule["alert"]
        assert set(rule["annotations"]) == {"summary", "description"}, rule["alert"]
        assert 10 <= _seconds(rule["for"]) <= 30, rule["alert"]


def test_rate_windows_are_between_30s_and_2m():
    windows = [w for r in _rules() for w in re.findall(r"\[(\d+[smh])\]", r["expr"])]
    assert windows and all(30 <= _seconds(w) <= 120 for w in windows)


def test_no_alert_name_summary_or_description_names_a_cause():
    texts = [r.get("alert") or r["record"] for r in _rules()]
    texts += [v for r in _alert_rules() for v in r["annotations"].values()]
    assert not [(t, w) for t in texts for w in CAUSE_WORDS if w in t.lower()]


def test_every_metric_the_rules_read_is_declared_or_ray_serves_own():
    declared = set()
    for spec in names.SERVER_METRICS + names.CLIENT_METRICS + names.CANARY_METRICS:
        declared |= {spec.query_name + s for s in (("_bucket", "_count", "_sum") if spec.kind == "histogram" else ("",))}
    recorded = {r["record"] for r in _rules() if "record" in r}
    read = set()
    for rule in _rules():
        expr = re.sub(r'"[^"]*"', "", rule["expr"])  # label values are not names
        read |= {n for n in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr) if n.startswith(("vllm:", "sandbox", "ray_"))}
    assert read - recorded <= declared | RAY_SERVE


def test_thresholds_are_constants_in_one_group():
    limits = alerts.thresholds()
    assert limits["sandbox:threshold:canary_mismatch_share"] == 0
    assert 0 < limits["sandbox:threshold:canary_accuracy_min"] < 1
    assert all(f"scalar({name})" in "".join(r["expr"] for r in _alert_rules()) for name in limits)


@needs_promtool
def test_the_generated_config_loads_the_rules_and_evaluates_every_second(tmp_path):
    (tmp_path / "sd.json").write_text('[{"labels": {"job": "ray"}, "targets": ["127.0.0.1:1"]}]')
    rule_files = alerts.install_rules(tmp_path / "rules")
    assert [p.name for p in rule_files] == ["serving.rules.yml", "thresholds.rules.yml"]
    text = render(scrape_interval_s=1.0, prometheus_address="127.0.0.1:9", ray_sd_file=tmp_path / "sd.json",
                  targets_dir=tmp_path / "targets", rule_files=rule_files)
    config = yaml.safe_load(text)
    assert config["global"]["evaluation_interval"] == "1000ms"
    assert config["rule_files"] == [str(tmp_path / "rules" / n) for n in ("serving.rules.yml", "thresholds.rules.yml")]
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert jobs["canary"]["file_sd_configs"][0]["files"] == [str(tmp_path / "targets" / "canary-*.json")]
    assert jobs["traffic"]["file_sd_configs"][0]["files"] == [str(tmp_path / "targets" / "traffic-*.json")]
    (tmp_path / "prometheus.yml").write_text(text)
    result = subprocess.run([promtool, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    found = [int(n) for n in re.findall(r"SUCCESS: (\d+) rules found", result.stdout)]
    assert found == [13, 11], result.stdout  # serving.rules.yml, thresholds.rules.yml


# -- promtool test rules -----------------------------------------------------------------------------
# Synthetic series at 1 s resolution. A counter is "start+step x n" (n + 1 samples); "_" is no sample.

TTFT = "vllm:time_to_first_token_seconds"
CLIENT_TTFT = "sandbox_traffic_time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
TPOT = "vllm:request_time_per_output_token_seconds"
REQ = 'sandbox_traffic_requests_total{profile="default",status="%s"}'
CHECK = 'sandbox_canary_checks_total{task="%s",length="short",result="%s"}'
CONSISTENT = 'sandbox_canary_consistency_checks_total{mode="greedy",load="burst",replica="a",result="%s"}'
STARTS = 'ray_serve_deployment_replica_starts_total{application="llm",deployment="LLMServer",replica="%s"}'
HC_FAIL = 'ray_serve_health_check_failures_total{application="llm",deployment="LLMServer",replica="%s"}'
PAGE = {"severity": "page"}

HEALTHY = (histogram(TTFT, "", 3, 0.3) + histogram(CLIENT_TTFT, 'profile="default"', 3, 0.4)
           + histogram(ITL, 'replica="a"', 40, 0.05) + histogram(ITL, 'replica="b"', 40, 0.08)
           + histogram(TPOT, 'replica="a"', 2, 0.05) + histogram(TPOT, 'replica="b"', 2, 0.06)
           + [{"series": REQ % "200", "values": counter(3)}]
           + [{"series": CHECK % (t, "correct"), "values": counter(0.2)} for t in ("add", "sort")]
           + [{"series": CHECK % (t, "wrong"), "values": counter(0)} for t in ("add", "sort")]
           + [{"series": CONSISTENT % "match", "values": counter(1)},
              {"series": CONSISTENT % "mismatch", "values": counter(0)}]
           + [{"series": STARTS % r, "values": "1x300"} for r in ("r1", "r2")])


def _with(replaced: list[dict], base=HEALTHY) -> list[dict]:
    names_ = {s["series"] for s in replaced}
    return [s for s in base if s["series"] not in names_] + replaced


# (scenario, input series, {eval time: {alert: [labels of each firing instance]}}); an alert not named
# at an eval time must not be firing then.
SCENARIOS = [
    ("healthy baseline", HEALTHY, {"30s": {}, "1m30s": {}, "5m": {}}),
    ("server time to first token up", _with(histogram(TTFT, "", 3, 4.0)),
     {"15s": {}, "1m": {"TimeToFirstTokenHigh": [PAGE]}}),
    ("client time to first token up", _with(histogram(CLIENT_TTFT, 'profile="default"', 3, 4.5)),
     {"1m": {"ClientTimeToFirstTokenHigh": [PAGE]}}),
    ("time per output token up on every replica",
     _with(histogram(TPOT, 'replica="a"', 2, 0.3) + histogram(TPOT, 'replica="b"', 2, 0.3)),
     {"15s": {}, "1m": {"InterTokenLatencyHigh": [PAGE]}}),
    # the slowest steps' gaps (a prefill chunk's) are the p99's, not the median request's decode speed
    ("inter-token latency up on one replica", _with(histogram(ITL, 'replica="b"', 40, 2.0)),
     {"1m": {"ReplicaInterTokenLatencyHigh": [{**PAGE, "replica": "b"}]}}),
    ("one replica a bit behind the other is no page", _with(histogram(ITL, 'replica="b"', 40, 0.4)),
     {"2m": {}}),
    ("time to first token up on one replica",
     _with(histogram(TTFT, 'replica="a"', 3, 0.3) + histogram(TTFT, 'replica="b"', 3, 4.0)),
     {"15s": {}, "1m": {"TimeToFirstTokenHigh": [PAGE], "ReplicaTimeToFirstTokenHigh": [{**PAGE, "replica": "b"}]}}),
    ("one replica answering a little later than the other is no page",
     _with(histogram(TTFT, 'replica="a"', 3, 0.3) + histogram(TTFT, 'replica="b"', 3, 0.9)), {"2m": {}}),
    ("client errors", _with([{"series": REQ % "503", "values": counter(0.3)}]),
     {"1m": {"ServingErrorRateHigh": [PAGE]}}),
    ("clients giving up is no error", _with([{"series": REQ % "499", "values": counter(0.3)}]), {"1m": {}}),
    ("requests refused over an admission limit are no error",
     _with([{"series": REQ % "429", "values": counter(0.3)}]), {"1m": {}}),
    ("a replica replaced after failing health checks",
     _with([{"series": STARTS % "r3", "values": "_x179 1x120"}, {"series": HC_FAIL % "r1", "values": "_x174 1x125"}]),
     {"3m": {}, "3m20s": {"ReplicaRestarted": [{**PAGE, "application": "llm", "deployment": "LLMServer"}]},
      "4m30s": {}}),
    ("a rolling deploy (new replicas, no failed health checks) is no page",
     _with([{"series": STARTS % "r3", "values": "_x179 1x120"}, {"series": STARTS % "r4", "values": "_x189 1x110"}]),
     {"3m20s": {}, "4m": {}}),
    ("replicas starting a few seconds apart at startup are no page",
     _with([{"series": STARTS % "r2", "values": "_x8 1x291"}]), {"1m5s": {}, "1m10s": {}}),
    ("a task answered wrong", _with([{"series": CHECK % ("sort", "wrong"), "values": counter(0.2)}]),
     {"1m": {"CanaryAccuracyLow": [{**PAGE, "task": "sort"}]}}),
    ("one wrong answer a minute is no page",
     _with([{"series": CHECK % ("sort", "wrong"), "values": "0x59 1x59 2x59 3x59 4x59"}]), {"2m": {}, "4m": {}}),
    ("too few checks to judge", _with([{"series": CHECK % ("sort", "correct"), "values": counter(0.02)},
                                       {"series": CHECK % ("sort", "wrong"), "values": counter(0.02)}]),
     {"2m": {}}),
    ("a repeated prompt changes its answer", _with([{"series": CONSISTENT % "mismatch", "values": "0x150 1x149"}]),
     {"2m30s": {}, "2m50s": {"CanaryOutputsInconsistent": [{**PAGE, "mode": "greedy"}]}, "4m": {}}),
]


def _without_annotations(rules_dir: Path) -> Path:
    """The rules with annotations dropped: promtool compares them too, and they are checked above."""
    data = {"groups": [g for path in RULES for g in yaml.safe_load(path.read_text())["groups"]]}
    for group in data["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    path = rules_dir / "serving.rules.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@needs_promtool
@pytest.mark.parametrize("scenario, series, expected", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_alerts_fire_on_their_symptom_and_only_then(tmp_path, scenario, series, expected):
    rules = _without_annotations(tmp_path)
    cases = [{"eval_time": t, "alertname": name, "exp_alerts": [{"exp_labels": lb} for lb in firing.get(name, [])]}
             for t, firing in expected.items() for name in ALERTS]
    spec = {"rule_files": [str(rules)], "evaluation_interval": "1s",
            "tests": [{"name": scenario, "interval": "1s", "input_series": series, "alert_rule_test": cases}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(tmp_path / "test.yml")], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def _seconds(duration: str) -> int:
    return sum(int(n) * {"s": 1, "m": 60, "h": 3600}[u] for n, u in re.findall(r"(\d+)([smh])", duration))


# -- services/stack/alerts.py against a fake Prometheus API ----------------------------------------------------

def _fake_prometheus(routes: dict):
    import httpx

    from services.stack.prometheus import PrometheusClient

    seen = []

    def handler(request):
        seen.append(dict(request.url.params))
        return httpx.Response(200, json={"status": "success", "data": routes[request.url.path]})

    client = PrometheusClient("http://prom")
    client._http = httpx.Client(transport=httpx.MockTransport(handler))
    return client, seen


def test_active_alerts_parse_states_times_and_values():
    client, _ = _fake_prometheus({"/api/v1/alerts": {"alerts": [
        {"labels": {"alertname": "CanaryAccuracyLow", "task": "sort", "severity": "page"},
         "annotations": {"summary": "s"}, "state": "firing", "activeAt": "2024-05-01T10:00:00.123456789Z",
         "value": "7.5e-01"},
        {"labels": {"alertname": "TimeToFirstTokenHigh"}, "annotations": {}, "state": "pending",
         "activeAt": "2024-05-01T10:00:05Z", "value": "NaN"}]}})
    got = alerts.active_alerts(client)
    assert [(a.name, a.state, a.value) for a in got] == [("CanaryAccuracyLow", "firing", 0.75),
                                                         ("TimeToFirstTokenHigh", "pending", None)]
    assert got[0].active_at == pytest.approx(1714557600.123456)
    assert got[0].labels["task"] == "sort" and got[0].annotations == {"summary": "s"}
    assert [a.name for a in alerts.firing(client)] == ["CanaryAccuracyLow"]


def test_first_firing_reads_the_alerts_series_over_the_window():
    client, seen = _fake_prometheus({"/api/v1/query_range": {"resultType": "matrix", "result": [
        {"metric": {"alertname": "ReplicaRestarted"}, "values": [[1000.0, "1"], [1001.0, "1"]]}]}})
    assert alerts.first_firing(client, "ReplicaRestarted", 900, 1100) == 1000.0
    assert seen[-1]["query"] == 'max by (alertname) (ALERTS{alertstate="firing",alertname="ReplicaRestarted"})'
    assert (seen[-1]["start"], seen[-1]["end"], seen[-1]["step"]) == ("900", "1100", "1.0")
    assert alerts.fired_between(client, 900, 1100) == {"ReplicaRestarted": 1000.0}


def test_rule_problems_names_rules_that_failed_to_evaluate():
    client, _ = _fake_prometheus({"/api/v1/rules": {"groups": [{"name": "latency", "rules": [
        {"name": "TimeToFirstTokenHigh", "health": "ok"},
        {"name": "InterTokenLatencyHigh", "health": "err", "lastError": "many-to-many matching"}]}]}})
    assert alerts.rule_problems(client) == ["latency/InterTokenLatencyHigh: many-to-many matching"]


def test_parse_time_takes_prometheus_nanoseconds():
    assert alerts.parse_time("1970-01-01T00:00:01.000000999Z") == pytest.approx(1.0)
    assert alerts.parse_time(None) is None
