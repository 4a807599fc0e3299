"""Every metric the sandbox exports, declared once: names, help, buckets, labels.

Server-side metrics mirror vLLM's names and are recorded in the replicas with
`ray.util.metrics`. Ray forbids ':' in a name and its exporter prefixes
`ray_`, so `vllm:time_to_first_token_seconds` is recorded as
`vllm_time_to_first_token_seconds`, leaves Ray's endpoint as
`ray_vllm_time_to_first_token_seconds`, and the scrape job renames it back
(`services/stack/prometheus_config.py`): what Prometheus stores and dashboards query
is vLLM's `vllm:time_to_first_token_seconds`. Our own server-side additions
(device memory, replica CPU time and cgroup CPU bandwidth counters) live
under `sandbox:` the same way.

Client-side metrics (the traffic generator, the canary prober) are served by
our own processes with `prometheus-client`; Prometheus' lint reserves ':' for
recording rules, so they are plain `sandbox_traffic_*` and `sandbox_canary_*`
names.

Buckets start from vLLM's. Its request-phase buckets begin at 0.3 s, too coarse
for a CPU engine whose queue and prefill phases are tens of milliseconds, so
finer boundaries are prepended (and likewise below vLLM's smallest ITL bucket).
"""
from __future__ import annotations

from dataclasses import dataclass

SERVER_LABELS = ("model_name", "replica", "version")
# What Ray's exporter puts in front of every custom metric.
RAY_EXPORT_PREFIX = "ray_"

# vLLM's latency boundaries, with more between its wide steps (0.1-0.25-0.5 and 1.0-2.5-5.0 s to a
# first token; 0.01-0.025-0.05 and 1.0-2.5 s between tokens), so that no step between 5 ms and 80 s is
# wider than 1.5x. A quantile is read by interpolating inside a bucket, so a healthy figure near a wide
# step's low end reads anywhere up to its high end: a median TPOT of 8-14 ms on a fast CPU read 14.4 ms
# through the 10-25 ms bucket, past an SLO of 12 ms set 1.8x over the true healthy median, and a
# healthy replica's TTFT p99 read 1.9-2.3 s through the 1-2.5 s one. Every vLLM boundary is
# kept, so a query on one of them reads as it does against vLLM.
_TTFT = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.25,
         0.35, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.5, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 40.0, 60.0, 80.0,
         160.0, 640.0, 2560.0)
_ITL = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.035, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
        0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.5, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 40.0, 60.0, 80.0)
_REQUEST = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
_TOKENS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)  # vLLM's 1-2-5 up to max_model_len
_ITERATION = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)

# vLLM's cache_config_info labels, plus the scheduler settings a deploy may change.
CONFIG_INFO_LABELS = ("block_size", "cache_dtype", "enable_prefix_caching", "gpu_memory_utilization",
                      "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill",
                      "max_model_len", "num_speculative_tokens", "quantization", "dtype")


@dataclass(frozen=True)
class MetricSpec:
    namespace: str  # "vllm" | "sandbox" | "sandbox_traffic" | "sandbox_canary"
    name: str  # as queried, after the namespace: "time_to_first_token_seconds", "prompt_tokens_total"
    kind: str  # "histogram" | "counter" | "gauge"
    help: str
    buckets: tuple[float, ...] = ()
    extra_labels: tuple[str, ...] = ()

    @property
    def query_name(self) -> str:
        """The series name in Prometheus."""
        sep = ":" if self.namespace in ("vllm", "sandbox") else "_"
        return f"{self.namespace}{sep}{self.name}"

    @property
    def record_name(self) -> str:
        """The name handed to the recording library (Ray, or prometheus-client)."""
        name = self.name
        if self.kind == "counter":  # both libraries append _total to counters themselves
            name = name.removesuffix("_total")
        return f"{self.namespace}_{name}"


def _h(name, help, buckets, ns="vllm", labels=()):
    return MetricSpec(ns, name, "histogram", help, tuple(float(b) for b in buckets), labels)


def _c(name, help, ns="vllm", labels=()):
    return MetricSpec(ns, name, "counter", help, (), labels)


def _g(name, help, ns="vllm", labels=()):
    return MetricSpec(ns, name, "gauge", help, (), labels)


TIME_TO_FIRST_TOKEN = _h("time_to_first_token_seconds", "Time from arrival to the first output token.", _TTFT)
INTER_TOKEN_LATENCY = _h("inter_token_latency_seconds", "Time between consecutive output steps of a request.", _ITL)
TIME_PER_OUTPUT_TOKEN = _h("request_time_per_output_token_seconds",
                           "Decode time of a request divided by its output tokens after the first.", _ITL)
E2E_REQUEST_LATENCY = _h("e2e_request_latency_seconds", "Time from arrival to the last output token.", _REQUEST)
REQUEST_QUEUE_TIME = _h("request_queue_time_seconds", "Time a request waited before it was first scheduled.",
                        _REQUEST)
REQUEST_PREFILL_TIME = _h("request_prefill_time_seconds", "Time from first scheduled to the first token.", _REQUEST)
REQUEST_DECODE_TIME = _h("request_decode_time_seconds", "Time from the first to the last output token.", _REQUEST)
REQUEST_INFERENCE_TIME = _h("request_inference_time_seconds", "Time from first scheduled to the last token.",
                            _REQUEST)
REQUEST_PROMPT_TOKENS = _h("request_prompt_tokens", "Prompt tokens per finished request.", _TOKENS)
REQUEST_GENERATION_TOKENS = _h("request_generation_tokens", "Output tokens per finished request.", _TOKENS)
ITERATION_TOKENS = _h("iteration_tokens_total", "Tokens computed per engine step (prefill chunks + decodes).",
                      _ITERATION)

PROMPT_TOKENS = _c("prompt_tokens_total", "Prompt tokens received.")
GENERATION_TOKENS = _c("generation_tokens_total", "Output tokens generated.")
REQUEST_SUCCESS = _c("request_success_total", "Finished requests, by why they finished.",
                     labels=("finished_reason",))
NUM_PREEMPTIONS = _c("num_preemptions_total", "Requests preempted (freed and later recomputed).")
PREFIX_CACHE_QUERIES = _c("prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.")
PREFIX_CACHE_HITS = _c("prefix_cache_hits_total", "Prompt tokens found in the prefix cache.")
SPEC_DRAFTS = _c("spec_decode_num_drafts_total", "Speculative-decoding draft proposals verified.")
SPEC_DRAFT_TOKENS = _c("spec_decode_num_draft_tokens_total", "Draft tokens proposed.")
SPEC_ACCEPTED_TOKENS = _c("spec_decode_num_accepted_tokens_total", "Draft tokens accepted by the target model.")

NUM_REQUESTS_RUNNING = _g("num_requests_running", "Requests in the running batch.")
NUM_REQUESTS_WAITING = _g("num_requests_waiting", "Requests waiting to be scheduled (new or preempted).")
KV_CACHE_USAGE = _g("kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0 to 1, as vLLM).")
CACHE_CONFIG_INFO = _g("cache_config_info", "Engine configuration in labels; 1 for the current one, 0 for replaced.",
                       labels=CONFIG_INFO_LABELS)

DEVICE_MEMORY_USED = _g("device_memory_used_bytes", "Device memory in use: weights, KV pool, step activations.",
                        ns="sandbox")
DEVICE_MEMORY_CAPACITY = _g("device_memory_capacity_bytes", "Device memory the engine may use.", ns="sandbox")
REPLICA_CPU = _c("replica_cpu_seconds_total", "CPU time used by the replica process, all threads.", ns="sandbox")
# cAdvisor's CFS bandwidth counters (container_cpu_cfs_*), for the replica's own CPU cgroup.
REPLICA_CPU_PERIODS = _c("replica_cpu_periods_total",
                         "CFS enforcement periods elapsed in the replica's CPU cgroup (only while it has a quota).",
                         ns="sandbox")
REPLICA_CPU_PERIODS_THROTTLED = _c("replica_cpu_periods_throttled_total",
                                   "CFS periods in which the replica's CPU cgroup used up its quota.", ns="sandbox")
REPLICA_CPU_THROTTLED = _c("replica_cpu_throttled_seconds_total",
                           "Time the replica's threads were held off the CPU because its cgroup used up its quota.",
                           ns="sandbox")

SERVER_METRICS: tuple[MetricSpec, ...] = (
    TIME_TO_FIRST_TOKEN, INTER_TOKEN_LATENCY, TIME_PER_OUTPUT_TOKEN, E2E_REQUEST_LATENCY, REQUEST_QUEUE_TIME,
    REQUEST_PREFILL_TIME, REQUEST_DECODE_TIME, REQUEST_INFERENCE_TIME, REQUEST_PROMPT_TOKENS,
    REQUEST_GENERATION_TOKENS, ITERATION_TOKENS, PROMPT_TOKENS, GENERATION_TOKENS, REQUEST_SUCCESS,
    NUM_PREEMPTIONS, PREFIX_CACHE_QUERIES, PREFIX_CACHE_HITS, SPEC_DRAFTS, SPEC_DRAFT_TOKENS,
    SPEC_ACCEPTED_TOKENS, NUM_REQUESTS_RUNNING, NUM_REQUESTS_WAITING, KV_CACHE_USAGE, CACHE_CONFIG_INFO,
    DEVICE_MEMORY_USED, DEVICE_MEMORY_CAPACITY, REPLICA_CPU, REPLICA_CPU_PERIODS, REPLICA_CPU_PERIODS_THROTTLED,
    REPLICA_CPU_THROTTLED,
)

# -- client side: the traffic generator ------------------------------------
CLIENT_LABELS = ("profile",)
CLIENT_TTFT = _h("time_to_first_token_seconds", "Client-side time from sending a request to its first token.",
                 _TTFT, ns="sandbox_traffic", labels=CLIENT_LABELS)
CLIENT_E2E = _h("e2e_request_latency_seconds", "Client-side time from sending a request to its last byte.",
                _REQUEST, ns="sandbox_traffic", labels=CLIENT_LABELS)
CLIENT_REQUESTS = _c("requests_total", "Requests finished, by HTTP status ('error' when no response came).",
                     ns="sandbox_traffic", labels=CLIENT_LABELS + ("status",))
CLIENT_OUTPUT_TOKENS = _c("output_tokens_total", "Completion tokens received.", ns="sandbox_traffic",
                          labels=CLIENT_LABELS)
CLIENT_IN_FLIGHT = _g("requests_in_flight", "Requests sent and not yet answered.", ns="sandbox_traffic",
                      labels=CLIENT_LABELS)

CLIENT_METRICS: tuple[MetricSpec, ...] = (CLIENT_TTFT, CLIENT_E2E, CLIENT_REQUESTS, CLIENT_OUTPUT_TOKENS,
                                          CLIENT_IN_FLIGHT)

# -- client side: the canary prober (sandbox/canary) -------------------------
CANARY_CHECKS = _c("checks_total", "Held-out task prompts answered at temperature 0, by task, by the length of the "
                   "expected answer (short|long) and by whether the answer was right (correct|wrong).",
                   ns="sandbox_canary", labels=("task", "length", "result"))
CANARY_CONSISTENCY = _c("consistency_checks_total", "Repeats of a fixed prompt compared with its first answer, by "
                        "sampling mode (greedy|seeded), by whether sent alone or in a burst of identical requests "
                        "(alone|burst), by the replica that answered, and by result (match|mismatch).",
                        ns="sandbox_canary", labels=("mode", "load", "replica", "result"))
CANARY_REQUESTS = _c("requests_total", "Probe requests finished, by probe (accuracy|consistency) and HTTP status "
                     "('error' when no response came).", ns="sandbox_canary", labels=("probe", "status"))

CANARY_METRICS: tuple[MetricSpec, ...] = (CANARY_CHECKS, CANARY_CONSISTENCY, CANARY_REQUESTS)


def scrape_renames() -> list[tuple[str, str]]:
    """(regex, replacement) pairs that turn Ray's exported names back into ours."""
    return [(f"{RAY_EXPORT_PREFIX}{ns}_(.+)", f"{ns}:${{1}}") for ns in ("vllm", "sandbox")]
