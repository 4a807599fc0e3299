"""The root causes behind each alert that pages: a page must leave several causes open (issue 18).

A candidate who knows the catalogue (it is public) reads the answer off a page with one cause behind it.
Every paging alert has at least three among the variants a random drill can draw (a variant of weight 0 runs
by name only, so it opens no hypothesis a drawn page must leave). This test holds each alert at what it
has, so an edit that drops a cause fails here, and the exceptions can only shrink.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from incidents.promql import PromtoolNotFound
from incidents.schema import load_catalogue

ROOT = Path(__file__).resolve().parents[2]
AT_LEAST = 3
# Alerts still short of AT_LEAST, with the causes they have now (issue 18 is open for them).
SHORT: dict[str, int] = {}


@pytest.fixture(scope="module")
def causes_by_alert() -> dict[str, set[str]]:
    try:
        catalogue = load_catalogue(ROOT / "incidents")
    except PromtoolNotFound as e:
        pytest.skip(str(e))
    causes: dict[str, set[str]] = defaultdict(set)
    for incident in catalogue.values():
        if incident.page.alert is None:  # the control drill: its report is no page
            continue
        for variant in incident.variants.values():
            if variant.drawn:
                causes[incident.page.alert].add(variant.answer.root_cause)
    return dict(causes)


def test_each_paging_alert_has_the_causes_it_had_and_at_least_three_unless_listed_short(causes_by_alert):
    counts = {alert: len(causes) for alert, causes in causes_by_alert.items()}
    assert {a: n for a, n in counts.items() if n < SHORT.get(a, AT_LEAST)} == {}


def test_the_short_list_names_only_alerts_still_short(causes_by_alert):
    assert {a: len(causes_by_alert[a]) for a in SHORT} == SHORT


def test_the_time_between_tokens_page_has_a_speculation_a_kernel_and_a_cpu_cause(causes_by_alert):
    # the draft mismatch runs by name only: on a 2-core CPU it cannot move the median enough to page
    assert causes_by_alert["InterTokenLatencyHigh"] == {"speculation-too-deep", "slow-attention-kernel",
                                                        "cpu-limit-too-low"}


def test_the_accuracy_page_has_two_quantization_causes_and_a_stop_token(causes_by_alert):
    assert causes_by_alert["CanaryAccuracyLow"] == {"weight-quantization-too-coarse", "kv-cache-quantization",
                                                    "stop-token-misconfigured"}


def test_the_replica_ttft_page_has_a_cpu_a_kv_cache_and_a_sequence_cap_cause(causes_by_alert):
    # the kernel fallback runs by name only: on a 2-core CPU its page margin stayed under 1.5 in ten of twelve runs
    assert causes_by_alert["ReplicaTimeToFirstTokenHigh"] == {"cpu-throttled-replica", "kv-cache-too-small",
                                                              "max-num-seqs-too-low"}
