"""Evidence and alternatives judged by what they measure, on two recorded runs (prefix caching off; a traffic surge).

Each recording is served once for the module by a read-only Prometheus on a port the OS picks.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from incidents.schema import load_catalogue
from sandbox.grading.diagnosis import parse_diagnosis
from sandbox.grading.grader import Grader
from sandbox.grading.observation import look
from sandbox.grading.recorded import RecordedPrometheus, RecordedRun
from services.stack.prometheus import PrometheusError, find_binary

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
PREFIX_OFF, SURGE = "20261130-172507-ttft-after-deploy", "20261130-113103-traffic-surge"
HITS, QUERIES = "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"
HIT_RATIO_BY_REPLICA = f"sum by (replica) (rate({HITS}[1m])) / sum by (replica) (rate({QUERIES}[1m]))"
MEAN_PREFILL = ("sum(rate(vllm:request_prefill_time_seconds_sum[1m])) / "
                "sum(rate(vllm:request_prefill_time_seconds_count[1m]))")
MEAN_PROMPT = "sum(rate(vllm:request_prompt_tokens_sum[1m])) / sum(rate(vllm:request_prompt_tokens_count[1m]))"
P90_PROMPT = "histogram_quantile(0.9, sum by (le) (rate(vllm:request_prompt_tokens_bucket[1m])))"
TTFT_P99 = "histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[1m])))"

try:
    find_binary("prometheus")
except PrometheusError:
    pytest.skip("needs Debian's prometheus (scripts/setup.sh installs it)", allow_module_level=True)


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue(ROOT / "incidents")


def _served(name: str, catalogue):
    run = FIXTURES / name
    recorded = RecordedRun(run, FIXTURES / f"{name}.key")
    with RecordedPrometheus(run / "prometheus") as prom:
        yield Grader(catalogue[recorded.incident_id], recorded.sealed["variant"], recorded.sealed["answer"],
                     recorded.windows(), prom, catalogue)


@pytest.fixture(scope="module")
def prefix_off(catalogue):
    yield from _served(PREFIX_OFF, catalogue)


@pytest.fixture(scope="module")
def surge(catalogue):
    yield from _served(SURGE, catalogue)


def diagnosis(run: str, cause: str, evidence=(), hypotheses=(), component=None, version=None, remedy="rollback-deploy"):
    return parse_diagnosis(yaml.safe_dump({
        "run": run, "root_cause": cause, "location": {"replica": None, "version": version, "component": component},
        "evidence": [{"query": q, "observation": "it moved"} for q in evidence],
        "hypotheses": [{"root_cause": c, "ruled_out_by": q} for c, q in hypotheses],
        "remediation": [remedy], "summary": "s"}))


def points(report, name: str) -> int:
    return next(c.points for c in report.criteria if c.name == name)


def test_a_hypothesis_ruled_out_by_a_quantity_both_causes_move_alike_earns_nothing(prefix_off):
    # a slower attention kernel raises prefill time too: the mean prefill time cannot separate it
    d = diagnosis(PREFIX_OFF, "prefix-caching-disabled", hypotheses=[("slow-attention-kernel", MEAN_PREFILL)])
    criterion = next(c for c in prefix_off.grade(d).criteria if c.name == "hypotheses")
    assert criterion.points == 0
    assert criterion.details[0]["why"] == ("prefill-time: slow-attention-kernel would leave it up too, "
                                           "so it cannot rule it out")


def test_a_hypothesis_ruled_out_by_a_quantity_where_the_causes_disagree_earns_its_points(prefix_off):
    d = diagnosis(PREFIX_OFF, "prefix-caching-disabled", hypotheses=[("slow-attention-kernel", HIT_RATIO_BY_REPLICA)])
    criterion = next(c for c in prefix_off.grade(d).criteria if c.name == "hypotheses")
    assert criterion.points == 20  # the strongest sibling here
    assert criterion.details[0]["separated_by"] == "prefix-cache-hit-rate"
    assert criterion.sentence.startswith("slow-attention-kernel is ruled out by prefix-cache-hit-rate: "
                                         "slow-attention-kernel would leave prefix-cache-hit-rate flat")


def test_another_sibling_ruled_out_by_where_they_disagree_earns_half(prefix_off):
    d = diagnosis(PREFIX_OFF, "prefix-caching-disabled", hypotheses=[("prompt-length-shift", MEAN_PROMPT)])
    assert points(prefix_off.grade(d), "hypotheses") == 10


def test_a_hit_ratio_whose_counters_both_stopped_reads_as_a_hit_rate_of_zero(prefix_off):
    # caching off: hits and lookups both stand still, each replica's ratio is 0/0, which Prometheus calls NaN
    assert look(prefix_off.prom, HIT_RATIO_BY_REPLICA, prefix_off.w).direction == "no data"
    d = diagnosis(PREFIX_OFF, "prefix-caching-disabled", evidence=[HIT_RATIO_BY_REPLICA])
    detail = next(c for c in prefix_off.grade(d).criteria if c.name == "evidence").details[0]
    assert (detail["counts"], detail["direction"], detail["incident"]) == (True, "down", 0.0)
    assert detail["note"].startswith("prefix-cache-hit-rate read as 0 where its counters both stood still (0/0)")


def test_server_side_and_client_side_request_rates_are_the_same_evidence(surge):
    for query in ("sum(rate(sandbox_traffic_requests_total[1m]))",
                  "sum(rate(vllm:time_to_first_token_seconds_count[1m]))"):  # first tokens per second, at the server
        detail = next(c for c in surge.grade(diagnosis(SURGE, "capacity-exceeded", evidence=[query])).criteria
                      if c.name == "evidence").details[0]
        assert (detail["quantity"], detail["counts"]) == ("request-rate", True)


def test_in_an_incident_of_one_cause_any_alternative_ruled_out_where_they_disagree_earns_all(surge):
    # the p90: the canary's short probes are a smaller share of a surge, so the mean prompt length rises here
    ruled = diagnosis(SURGE, "capacity-exceeded", hypotheses=[("prompt-length-shift", P90_PROMPT)])
    agreeing = diagnosis(SURGE, "capacity-exceeded", hypotheses=[("prompt-length-shift", TTFT_P99)])
    assert (points(surge.grade(ruled), "hypotheses"), points(surge.grade(agreeing), "hypotheses")) == (20, 0)


def test_a_component_outside_the_stack_may_be_left_null(surge):
    criterion = next(c for c in surge.grade(diagnosis(SURGE, "capacity-exceeded")).criteria if c.name == "location")
    assert (criterion.points, criterion.sentence) == (
        10, "nothing to locate; the component does not matter here (capacity is not a part of the stack)")


def test_where_the_component_matters_the_grade_says_which_was_expected(prefix_off):
    d = diagnosis(PREFIX_OFF, "prefix-caching-disabled", component="scheduler", version="v2")
    criterion = next(c for c in prefix_off.grade(d).criteria if c.name == "location")
    assert (criterion.points, criterion.sentence) == (5, "located by version; component: expected 'prefix-cache', "
                                                         "named 'scheduler'")


def test_a_wrong_cause_with_the_right_evidence_stays_at_or_under_35(prefix_off):
    d = diagnosis(PREFIX_OFF, "prefill-budget-too-small", evidence=[HIT_RATIO_BY_REPLICA], version="v2",
                  component="prefix-cache", hypotheses=[("slow-attention-kernel", HIT_RATIO_BY_REPLICA)])
    report = prefix_off.grade(d)
    assert (points(report, "evidence"), points(report, "hypotheses"), report.score) == (15, 0, 35)


def test_a_query_reading_two_quantities_at_once_counts_for_neither(prefix_off):
    d = diagnosis(PREFIX_OFF, "prefix-caching-disabled", evidence=[f"({MEAN_PREFILL}) / ({MEAN_PROMPT})"])
    detail = next(c for c in prefix_off.grade(d).criteria if c.name == "evidence").details[0]
    assert detail["counts"] is False and detail["why"].startswith("reads several quantities at once (prefill-time, "
                                                                  "prompt-length)")


def test_the_same_diagnosis_grades_to_the_same_report(prefix_off):
    d = diagnosis(PREFIX_OFF, "prefix-caching-disabled", evidence=[HIT_RATIO_BY_REPLICA, MEAN_PREFILL],
                  hypotheses=[("slow-attention-kernel", HIT_RATIO_BY_REPLICA)], component="prefix-cache", version="v2")
    first = json.dumps(prefix_off.grade(d).to_dict(), sort_keys=True)
    prefix_off.cite._looks.clear()  # measured again, not remembered
    assert json.dumps(prefix_off.grade(d).to_dict(), sort_keys=True) == first


@pytest.fixture(scope="module")
def one_replica(catalogue):
    yield from _served("20261130-113945-flaky-outputs", catalogue)


def _discipline(grader, run: str, cause: str, asked: list[str]) -> dict[str, tuple[int, str]]:
    report = grader.grade(diagnosis(run, cause), asks=[{"time": i, "evidence": a} for i, a in enumerate(asked)])
    return {c.name: (c.points, c.sentence) for c in report.criteria[-3:]}


def test_an_interview_of_a_symptom_other_than_latency_credits_looking_at_the_paged_signal(one_replica):
    run = "20261130-113945-flaky-outputs"
    first, separating, _ = _discipline(one_replica, run, "replica-numerics-mismatch", ["canary"]).values()
    assert first == (8, "looked at the paged signal itself before concluding")
    # greedy mismatch by replica: its best replica stays clean when one replica differs, not when all do
    assert separating == (8, "asked for what separates the top two causes (canary)")
    first, separating, _ = _discipline(one_replica, run, "replica-numerics-mismatch", ["load"]).values()
    assert first == (0, "did not look at the paged signal itself before concluding")
    assert separating == (0, "never asked for what separates the top two causes (this cause and "
                             "batch-variant-numerics)")


def test_an_interview_of_latency_credits_splitting_it_first(surge):
    first, separating, asks = _discipline(surge, SURGE, "capacity-exceeded", ["ttft-split", "load"]).values()
    assert first == (8, "split latency into its phases (queue, prefill, decode; by replica or version) "
                        "before concluding")
    assert separating == (8, "a single-cause incident: nothing to separate") and asks[0] == 4
