"""What the exported metrics measure: one vocabulary of quantities, and the metric families behind each.

A diagnosis is graded on what its queries measure, not on how they are written: p99 time to first
token at the server and the traffic generator's p90 are both `time-to-first-token`; the mean
prefill time (`_sum / _count`) and its median (a `_bucket` quantile) are both `prefill-time`;
`vllm:request_success_total` and the client's `sandbox_traffic_requests_total` both count requests
per second. incidents/readings.py finds, in a query's syntax tree, which of these it reads, in
which form, and per what (fleet, per replica, per task).

A quantity is measured by any of:

    histograms    a family whose `_bucket` quantiles and `_sum / _count` mean are the quantity
                  (and `_bucket{le=..} / _count`, the share under a bound, moves against it)
    ratios        numerator / denominator counters or gauges, e.g. prefix-cache hits / queries
    singles       one counter's rate, or one gauge
    differences   lhs - rhs, e.g. device memory capacity - used

each with a polarity (+1: the query rises with the quantity, -1: it falls, as an error share
falls when accuracy rises). A `share` (a part over its whole) is judged on the smaller of itself
and its complement, so accuracy 1.0 -> 0.89 and error 0 -> 0.11 are the same change. A `Series`
names a metric and, where one metric counts several things, the label values its selector must
keep and drop (`result="wrong"` keeps `wrong` and drops `correct`). Labels in `parts` cut a
quantity into parts (accuracy on long answers, mismatches of seeded repeats); a ratio may say
what 0/0 means for it (`when_stopped`: no prompt token looked up is a hit rate of 0, the cache
is off).

This module is the one place that says it; `sandbox taxonomy --quantities` prints it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from services.serve import metric_names as m

_ID = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")


@dataclass(frozen=True)
class Series:
    metric: str
    keep: tuple[tuple[str, str], ...] = ()  # (label, value): the selector must keep series with it
    drop: tuple[tuple[str, str], ...] = ()  # (label, value): the selector must drop series with it

    def __post_init__(self):
        if not self.metric:
            raise ValueError("a series needs a metric name")


@dataclass(frozen=True)
class Ratio:
    numerator: Series
    denominator: Series
    polarity: int = 1
    form: str = "ratio"
    when_stopped: float | None = None  # what numerator and denominator both standing still (0/0) means
    stopped_means: str = ""
    share: bool = False  # a part over its whole, in [0, 1]: judged alike however it is written (see below)

    def __post_init__(self):
        _check_polarity(self.polarity)
        if self.when_stopped is not None and not self.stopped_means:
            raise ValueError("a ratio that reads 0/0 as a value must say what it means")


@dataclass(frozen=True)
class Single:
    series: Series
    kind: str  # rate (a counter) | gauge
    polarity: int = 1

    def __post_init__(self):
        _check_polarity(self.polarity)
        if self.kind not in ("rate", "gauge"):
            raise ValueError(f"kind must be rate or gauge, got {self.kind!r}")


@dataclass(frozen=True)
class Difference:
    lhs: Series
    rhs: Series
    polarity: int = 1  # lhs - rhs rises with the quantity (1) or falls (-1)

    def __post_init__(self):
        _check_polarity(self.polarity)


@dataclass(frozen=True)
class Quantity:
    id: str
    description: str
    histograms: tuple[str, ...] = ()
    ratios: tuple[Ratio, ...] = ()
    singles: tuple[Single, ...] = ()
    differences: tuple[Difference, ...] = ()
    parts: tuple[str, ...] = ()

    def __post_init__(self):
        if not _ID.fullmatch(self.id):
            raise ValueError(f"quantity id {self.id!r} must be kebab-case")
        if not (self.histograms or self.ratios or self.singles or self.differences):
            raise ValueError(f"quantity {self.id!r} is measured by nothing")
        if not self.description.strip() or "\n" in self.description:
            raise ValueError(f"quantity {self.id!r} needs a one-line description")

    def all_ratios(self) -> tuple[Ratio, ...]:
        """Its ratios, with each histogram's mean (`_sum / _count`) and share under a bound (`_bucket / _count`)."""
        from_histograms = []
        for family in self.histograms:
            count = Series(f"{family}_count")
            from_histograms.append(Ratio(Series(f"{family}_sum"), count, form="mean"))
            from_histograms.append(Ratio(Series(f"{family}_bucket"), count, polarity=-1, form="share under a bound",
                                         share=True))
        return tuple(from_histograms) + self.ratios


def _check_polarity(p: int) -> None:
    if p not in (1, -1):
        raise ValueError(f"polarity must be 1 or -1, got {p!r}")


def _rate(spec, *keep, polarity: int = 1, **kw) -> Single:
    return Single(Series(spec if isinstance(spec, str) else spec.query_name, tuple(keep), **kw), "rate", polarity)


def _gauge(spec, polarity: int = 1) -> Single:
    return Single(Series(spec.query_name), "gauge", polarity)


# Per-request histograms: each `_count` counts finished requests, so its rate is a request rate.
_PER_REQUEST = (m.TIME_TO_FIRST_TOKEN, m.E2E_REQUEST_LATENCY, m.REQUEST_QUEUE_TIME, m.REQUEST_PREFILL_TIME,
                m.REQUEST_DECODE_TIME, m.REQUEST_INFERENCE_TIME, m.REQUEST_PROMPT_TOKENS,
                m.REQUEST_GENERATION_TOKENS, m.TIME_PER_OUTPUT_TOKEN, m.CLIENT_TTFT, m.CLIENT_E2E)
_CLIENT_OK = ("status", "200")
_ALL_CHECKS = (("result", "correct"), ("result", "wrong"))
_ALL_REPEATS = (("result", "match"), ("result", "mismatch"))
_RIGHT, _WRONG = (("result", "correct"),), (("result", "wrong"),)
CHECKS, REPEATS = m.CANARY_CHECKS.query_name, m.CANARY_CONSISTENCY.query_name
_USED, _CAPACITY = m.DEVICE_MEMORY_USED.query_name, m.DEVICE_MEMORY_CAPACITY.query_name

QUANTITIES: tuple[Quantity, ...] = (
    Quantity("request-rate", "Requests per second. No exported counter counts arrivals apart: each counts requests as "
             "they finish (the traffic generator by status, the server by finish reason, every per-request "
             "histogram's _count), which is the arrival rate while the fleet keeps up.",
             singles=(_rate(m.CLIENT_REQUESTS, _CLIENT_OK), _rate(m.REQUEST_SUCCESS),
                      *(_rate(f"{h.query_name}_count") for h in _PER_REQUEST))),
    Quantity("errors", "Requests that failed (any status but 200), per second or as a share of all requests.",
             singles=(Single(Series(m.CLIENT_REQUESTS.query_name, drop=(_CLIENT_OK,)), "rate"),),
             ratios=(Ratio(Series(m.CLIENT_REQUESTS.query_name, drop=(_CLIENT_OK,)),
                           Series(m.CLIENT_REQUESTS.query_name, (_CLIENT_OK, ("status", "500"))), form="share",
                           share=True),)),
    Quantity("queue-time", "Time a request waits before it is first scheduled.",
             histograms=(m.REQUEST_QUEUE_TIME.query_name,)),
    Quantity("prefill-time", "Time from a request's first scheduling to its first token (its prompt's prefill).",
             histograms=(m.REQUEST_PREFILL_TIME.query_name,)),
    Quantity("decode-time", "Time from a request's first output token to its last.",
             histograms=(m.REQUEST_DECODE_TIME.query_name,)),
    Quantity("time-to-first-token", "Time from a request's arrival (or sending, at the client) to its first token.",
             histograms=(m.TIME_TO_FIRST_TOKEN.query_name, m.CLIENT_TTFT.query_name)),
    Quantity("time-between-tokens", "Time between a request's output tokens: inter-token latency, or time per "
             "output token.", histograms=(m.INTER_TOKEN_LATENCY.query_name, m.TIME_PER_OUTPUT_TOKEN.query_name)),
    Quantity("request-latency", "Time from a request's arrival to its last token, at the server or the client.",
             histograms=(m.E2E_REQUEST_LATENCY.query_name, m.CLIENT_E2E.query_name)),
    Quantity("prompt-length", "Prompt tokens per request.", histograms=(m.REQUEST_PROMPT_TOKENS.query_name,),
             ratios=(Ratio(Series(m.PROMPT_TOKENS.query_name), Series(m.REQUEST_SUCCESS.query_name), form="mean"),)),
    Quantity("output-length", "Output tokens per request.", histograms=(m.REQUEST_GENERATION_TOKENS.query_name,),
             ratios=(Ratio(Series(m.GENERATION_TOKENS.query_name), Series(m.REQUEST_SUCCESS.query_name), form="mean"),
                     Ratio(Series(m.CLIENT_OUTPUT_TOKENS.query_name),
                           Series(m.CLIENT_REQUESTS.query_name, (_CLIENT_OK,)), form="mean"))),
    Quantity("prompt-token-rate", "Prompt tokens received per second.",
             singles=(_rate(m.PROMPT_TOKENS), _rate(f"{m.REQUEST_PROMPT_TOKENS.query_name}_sum"))),
    Quantity("output-token-rate", "Output tokens generated per second.",
             singles=(_rate(m.GENERATION_TOKENS), _rate(m.CLIENT_OUTPUT_TOKENS),
                      _rate(f"{m.REQUEST_GENERATION_TOKENS.query_name}_sum"))),
    Quantity("iteration-tokens", "Tokens computed per engine step (prefill chunks and decodes together).",
             histograms=(m.ITERATION_TOKENS.query_name,)),
    Quantity("prefix-cache-hit-rate", "Share of looked-up prompt tokens found in the prefix cache.",
             ratios=(Ratio(Series(m.PREFIX_CACHE_HITS.query_name), Series(m.PREFIX_CACHE_QUERIES.query_name),
                           when_stopped=0.0, stopped_means="no prompt token was looked up, so none hit: the cache "
                           "is off", share=True),
                     Ratio(Series(m.PREFIX_CACHE_HITS.query_name), Series(m.PROMPT_TOKENS.query_name), share=True))),
    Quantity("kv-usage", "Share of KV-cache blocks in use.", singles=(_gauge(m.KV_CACHE_USAGE),)),
    Quantity("preemptions", "Requests preempted (freed, recomputed later) per second.",
             singles=(_rate(m.NUM_PREEMPTIONS),)),
    Quantity("spec-acceptance", "Share of drafted tokens the target model accepts (speculative decoding).",
             ratios=(Ratio(Series(m.SPEC_ACCEPTED_TOKENS.query_name), Series(m.SPEC_DRAFT_TOKENS.query_name),
                           share=True),)),
    Quantity("drafted-tokens-per-step", "Draft tokens proposed per speculative step.",
             ratios=(Ratio(Series(m.SPEC_DRAFT_TOKENS.query_name), Series(m.SPEC_DRAFTS.query_name)),)),
    Quantity("device-memory-headroom", "Device memory left free: capacity minus what weights, KV pool and step "
             "activations use.", singles=(_gauge(m.DEVICE_MEMORY_USED, polarity=-1),),
             ratios=(Ratio(Series(m.DEVICE_MEMORY_USED.query_name), Series(m.DEVICE_MEMORY_CAPACITY.query_name),
                           polarity=-1, form="share used", share=True),),
             differences=(Difference(Series(_CAPACITY), Series(_USED)),
                          Difference(Series(_USED), Series(_CAPACITY), polarity=-1))),
    Quantity("cpu-throttling", "Time a replica's threads are held off the CPU by its cgroup quota.",
             singles=(_rate(m.REPLICA_CPU_THROTTLED),),
             ratios=(Ratio(Series(m.REPLICA_CPU_PERIODS_THROTTLED.query_name),
                           Series(m.REPLICA_CPU_PERIODS.query_name), form="share of periods", share=True),)),
    Quantity("cpu-usage", "CPU seconds a replica's process uses per second.", singles=(_rate(m.REPLICA_CPU),)),
    Quantity("running-requests", "Requests in the running batch.", singles=(_gauge(m.NUM_REQUESTS_RUNNING),)),
    Quantity("waiting-requests", "Requests waiting to be scheduled.", singles=(_gauge(m.NUM_REQUESTS_WAITING),)),
    Quantity("requests-in-flight", "Requests the clients sent and have no answer to yet.",
             singles=(_gauge(m.CLIENT_IN_FLIGHT),)),
    Quantity("task-accuracy", "Share of canary task prompts answered right, by task and answer length.",
             ratios=(Ratio(Series(CHECKS, _RIGHT, _WRONG), Series(CHECKS, _ALL_CHECKS), form="share right", share=True),
                     Ratio(Series(CHECKS, _WRONG, _RIGHT), Series(CHECKS, _ALL_CHECKS), polarity=-1, form="share wrong",
                           share=True)),
             parts=("task", "length")),
    Quantity("output-mismatch", "Share of repeated canary prompts whose output differs from the first answer, by "
             "sampling mode (greedy, seeded) and load (alone, burst).",
             ratios=(Ratio(Series(REPEATS, (("result", "mismatch"),), (("result", "match"),)),
                           Series(REPEATS, _ALL_REPEATS), form="share mismatched", share=True),
                     Ratio(Series(REPEATS, (("result", "match"),), (("result", "mismatch"),)),
                           Series(REPEATS, _ALL_REPEATS), polarity=-1, form="share matched", share=True)),
             parts=("mode", "load")),
    Quantity("replicas-serving", "Replicas serving: series counted per replica, or Ray Serve's healthy replicas.",
             singles=(Single(Series("ray_serve_deployment_replica_healthy"), "gauge"),)),
    Quantity("replica-restarts", "Replicas Ray Serve started (again).",
             singles=(_rate("ray_serve_deployment_replica_starts_total"),)),
)

BY_ID = {q.id: q for q in QUANTITIES}
assert len(BY_ID) == len(QUANTITIES), "quantity ids are unique"


def quantity(id: str) -> Quantity:
    if id not in BY_ID:
        raise ValueError(f"unknown quantity {id!r}; the quantities are {', '.join(BY_ID)}")
    return BY_ID[id]


def _spec_labels() -> dict[str, tuple[str, ...]]:
    out = {}
    for spec in m.SERVER_METRICS:
        for suffix in ("", "_bucket", "_sum", "_count"):
            out[spec.query_name + suffix] = m.SERVER_LABELS + spec.extra_labels
    for spec in m.CLIENT_METRICS + m.CANARY_METRICS:
        for suffix in ("", "_bucket", "_sum", "_count"):
            out[spec.query_name + suffix] = spec.extra_labels
    return out


_LABELS = _spec_labels()
PER_LABELS = ("replica", "task")  # what a quantity can be read per: the grader's scopes
EACH = "each"  # a part label a query is still split by: every value of it, one series each


def labels_of(metric: str) -> tuple[str, ...]:
    """The labels the sandbox exports `metric` with (beyond Prometheus' own); () for a metric it does not declare."""
    return _LABELS.get(metric, ())


def per_labels(metric: str) -> tuple[str, ...]:
    """The labels among PER_LABELS that `metric`'s series carry (server series: replica; canary checks: task)."""
    return tuple(label for label in PER_LABELS if label in _LABELS.get(metric, ()))


def side(metric: str) -> str:
    """Where a metric is measured: client (the traffic generator, the canary) or server."""
    return "client" if metric.startswith(("sandbox_traffic_", "sandbox_canary_")) else "server"
