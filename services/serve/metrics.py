"""A replica's engine metrics, recorded with `ray.util.metrics` (names: `metric_names`).

The engine loop calls this from its own thread: `observe_request` when a
request finishes, `observe_token_intervals` after each step, `publish` a few
times a second with a snapshot of the engine's counters and gauges. Counters
are exported as the increase since the previous snapshot, so the Prometheus
counter equals the engine's own total.
"""
from __future__ import annotations

from services.engine.stats import EngineSnapshot
from services.serve import metric_names as names

_COUNTERS = (
    ("prompt_tokens", names.PROMPT_TOKENS), ("generation_tokens", names.GENERATION_TOKENS),
    ("num_preemptions", names.NUM_PREEMPTIONS), ("prefix_cache_queries", names.PREFIX_CACHE_QUERIES),
    ("prefix_cache_hits", names.PREFIX_CACHE_HITS), ("spec_drafts", names.SPEC_DRAFTS),
    ("spec_draft_tokens", names.SPEC_DRAFT_TOKENS), ("spec_accepted_tokens", names.SPEC_ACCEPTED_TOKENS),
    ("cpu_seconds", names.REPLICA_CPU), ("cpu_periods", names.REPLICA_CPU_PERIODS),
    ("cpu_periods_throttled", names.REPLICA_CPU_PERIODS_THROTTLED),
    ("cpu_throttled_seconds", names.REPLICA_CPU_THROTTLED),
)
_GAUGES = (
    ("num_running", names.NUM_REQUESTS_RUNNING), ("num_waiting", names.NUM_REQUESTS_WAITING),
    ("kv_cache_usage", names.KV_CACHE_USAGE), ("memory_used_bytes", names.DEVICE_MEMORY_USED),
    ("memory_capacity_bytes", names.DEVICE_MEMORY_CAPACITY),
)


def _make(spec: names.MetricSpec, default_tags: dict[str, str]):
    from ray.util import metrics

    keys = names.SERVER_LABELS + spec.extra_labels
    if spec.kind == "histogram":
        metric = metrics.Histogram(spec.record_name, spec.help, list(spec.buckets), tag_keys=keys)
    elif spec.kind == "counter":
        metric = metrics.Counter(spec.record_name, spec.help, tag_keys=keys)
    else:
        metric = metrics.Gauge(spec.record_name, spec.help, tag_keys=keys)
    return metric.set_default_tags(default_tags)


_SPEC_DECODE = (names.SPEC_DRAFTS, names.SPEC_DRAFT_TOKENS, names.SPEC_ACCEPTED_TOKENS)
FINISHED_REASONS = ("stop", "length", "abort")


class ServingMetrics:
    def __init__(self, model_name: str, replica: str, version: str, spec_decode: bool = False):
        tags = {"model_name": model_name, "replica": replica, "version": version}
        self._m = {spec.query_name: _make(spec, tags) for spec in names.SERVER_METRICS}
        self._last = EngineSnapshot()
        self._config_labels: dict[str, str] | None = None
        self._prime_counters(spec_decode)

    def _prime_counters(self, spec_decode: bool) -> None:
        """Export every counter at 0 from the start, as prometheus-client (and so vLLM) does.

        Ray only exports a counter once it was incremented and refuses inc(0), so a
        zero is recorded through Ray's own record path. Without it, `rate()` over a
        counter that has not moved yet (preemptions, aborts) returns nothing rather than 0.
        Spec-decode counters exist only with a draft model, as in vLLM.
        """
        for attr, spec in _COUNTERS:
            if spec in _SPEC_DECODE and not spec_decode:
                continue
            self._get(spec)._record(0)
        for reason in FINISHED_REASONS:
            self._get(names.REQUEST_SUCCESS)._record(0, tags={"finished_reason": reason})

    def _get(self, spec: names.MetricSpec):
        return self._m[spec.query_name]

    def observe_request(self, m, num_prompt_tokens: int, num_output_tokens: int, finished_reason: str) -> None:
        """`m` is the engine's RequestMetrics of a finished request (monotonic seconds)."""
        self._get(names.REQUEST_SUCCESS).inc(1, tags={"finished_reason": finished_reason})
        self._get(names.REQUEST_PROMPT_TOKENS).observe(num_prompt_tokens)
        self._get(names.REQUEST_GENERATION_TOKENS).observe(num_output_tokens)
        end = m.last_token_time or m.finished_time
        if end is not None:
            self._get(names.E2E_REQUEST_LATENCY).observe(end - m.arrival_time)
        if m.first_scheduled_time is not None:
            self._get(names.REQUEST_QUEUE_TIME).observe(m.first_scheduled_time - m.arrival_time)
            if m.first_token_time is not None:
                self._get(names.REQUEST_PREFILL_TIME).observe(m.first_token_time - m.first_scheduled_time)
            if m.last_token_time is not None:
                self._get(names.REQUEST_INFERENCE_TIME).observe(m.last_token_time - m.first_scheduled_time)
        if m.first_token_time is not None and m.last_token_time is not None:
            decode = m.last_token_time - m.first_token_time
            self._get(names.REQUEST_DECODE_TIME).observe(decode)
            if num_output_tokens > 1:
                self._get(names.TIME_PER_OUTPUT_TOKEN).observe(decode / (num_output_tokens - 1))

    def observe_first_token(self, seconds: float) -> None:
        self._get(names.TIME_TO_FIRST_TOKEN).observe(seconds)

    def observe_token_intervals(self, seconds: list[float]) -> None:
        itl = self._get(names.INTER_TOKEN_LATENCY)
        for s in seconds:
            itl.observe(s)

    def publish(self, snap: EngineSnapshot) -> None:
        for attr, spec in _COUNTERS:
            delta = getattr(snap, attr) - getattr(self._last, attr)
            if delta > 0:
                self._get(spec).inc(delta)
        for attr, spec in _GAUGES:
            self._get(spec).set(getattr(snap, attr))
        if self._config_labels is not None:  # re-set, so the series never ages out of Ray's agent
            self._get(names.CACHE_CONFIG_INFO).set(1, tags=self._config_labels)
        iteration = self._get(names.ITERATION_TOKENS)
        for n in snap.iteration_tokens:
            iteration.observe(n)
        snap.iteration_tokens = []
        self._last = snap

    def set_config_info(self, labels: dict[str, str]) -> None:
        """Mark `labels` as the current engine config (1) and the previous one replaced (0)."""
        info = self._get(names.CACHE_CONFIG_INFO)
        if self._config_labels is not None and self._config_labels != labels:
            info.set(0, tags=self._config_labels)
        info.set(1, tags=labels)
        self._config_labels = labels


def config_info_labels(engine) -> dict[str, str]:
    """CONFIG_INFO_LABELS of a live engine (runtime knobs included)."""
    c, sched = engine.config, engine.scheduler.config
    kv = engine.scheduler.kv_cache_manager
    values = {
        "block_size": c.block_size, "cache_dtype": c.kv_cache_dtype,
        "enable_prefix_caching": kv.enable_prefix_caching, "gpu_memory_utilization": c.gpu_memory_utilization,
        "num_gpu_blocks": engine.num_blocks, "max_num_seqs": sched.max_num_seqs,
        "max_num_batched_tokens": sched.max_num_batched_tokens,
        "enable_chunked_prefill": sched.enable_chunked_prefill, "max_model_len": c.max_model_len,
        "num_speculative_tokens": c.num_speculative_tokens, "quantization": c.quantization, "dtype": c.dtype,
    }
    return {k: str(values[k]).lower() if isinstance(values[k], bool) else str(values[k])
            for k in names.CONFIG_INFO_LABELS}
