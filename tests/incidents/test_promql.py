"""PromQL checks: Prometheus' own parser decides what parses; a syntax tree (promql-parser) says what a query reads."""
from __future__ import annotations

import os
import stat

import pytest

from incidents.promql import (
    PromtoolNotFound,
    check_many,
    check_promql,
    metric_families,
    metric_names,
    parse,
    promtool_binary,
)

VALID_QUERIES = [
    "histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[30s])))",
    "sum(rate(vllm:prefix_cache_hits_total[30s])) / sum(rate(vllm:prefix_cache_queries_total[30s]))",
    ("max(histogram_quantile(0.99, sum by (le, replica) (rate(vllm:inter_token_latency_seconds_bucket[30s]))))\n"
     "  / min(histogram_quantile(0.99, sum by (le, replica) (rate(vllm:inter_token_latency_seconds_bucket[30s]))))"),
    'sum without (Component) (vllm:num_requests_running{model_name="tiny", version=~"v.*"}) > bool 3',
    "rate(vllm:e2e_request_latency_seconds_sum[1m] offset 5m) / rate(vllm:e2e_request_latency_seconds_count[1m])",
    "max_over_time(vllm:kv_cache_usage_perc[5m:30s])",
]


@pytest.mark.parametrize("expr", VALID_QUERIES)
def test_check_promql_accepts_valid_queries(promtool, expr):
    check_promql(expr)


@pytest.mark.parametrize(("expr", "message"), [
    ("rate(foo[5x])", 'bad duration syntax: "5"'),
    ("sum(rate(foo[1m])", "unclosed left parenthesis"),
    ("sum(up) by", "unexpected end of input in grouping opts"),
    ("   ", "empty expression"),
])
def test_check_promql_rejects_invalid_queries_with_the_parser_message(promtool, expr, message):
    with pytest.raises(ValueError, match="^PromQL does not parse: ") as info:
        check_promql(expr)
    assert message in str(info.value)


def test_check_many_maps_each_error_to_its_expression_in_one_run(promtool):
    errors = check_many(["up", "rate(up[1q])", VALID_QUERIES[0], "up +", "up"])
    assert [e is None for e in errors] == [True, False, True, False, True]
    assert "bad duration" in errors[1] and "unexpected end of input" in errors[3]


def test_missing_promtool_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("PROMTOOL_BIN", raising=False)
    monkeypatch.delenv("PROMETHEUS_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PromtoolNotFound, match="promtool not found: run scripts/setup.sh"):
        promtool_binary()
    monkeypatch.setenv("PROMTOOL_BIN", str(tmp_path / "nope"))
    with pytest.raises(PromtoolNotFound, match="PROMTOOL_BIN="):
        promtool_binary()


def test_promtool_next_to_prometheus_bin_is_preferred_to_path(monkeypatch, tmp_path):
    for name in ("prometheus", "promtool"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        os.chmod(tmp_path / name, stat.S_IRWXU)
    monkeypatch.delenv("PROMTOOL_BIN", raising=False)
    monkeypatch.setenv("PROMETHEUS_BIN", str(tmp_path / "prometheus"))
    assert promtool_binary() == str(tmp_path / "promtool")


@pytest.mark.parametrize(("expr", "names"), [
    ("histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[30s])))",
     ["vllm:time_to_first_token_seconds_bucket"]),
    ("sum(rate(vllm:prefix_cache_hits_total[30s])) / sum(rate(vllm:prefix_cache_queries_total[30s]))",
     ["vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"]),
    ("histogram_quantile(0.5, sum(rate(vllm:request_prefill_time_seconds_bucket{replica=\"1\"}[1m])) by (le, replica))",
     ["vllm:request_prefill_time_seconds_bucket"]),
    ('sum without (replica) (vllm:num_requests_running{model_name="m", le="x"} offset 5m) > bool 3',
     ["vllm:num_requests_running"]),
    ("rate(a_sum[5m]) / on(replica) group_left(version) rate(a_count[5m:1m] @ start())", ["a_sum", "a_count"]),
    ('{__name__="up", job="x"} or absent(nan_metric) unless on() Inf_metric', ["up", "nan_metric", "Inf_metric"]),
    ("topk(3, max_over_time(vllm:kv_cache_usage_perc[1h30m])) * 1e3 + count(up) - 0x1f", ["vllm:kv_cache_usage_perc", "up"]),
    ('label_replace(up, "dst", "$1", "src", "(.*)")  # comment naming not_a_metric', ["up"]),
    ("sandbox:replica_cpu_throttled_seconds_total", ["sandbox:replica_cpu_throttled_seconds_total"]),
    ("vector(1)", []),
])
def test_metric_names_extracts_the_metrics_a_query_reads(expr, names):
    assert metric_names(expr) == names


def test_metric_families_fold_histogram_series_onto_their_family():
    expr = "rate(vllm:e2e_request_latency_seconds_sum[1m]) / rate(vllm:e2e_request_latency_seconds_count[1m])"
    assert metric_families(expr) == ["vllm:e2e_request_latency_seconds"]
    assert metric_families(VALID_QUERIES[0]) == ["vllm:time_to_first_token_seconds"]


@pytest.mark.parametrize(("expr", "message"), [
    ("sum(rate(foo[1m])", "unclosed left parenthesis in 'sum(rate(foo[1m])'"),
    ("rate(foo[5x])", "bad number or duration syntax: 5x in 'rate(foo[5x])'"),
    ("up unless 1", "set operator 'unless' not allowed in binary scalar expression in 'up unless 1'"),
    ("   ", "empty expression"),
])
def test_parse_refuses_a_malformed_query_naming_it(expr, message):
    with pytest.raises(ValueError) as info:
        parse(expr)
    assert str(info.value) == message


def test_parse_refuses_brackets_nested_past_the_limit_before_the_parser_sees_them():
    # the Rust parser overflows its stack (a crash, not an error) near 6,000 levels
    deep = "sum(" * 5000 + "up" + ")" * 5000
    with pytest.raises(ValueError, match="brackets nest more than 64 deep"):
        parse(deep)
    assert metric_names("sum(" * 60 + "up" + ")" * 60) == ["up"]
