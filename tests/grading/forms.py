"""Each variant's evidence written in other forms than its incident file's signals, as an engineer might.

Server side for client side, a mean (`_sum / _count`) for a quantile, per replica for the fleet,
a share of what went right for a share of what went wrong: the same quantities, which must score
what the canonical form scores. Every query reads only series its fixture holds (a pruned
recording keeps what the incident's signals read, with each histogram's `_sum` and `_count`).

FORMS[(incident, variant)] = (evidence queries, the query that rules out the alternative the
canonical golden diagnosis rules out).
"""
from __future__ import annotations

_RATE = "rate({}[1m])"


def _mean(family: str, by: str = "", outer: str = "") -> str:
    group = f" by ({by})" if by else ""
    inner = f"sum{group} ({_RATE.format(family + '_sum')}) / sum{group} ({_RATE.format(family + '_count')})"
    return f"{outer}({inner})" if outer else inner


def _share(metric: str, part: str, result: str, by: str = "", outer: str = "") -> str:
    group = f" by ({by})" if by else ""
    sep = "," if part else ""
    inner = (f'sum{group} (rate({metric}{{{part}{sep}result="{result}"}}[1m])) / '
             f"sum{group} (rate({metric}{{{part}}}[1m]))")
    return f"{outer}({inner})" if outer else inner


REPEATS, CHECKS = "sandbox_canary_consistency_checks_total", "sandbox_canary_checks_total"
HITS, QUERIES = "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"
THROTTLED = "sandbox:replica_cpu_throttled_seconds_total"
USED, CAPACITY = "sandbox:device_memory_used_bytes", "sandbox:device_memory_capacity_bytes"
ACCEPTED, DRAFTED = "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total"
PROPOSALS = "vllm:spec_decode_num_drafts_total"
_DRAFTED_PER_STEP = f"sum by (replica) (rate({DRAFTED}[1m])) / sum by (replica) (rate({PROPOSALS}[1m]))"

# the share of requests that ended within 5 output tokens, per replica
_SHORT_OUTPUTS = ('sum by (replica) (rate(vllm:request_generation_tokens_bucket{le="5.0"}[1m])) / '
                  "sum by (replica) (rate(vllm:request_generation_tokens_count[1m]))")

# accuracy on long answers minus accuracy on short ones: the error growing with generation length
_GAP = "(" + _share(CHECKS, 'length="long"', "correct") + ") - (" + _share(CHECKS, 'length="short"', "correct") + ")"

FORMS: dict[tuple[str, str], tuple[list[str], str]] = {
    ("ttft-after-deploy", "prefix-off"): (
        [f"sum by (replica) (rate({HITS}[1m])) / sum by (replica) (rate({QUERIES}[1m]))",  # 0/0 once caching is off
         _mean("vllm:request_prefill_time_seconds")],
        f"1 - sum(rate({HITS}[1m])) / sum(rate({QUERIES}[1m]))"),
    # the mean tokens per step rises here (decode steps batch more) while the tail falls: a quantile form, fleet
    ("ttft-after-deploy", "prefill-budget"): (
        ["histogram_quantile(0.99, sum by (le) (rate(vllm:iteration_tokens_total_bucket[1m])))",
         _mean("vllm:request_prefill_time_seconds", "replica")],
        "min(histogram_quantile(0.95, sum by (le, replica) (rate(vllm:iteration_tokens_total_bucket[1m]))))"),
    ("ttft-after-deploy", "attention-config"): (
        [_mean("vllm:request_prefill_time_seconds")],
        _mean("vllm:iteration_tokens_total", "replica", "min")),
    ("ttft-after-deploy", "prompts-grew"): (
        ["max(histogram_quantile(0.9, sum by (le, replica) (rate(vllm:request_prompt_tokens_bucket[1m]))))"],
        "max(histogram_quantile(0.9, sum by (le, replica) (rate(vllm:request_prompt_tokens_bucket[1m]))))"),
    ("traffic-surge", "surge"): (
        ["sum(rate(vllm:time_to_first_token_seconds_count[1m]))",  # requests finished per second, at the server
         _mean("vllm:request_queue_time_seconds", "replica")],
        "histogram_quantile(0.9, sum by (le) (rate(vllm:request_prompt_tokens_bucket[1m])))"),
    ("quiet-shift", "nothing"): (
        [_mean("vllm:time_to_first_token_seconds"), _mean("vllm:inter_token_latency_seconds", "replica")],
        "sum(rate(sandbox_traffic_requests_total[1m]))"),
    ("flaky-outputs", "batch-variance"): (
        [_share(REPEATS, 'mode="greedy"', "match"), _share(REPEATS, 'mode="greedy"', "mismatch", "replica")],
        _share(REPEATS, 'mode="greedy",load="burst"', "mismatch", "replica", "min")),
    ("flaky-outputs", "seed-scope"): (
        [_share(REPEATS, 'mode="seeded"', "match"), _share(REPEATS, 'mode="greedy"', "mismatch", "replica")],
        _share(REPEATS, 'mode="greedy"', "match")),
    ("flaky-outputs", "one-replica"): (
        [_share(REPEATS, 'mode="greedy"', "mismatch", "replica")],
        _share(REPEATS, 'mode="greedy"', "match", "replica", "max")),
    ("quality-regression", "weights"): (
        [_share(CHECKS, "", "wrong", "task", "max"), _share(CHECKS, 'length="short"', "correct")],
        _GAP),
    ("quality-regression", "kv"): (
        [_share(CHECKS, 'length="long"', "correct"), _share(CHECKS, "", "wrong", "task", "max")],
        _GAP),
    ("quality-regression", "eos"): (
        [_SHORT_OUTPUTS, _share(CHECKS, "", "wrong", "task", "max")],
        # the share that ran past 5 tokens, fleet-wide (the quantized variants' signatures speak of the fleet)
        '1 - sum(rate(vllm:request_generation_tokens_bucket{le="5.0"}[1m])) / sum(rate(vllm:request_generation_tokens_count[1m]))'),
    ("tpot-regression", "attention-config"): (
        [_mean("vllm:request_time_per_output_token_seconds", "replica"),
         f"1 - sum(rate({ACCEPTED}[1m])) / sum(rate({DRAFTED}[1m]))"],
        f"sum by (replica) (rate({THROTTLED}[1m]))"),
    ("tpot-regression", "cpu-limit"): (
        [f"sum by (replica) (rate({THROTTLED}[1m]))", _mean("vllm:request_time_per_output_token_seconds", "replica")],
        f"sum(rate({THROTTLED}[1m]))"),
    ("slow-replica", "throttled"): (
        [f"sum by (replica) (rate({THROTTLED}[1m]))", _mean("vllm:inter_token_latency_seconds", "replica")],
        f"sum(rate({THROTTLED}[1m]))"),
    ("slow-replica", "noisy-neighbour"): (
        [f"sum by (replica) (rate({THROTTLED}[1m]))", _mean("vllm:inter_token_latency_seconds", "replica")],
        f"sum(rate({THROTTLED}[1m]))"),
    ("slow-replica", "kernel-path"): (
        [_mean("vllm:inter_token_latency_seconds", "replica")],
        f"sum by (replica) (rate({THROTTLED}[1m]))"),
    ("slow-replica", "small-cache"): (
        ["sum by (replica) (rate(vllm:num_preemptions_total[1m]))", "max by (replica) (vllm:kv_cache_usage_perc)"],
        "sum(rate(vllm:num_preemptions_total[1m]))"),
    ("slow-replica", "batch-cap"): (
        ["max by (replica) (vllm:num_requests_waiting)", _mean("vllm:request_queue_time_seconds", "replica")],
        "sum by (replica) (vllm:num_requests_waiting)"),
    ("oom-at-peak", "abort-path"): (
        ["min_over_time(avg(vllm:kv_cache_usage_perc)[1m:2s])"],
        f"max({USED} / {CAPACITY})"),
    ("oom-at-peak", "headroom"): (
        [f"min by (replica) ({CAPACITY} - {USED})"],
        f"max({USED} - {CAPACITY})"),
    ("oom-at-peak", "batch-size"): (
        ["max_over_time(sum(vllm:num_requests_running)[1m:2s])"],
        f"max({USED} - {CAPACITY})"),
    ("tpot-regression", "draft"): (
        [f"sum by (replica) (rate({ACCEPTED}[1m])) / sum by (replica) (rate({DRAFTED}[1m]))"],
        f"max({_DRAFTED_PER_STEP})"),
    ("tpot-regression", "depth"): (
        [_DRAFTED_PER_STEP, f"1 - sum(rate({ACCEPTED}[1m])) / sum(rate({DRAFTED}[1m]))"],
        f"max({_DRAFTED_PER_STEP})"),
}
