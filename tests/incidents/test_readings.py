"""Queries read as quantities: the same quantity in any form, its scope, its polarity, what 0/0 means."""
from __future__ import annotations

import pytest

from incidents.readings import readings, unread_metrics

HITS, QUERIES = "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"


def one(expr: str) -> tuple:
    found = readings(expr)
    assert len(found) == 1, found
    r = found[0]
    return r.quantity, r.part, r.scope, r.polarity, r.form, r.side


@pytest.mark.parametrize(("expr", "want"), [
    # one quantity, four forms: client counter, server counter, a histogram's _count, with a status filter
    ("sum(rate(sandbox_traffic_requests_total[1m]))", ("request-rate", (), "fleet", 1, "rate", "client")),
    ("sum(rate(vllm:request_success_total[1m]))", ("request-rate", (), "fleet", 1, "rate", "server")),
    ("sum(rate(vllm:time_to_first_token_seconds_count[1m]))", ("request-rate", (), "fleet", 1, "rate", "server")),
    ('sum(rate(sandbox_traffic_requests_total{status="200"}[1m]))', ("request-rate", (), "fleet", 1, "rate", "client")),
    ('sum(rate(sandbox_traffic_requests_total{status!~"200|499"}[30s])) or vector(0)',
     ("errors", (), "fleet", 1, "rate", "client")),
    # quantile and mean of one histogram
    ("histogram_quantile(0.5, sum by (le) (rate(vllm:request_prefill_time_seconds_bucket[30s])))",
     ("prefill-time", (), "fleet", 1, "p50", "server")),
    ("sum(rate(vllm:request_prefill_time_seconds_sum[1m])) / sum(rate(vllm:request_prefill_time_seconds_count[1m]))",
     ("prefill-time", (), "fleet", 1, "mean", "server")),
    ('rate(vllm:request_prefill_time_seconds_bucket{le="0.5"}[1m]) / '
     "rate(vllm:request_prefill_time_seconds_count[1m])",
     ("prefill-time", (), "by-replica", -1, "share under a bound", "server")),
    # per replica, the worst and best replica, the spread between them
    (f"sum by (replica) (rate({HITS}[1m])) / sum by (replica) (rate({QUERIES}[1m]))",
     ("prefix-cache-hit-rate", (), "by-replica", 1, "ratio", "server")),
    ("min(histogram_quantile(0.99, sum by (le, replica) (rate(vllm:iteration_tokens_total_bucket[30s]))))",
     ("iteration-tokens", (), "replica-min", 1, "p99", "server")),
    ("max(rate(sandbox:replica_cpu_throttled_seconds_total[30s]))", ("cpu-throttling", (), "replica-max", 1, "rate",
                                                                     "server")),
    ("max(histogram_quantile(0.99, sum by (le, replica) (rate(vllm:inter_token_latency_seconds_bucket[30s]))))"
     " / min(histogram_quantile(0.99, sum by (le, replica) (rate(vllm:inter_token_latency_seconds_bucket[30s]))))",
     ("time-between-tokens", (), "replica-spread", 1, "p99", "server")),
    # turned: a complement, a share of what went wrong, used memory for headroom (and its max is the headroom's min)
    (f"1 - sum(rate({HITS}[1m])) / sum(rate({QUERIES}[1m]))", ("prefix-cache-hit-rate", (), "fleet", -1, "ratio",
                                                                 "server")),
    ('max(sum by (task) (rate(sandbox_canary_checks_total{result="wrong"}[1m])) / sum by (task) '
     '(rate(sandbox_canary_checks_total[1m])))', ("task-accuracy", (), "task-min", -1, "share wrong", "client")),
    ("max(sandbox:device_memory_used_bytes)", ("device-memory-headroom", (), "replica-min", -1, "gauge", "server")),
    ("min(sandbox:device_memory_capacity_bytes - sandbox:device_memory_used_bytes)",
     ("device-memory-headroom", (), "replica-min", 1, "difference", "server")),
    # parts: a slice of the canary's checks
    ('sum(rate(sandbox_canary_consistency_checks_total{mode="greedy",load="burst",result="mismatch"}[1m]))'
     ' / sum(rate(sandbox_canary_consistency_checks_total{mode="greedy",load="burst"}[1m]))',
     ("output-mismatch", (("load", "burst"), ("mode", "greedy")), "fleet", 1, "share mismatched", "client")),
    # a gap between two parts is its own reading
    ('(sum(rate(sandbox_canary_checks_total{length="long",result="wrong"}[1m])) / '
     'sum(rate(sandbox_canary_checks_total{length="long"}[1m]))) - (sum(rate(sandbox_canary_checks_total'
     '{length="short",result="wrong"}[1m])) / sum(rate(sandbox_canary_checks_total{length="short"}[1m])))',
     ("task-accuracy", (), "gap length long-short", -1, "gap of share wrong", "client")),
    ("count(max by (replica) (vllm:num_requests_running))", ("replicas-serving", (), "fleet", 1, "count", "server")),
])
def test_a_query_reads_its_quantity_whatever_its_form(expr, want):
    assert one(expr) == want


def test_filters_read_their_left_side_and_absent_reads_nothing():
    expr = "sum(rate(vllm:num_preemptions_total[1m])) and on() absent(vllm:kv_cache_usage_perc) > bool 0"
    assert [r.quantity for r in readings(expr)] == ["preemptions"]
    assert readings("vector(1) + time()") == []


def test_a_ratio_whose_counters_can_stop_carries_what_0_over_0_means():
    r, = readings(f"sum(rate({HITS}[1m])) / sum(rate({QUERIES}[1m]))")
    ratio, denominator, value, means = r.stopped
    assert (ratio, denominator, value) == (f"sum(rate({HITS}{{}}[1m])) / sum(rate({QUERIES}{{}}[1m]))",
                                          f"sum(rate({QUERIES}{{}}[1m]))", 0.0)
    assert "cache is off" in means


def test_a_metric_no_quantity_covers_is_named():
    assert readings("max(vllm:cache_config_info)") == []
    assert unread_metrics("max(vllm:cache_config_info) + max(vllm:kv_cache_usage_perc)") == ["vllm:cache_config_info"]


def test_a_query_that_does_not_parse_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match=r"unclosed left parenthesis in 'sum\(rate\(x\[1m\]\)'"):
        readings("sum(rate(x[1m])")
