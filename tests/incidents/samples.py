"""A valid incident as YAML text, a stand-in fault validator, and helpers that edit the text and find lines."""
from __future__ import annotations

import textwrap

from incidents.source import IncidentError

VALID = textwrap.dedent("""\
    # Time to first token regressed after a deploy.
    id: ttft-after-deploy
    page:
      alert: TimeToFirstTokenHigh
    traffic:
      profile: shared-prefix
      rate: 3.0
      peaks:
        - {at_s: 150, duration_s: 60, rate: 6.0}
    timeline:
      baseline_s: 90
      inject_at_s: 100
      jitter_s: 15
      duration_s: 300
      events:
        - {at_s: 100, fault: {type: deploy, set: {default_max_tokens: 48}}}
    signals:
      ttft_p99: histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[30s])))
      hit_rate: sum(rate(vllm:prefix_cache_hits_total[30s])) / sum(rate(vllm:prefix_cache_queries_total[30s]))
      prefill_p50: histogram_quantile(0.5, sum by (le) (rate(vllm:request_prefill_time_seconds_bucket[30s])))
    primary: ttft_p99
    variants:
      prefix-off:
        weight: 2
        faults:
          - type: deploy
            set: {engine.enable_prefix_caching: false}
        signature:
          hit_rate: down
          prefill_p50: up
        answer:
          root_cause: prefix-caching-disabled
          remediation: [rollback-deploy, enable-prefix-caching]
          location: {replica: null, version: injected, component: prefix-cache}
          evidence: [hit_rate]
      prompts-grew:
        weight: 1
        traffic: {profile: long-prompts}
        signature: {hit_rate: down, prefill_p50: up}
        answer:
          root_cause: prompt-length-shift
          remediation: [no-action]
          location: {replica: null, version: null, component: traffic}
          evidence: [prefill_p50]
    """)

FAULT_TYPES = {"deploy": {"set"}, "cpu-throttle": {"replica", "cpu_fraction"}}


def fake_faults(spec: dict) -> None:
    """Stands in for faults.registry.build: ValueError naming the field first, as faults/ does."""
    kind = spec.get("type")
    if kind not in FAULT_TYPES:
        raise ValueError(f"type: unknown fault type {kind!r}")
    for key in spec:
        if key != "type" and key not in FAULT_TYPES[kind]:
            raise ValueError(f"{key}: not a field of {kind} faults")
    for key in spec.get("set", {}):
        if key.startswith("engine.bogus"):
            raise ValueError(f"set.{key}: unknown setting")


def edit(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"{old!r} must occur once in the fixture"
    return text.replace(old, new)


def line_of(text: str, snippet: str) -> int:
    """1-based line of the one line containing `snippet`."""
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if snippet in line]
    assert len(hits) == 1, f"{snippet!r} is on lines {hits}"
    return hits[0]


def problem(error: IncidentError, field: str):
    """The one problem about `field`."""
    found = [p for p in error.problems if p.field == field]
    assert len(found) == 1, f"no single problem about {field!r} in:\n{error}"
    return found[0]
