"""Metric names: vLLM's vocabulary, what Ray is handed, what Prometheus stores, what lint says."""
import shutil
import subprocess

import pytest
from prometheus_client import generate_latest

from sandbox.traffic.exporter import TrafficExporter
from services.serve import metric_names as names
from services.stack.prometheus_config import render

BRIEF_FAMILIES = {
    "time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds",
    "request_queue_time_seconds", "request_prefill_time_seconds", "request_decode_time_seconds",
    "request_prompt_tokens", "request_generation_tokens", "iteration_tokens_total", "prompt_tokens_total",
    "generation_tokens_total", "request_success_total", "num_preemptions_total", "prefix_cache_queries_total",
    "prefix_cache_hits_total", "spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total", "num_requests_running", "num_requests_waiting",
    "kv_cache_usage_perc", "cache_config_info"}


def test_every_family_of_the_brief_is_declared_under_vllm():
    assert BRIEF_FAMILIES <= {s.name for s in names.SERVER_METRICS if s.namespace == "vllm"}


def test_query_names_look_like_vllm_and_record_names_suit_ray():
    assert names.TIME_TO_FIRST_TOKEN.query_name == "vllm:time_to_first_token_seconds"
    assert names.TIME_TO_FIRST_TOKEN.record_name == "vllm_time_to_first_token_seconds"
    assert names.PROMPT_TOKENS.record_name == "vllm_prompt_tokens"  # the exporter appends _total
    assert all(":" not in s.record_name for s in names.SERVER_METRICS + names.CLIENT_METRICS)


# A resource counter every replica exports at all times, as cAdvisor's container_cpu_cfs_throttled_* do
# for every container: evidence a candidate should know to look for, not a hint at one cause.
RESOURCE_COUNTERS = {names.REPLICA_CPU_PERIODS_THROTTLED.query_name, names.REPLICA_CPU_THROTTLED.query_name}


def test_no_name_or_label_hints_at_a_cause():
    words = ("fault", "slow", "throttl", "bug", "inject", "incident", "leak")
    texts = [s.query_name for s in names.SERVER_METRICS + names.CLIENT_METRICS if s.query_name not in RESOURCE_COUNTERS]
    texts += [lbl for s in names.SERVER_METRICS + names.CLIENT_METRICS for lbl in s.extra_labels]
    texts += list(names.SERVER_LABELS)
    assert not [t for t in texts if any(w in t for w in words)]


def test_buckets_are_sorted_and_positive():
    for spec in names.SERVER_METRICS + names.CLIENT_METRICS:
        if spec.kind == "histogram":
            assert list(spec.buckets) == sorted(set(spec.buckets)) and spec.buckets[0] > 0, spec.name


promtool = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(promtool is None, reason="promtool not installed (scripts/setup.sh installs it)")


@needs_promtool
def test_the_generated_prometheus_config_passes_promtool(tmp_path):
    (tmp_path / "sd.json").write_text('[{"labels": {"job": "ray"}, "targets": ["127.0.0.1:1"]}]')
    path = tmp_path / "prometheus.yml"
    path.write_text(render(scrape_interval_s=1.0, prometheus_address="127.0.0.1:9", ray_sd_file=tmp_path / "sd.json",
                           targets_dir=tmp_path / "targets"))
    result = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_the_traffic_endpoint_passes_promtool_lint():
    exporter = TrafficExporter("default", first_port=19400)
    try:
        exporter.started()
        exporter.finished("200", 0.5, 0.1, 12)
        exporter.started()
        exporter.finished("503", 0.01, None, 0)
        text = generate_latest(exporter.registry)
    finally:
        exporter.close()
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, check=False)
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), \
        (result.stdout + result.stderr).decode()


def test_cpu_bandwidth_counters_are_declared_like_cadvisors():
    assert [(s.query_name, s.kind) for s in (names.REPLICA_CPU_PERIODS, names.REPLICA_CPU_PERIODS_THROTTLED,
                                             names.REPLICA_CPU_THROTTLED)] == [
        ("sandbox:replica_cpu_periods_total", "counter"), ("sandbox:replica_cpu_periods_throttled_total", "counter"),
        ("sandbox:replica_cpu_throttled_seconds_total", "counter")]
    assert names.REPLICA_CPU.query_name == "sandbox:replica_cpu_seconds_total"
    assert {names.REPLICA_CPU_PERIODS, names.REPLICA_CPU_PERIODS_THROTTLED, names.REPLICA_CPU_THROTTLED} <= set(
        names.SERVER_METRICS)
