"""Named evidence for interview mode: what `sandbox ask NAME` reveals, one piece at a time.

Each piece is a few PromQL queries an on-call engineer would run for it, shown as a table (the
last value, and the range) with a terminal sparkline per series. Names and titles say what is
measured, never what it would mean: the candidate draws the conclusion. The grader reads the
same catalogue to score evidence discipline (did the candidate split latency before concluding,
did they ask for what separates their top two hypotheses).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from incidents.taxonomy import suggestion

SPARK = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class Piece:
    name: str
    title: str
    queries: tuple[tuple[str, str], ...]  # (label, PromQL)
    decomposes_latency: bool = False


def _q(h: str, q: float, by: str = "") -> str:
    group = f"le, {by}" if by else "le"
    return f"histogram_quantile({q}, sum by ({group}) (rate(vllm:{h}_bucket[1m])))"


CATALOGUE: tuple[Piece, ...] = (
    Piece("ttft-split", "time to first token split into queue and prefill; decode time per request", (
        ("TTFT p99", _q("time_to_first_token_seconds", 0.99)),
        ("queue time p99", _q("request_queue_time_seconds", 0.99)),
        ("prefill time p50", _q("request_prefill_time_seconds", 0.5)),
        ("prefill time p99", _q("request_prefill_time_seconds", 0.99)),
        ("decode time p50", _q("request_decode_time_seconds", 0.5)),
    ), decomposes_latency=True),
    Piece("latency-by-replica", "inter-token latency and TTFT by replica", (
        ("ITL p99 by replica", _q("inter_token_latency_seconds", 0.99, "replica")),
        ("TTFT p99 by replica", _q("time_to_first_token_seconds", 0.99, "replica")),
    ), decomposes_latency=True),
    Piece("latency-by-version", "inter-token latency and TTFT by deployment version", (
        ("ITL p50 by version", _q("inter_token_latency_seconds", 0.5, "version")),
        ("TTFT p99 by version", _q("time_to_first_token_seconds", 0.99, "version")),
    ), decomposes_latency=True),
    Piece("load", "arrivals, prompt and output lengths, requests running and waiting", (
        ("client requests/s", "sum(rate(sandbox_traffic_requests_total[1m]))"),
        ("mean prompt tokens", "sum(rate(vllm:request_prompt_tokens_sum[1m])) / sum(rate(vllm:request_prompt_tokens_count[1m]))"),
        ("mean output tokens", "sum(rate(vllm:request_generation_tokens_sum[1m])) / sum(rate(vllm:request_generation_tokens_count[1m]))"),
        ("outputs within 5 tokens", 'sum(rate(vllm:request_generation_tokens_bucket{le="5.0"}[1m])) / sum(rate(vllm:request_generation_tokens_count[1m]))'),
        ("finished/s by reason", "sum by (finished_reason) (rate(vllm:request_success_total[1m]))"),
        ("running", "sum(vllm:num_requests_running)"),
        ("waiting", "sum(vllm:num_requests_waiting)"),
    )),
    Piece("queue-by-replica", "requests running and waiting by replica; queue time by replica", (
        ("running by replica", "max by (replica) (vllm:num_requests_running)"),
        ("waiting by replica", "max by (replica) (vllm:num_requests_waiting)"),
        ("queue time p99 by replica", _q("request_queue_time_seconds", 0.99, "replica")),
    ), decomposes_latency=True),
    Piece("iteration-tokens", "tokens per engine step", (
        ("tokens per step p50", _q("iteration_tokens_total", 0.5)),
        ("tokens per step p99", _q("iteration_tokens_total", 0.99)),
    )),
    Piece("prefix-cache", "prefix-cache hit rate", (
        ("hit rate", "sum(rate(vllm:prefix_cache_hits_total[1m])) / sum(rate(vllm:prefix_cache_queries_total[1m]))"),
    )),
    Piece("kv-cache", "KV-cache usage by replica", (
        ("KV usage by replica", "max by (replica) (vllm:kv_cache_usage_perc)"),
    )),
    Piece("device-memory", "device memory used and capacity by replica", (
        ("used bytes", "max by (replica) (sandbox:device_memory_used_bytes)"),
        ("capacity bytes", "max by (replica) (sandbox:device_memory_capacity_bytes)"),
    )),
    Piece("preemptions", "preemptions per second by replica", (
        ("preemptions/s", "sum by (replica) (rate(vllm:num_preemptions_total[1m]))"),
    )),
    Piece("cpu", "CPU used and throttled by replica; CPU seconds per output token", (
        ("throttled s/s", "max by (replica) (rate(sandbox:replica_cpu_throttled_seconds_total[1m]))"),
        ("cores used", "max by (replica) (rate(sandbox:replica_cpu_seconds_total[1m]))"),
        ("CPU ms per output token", "1000 * sum(rate(sandbox:replica_cpu_seconds_total[1m])) / sum(rate(vllm:generation_tokens_total[1m]))"),
    )),
    Piece("spec-decode", "speculative decoding: acceptance; tokens drafted and accepted per step", (
        ("acceptance", "sum(rate(vllm:spec_decode_num_accepted_tokens_total[1m])) / sum(rate(vllm:spec_decode_num_draft_tokens_total[1m]))"),
        ("drafted per step", "sum(rate(vllm:spec_decode_num_draft_tokens_total[1m])) / sum(rate(vllm:spec_decode_num_drafts_total[1m]))"),
        ("accepted per step", "sum(rate(vllm:spec_decode_num_accepted_tokens_total[1m])) / sum(rate(vllm:spec_decode_num_drafts_total[1m]))"),
    )),
    Piece("errors", "client request outcomes by status; replica restarts", (
        ("requests/s by status", "sum by (status) (rate(sandbox_traffic_requests_total[1m]))"),
        ("replica starts", "sum(ray_serve_deployment_replica_starts_total)"),
    )),
    Piece("canary", "canary accuracy by task and answer length; repeated-prompt consistency by mode", (
        ("accuracy by task", 'sum by (task) (rate(sandbox_canary_checks_total{result="correct"}[1m])) / sum by (task) (rate(sandbox_canary_checks_total[1m]))'),
        ("error by length", 'sum by (length) (rate(sandbox_canary_checks_total{result="wrong"}[1m])) / sum by (length) (rate(sandbox_canary_checks_total[1m]))'),
        ("mismatch by mode", 'sum by (mode) (rate(sandbox_canary_consistency_checks_total{result="mismatch"}[1m])) / sum by (mode) (rate(sandbox_canary_consistency_checks_total[1m]))'),
        ("mismatch by replica", 'sum by (replica) (rate(sandbox_canary_consistency_checks_total{result="mismatch"}[1m])) / sum by (replica) (rate(sandbox_canary_consistency_checks_total[1m]))'),
        # greedy repeats alone: the ones every numerics fault changes, per replica (one replica, or all of them)
        ("greedy mismatch by replica", 'sum by (replica) (rate(sandbox_canary_consistency_checks_total'
                                       '{mode="greedy",result="mismatch"}[1m])) / sum by (replica) '
                                       '(rate(sandbox_canary_consistency_checks_total{mode="greedy"}[1m]))'),
    )),
    Piece("engine-config", "engine settings by replica and version (vllm:cache_config_info)", (
        ("config", "max by (replica, version, enable_prefix_caching, gpu_memory_utilization, max_num_seqs, "
                   "max_num_batched_tokens, quantization, cache_dtype, num_speculative_tokens, dtype) "
                   "(vllm:cache_config_info)"),
    )),
)

BY_NAME = {p.name: p for p in CATALOGUE}


def piece(name: str) -> Piece:
    if name not in BY_NAME:
        raise ValueError(f"unknown evidence {name!r}{suggestion(name, BY_NAME)}; `sandbox ask --list` shows them")
    return BY_NAME[name]


def sparkline(values: list[float], width: int = 40) -> str:
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return ""
    if len(values) > width:  # keep the shape: the max of each bucket
        size = len(values) / width
        values = [max((v for v in values[int(i * size):int((i + 1) * size)] if math.isfinite(v)), default=math.nan)
                  for i in range(width)]
    lo, hi = min(vals), max(vals)
    span = hi - lo or 1.0
    return "".join(" " if not math.isfinite(v) else SPARK[min(len(SPARK) - 1, int((v - lo) / span * len(SPARK)))]
                   for v in values)
