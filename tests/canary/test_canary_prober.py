"""The prober's accounting, against a fake OpenAI API (httpx.MockTransport): what it counts, and under which labels."""
import asyncio
import json

import httpx
import pytest

from sandbox.canary.metrics import CanaryMetrics
from sandbox.canary.prober import SCHEDULE, CanaryProber, ProberConfig
from sandbox.canary.probes import consistency_probes
from services.model.tasks import TASKS, eval_set

ANSWERS = {e.prompt: e.answer for t in TASKS for e in eval_set(t)}


class FakeAPI:
    """Answers every prompt with its eval answer, from replicas r0, r1, ... in turn.

    wrong_task: answers of that task get an extra character. batch_differs: a request that
    overlaps an identical one gets another answer. odd_replica: that replica answers differently
    once the warm-up is over. status: every response has this status instead.
    """

    def __init__(self, replicas=2, wrong_task=None, batch_differs=False, odd_replica=None, status=200):
        self.replicas, self.wrong_task, self.batch_differs = replicas, wrong_task, batch_differs
        self.odd_replica, self.status = odd_replica, status
        self.warm_up_calls = len(consistency_probes())
        self.calls, self.bodies, self.in_flight = 0, [], {}

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        replica = f"r{self.calls % self.replicas}"
        self.calls += 1
        if self.status != 200:
            return httpx.Response(self.status, json={"error": {"message": "no"}})
        key = json.dumps(body, sort_keys=True)
        self.in_flight[key] = self.in_flight.get(key, 0) + 1
        await asyncio.sleep(0.01)  # identical requests sent together overlap here
        crowded = self.in_flight[key] > 1
        await asyncio.sleep(0.01)  # ... until every one of them has looked
        self.in_flight[key] -= 1
        text = ANSWERS[body["prompt"]]
        if body["prompt"].startswith(f"{self.wrong_task}:"):
            text += "x"
        odd = replica == self.odd_replica and self.calls > self.warm_up_calls
        if (self.batch_differs and crowded) or odd:
            text = text[::-1] + "?"
        return httpx.Response(200, json={"choices": [{"text": text}]}, headers={"x-served-by": replica})


def probe(api: FakeAPI, slots: int = 12) -> CanaryProber:
    prober = CanaryProber("http://api", "m", CanaryMetrics(), ProberConfig(interval_s=0.01),
                          transport=httpx.MockTransport(api))
    asyncio.run(prober.run(max_slots=slots))
    return prober


def count(prober: CanaryProber, name: str, **labels) -> float:
    total = 0.0
    for family in prober.metrics.registry.collect():
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


CHECKS, CONSISTENCY = "sandbox_canary_checks_total", "sandbox_canary_consistency_checks_total"
REQUESTS = "sandbox_canary_requests_total"


def test_the_warm_up_sets_every_reference_one_request_at_a_time():
    prober = probe(FakeAPI(), slots=0)
    assert prober.warmed_up and len(prober.book) == len(consistency_probes())
    assert count(prober, CONSISTENCY) == 0 and count(prober, REQUESTS, probe="consistency") == len(prober.book)


def test_without_a_warm_up_the_steady_probes_start_at_once_and_first_alone_answers_become_references():
    prober = CanaryProber("http://api", "m", CanaryMetrics(), ProberConfig(interval_s=0.01, warm_up=False),
                          transport=httpx.MockTransport(FakeAPI()))
    asyncio.run(prober.run(max_slots=12))
    # no reference asked first: the four alone answers (keys 0-3) become the references, and the two bursts
    # (keys 0 and 1, after their alone answers) are compared with them
    assert prober.warmed_up and len(prober.book) == 4
    assert count(prober, REQUESTS, probe="consistency") == 4 + 8
    assert count(prober, CONSISTENCY, load="alone") == 0
    assert count(prober, CONSISTENCY, load="burst", result="match") == 8


def test_twelve_slots_are_six_accuracy_checks_four_alone_and_two_bursts_of_four():
    assert SCHEDULE.count("accuracy") == 3 and SCHEDULE.count("alone") == 2 and SCHEDULE.count("burst") == 1
    prober = probe(FakeAPI())
    assert count(prober, CHECKS) == 6
    assert count(prober, CHECKS, result="correct") == 6
    assert count(prober, CONSISTENCY, load="alone") == 4
    assert count(prober, CONSISTENCY, load="burst") == 8
    assert count(prober, CONSISTENCY, result="mismatch") == 0
    assert count(prober, REQUESTS) == len(prober.book) + 6 + 4 + 8


def test_a_healthy_api_gets_every_answer_right_and_consistent():
    prober = probe(FakeAPI(), slots=60)
    assert count(prober, CHECKS, result="wrong") == 0
    assert {t: count(prober, CHECKS, task=t) for t in TASKS} == {t: 6 for t in TASKS}
    assert count(prober, CONSISTENCY, result="mismatch") == 0
    assert count(prober, CONSISTENCY, mode="greedy") > 0 and count(prober, CONSISTENCY, mode="seeded") > 0


def test_a_task_answered_wrong_shows_under_that_task_only():
    prober = probe(FakeAPI(wrong_task="sort"), slots=60)
    assert count(prober, CHECKS, task="sort", result="wrong") == 6
    assert count(prober, CHECKS, task="sort", result="correct") == 0
    assert count(prober, CHECKS, result="wrong") == 6


def test_answers_that_change_in_a_batch_mismatch_in_bursts_only():
    prober = probe(FakeAPI(batch_differs=True), slots=24)
    assert count(prober, CONSISTENCY, load="alone", result="mismatch") == 0
    assert count(prober, CONSISTENCY, load="burst", result="mismatch") == count(prober, CONSISTENCY, load="burst") > 0


def test_mismatches_are_labelled_with_the_replica_that_answered():
    prober = probe(FakeAPI(replicas=3, odd_replica="r2"), slots=24)
    assert count(prober, CONSISTENCY, replica="r2", result="match") == 0
    assert count(prober, CONSISTENCY, replica="r2", result="mismatch") > 0
    assert count(prober, CONSISTENCY, replica="r0", result="mismatch") == 0
    assert count(prober, CONSISTENCY, replica="r1", result="mismatch") == 0


def test_failed_requests_are_counted_by_status_and_checked_for_nothing():
    prober = probe(FakeAPI(status=503), slots=12)
    assert count(prober, REQUESTS, status="503") == count(prober, REQUESTS, status="503", probe="accuracy") \
        + count(prober, REQUESTS, status="503", probe="consistency") == len(consistency_probes()) + 18
    assert count(prober, CHECKS) == 0 and count(prober, CONSISTENCY) == 0 and len(prober.book) == 0


def test_an_unreachable_api_counts_as_error():
    def refuse(request):
        raise httpx.ConnectError("refused")

    prober = CanaryProber("http://api", "m", CanaryMetrics(), ProberConfig(interval_s=0.01),
                          transport=httpx.MockTransport(refuse))
    asyncio.run(prober.run(max_slots=6))
    assert count(prober, REQUESTS, status="error") == len(consistency_probes()) + 3 + 2 + 4


def test_series_exist_at_zero_before_their_first_count():
    metrics = CanaryMetrics()
    reg = metrics.registry
    assert reg.get_sample_value(CHECKS, {"task": "add", "length": "short", "result": "wrong"}) == 0
    assert reg.get_sample_value(CHECKS, {"task": "story", "length": "long", "result": "correct"}) == 0
    assert reg.get_sample_value(CHECKS, {"task": "add", "length": "long", "result": "wrong"}) is None
    metrics.compared("greedy", "alone", "r9", "match")
    assert reg.get_sample_value(CONSISTENCY, {"mode": "seeded", "load": "burst", "replica": "r9",
                                              "result": "mismatch"}) == 0
    metrics.compared("greedy", "alone", None, "match")
    assert reg.get_sample_value(CONSISTENCY, {"mode": "greedy", "load": "alone", "replica": "unknown",
                                              "result": "match"}) == 1


def test_the_summary_adds_up_what_was_counted():
    prober = probe(FakeAPI(wrong_task="add"), slots=60)
    summary = prober.metrics.summary()
    assert summary["accuracy"]["add"] == {"correct": 0, "wrong": 6, "accuracy": 0.0}
    assert summary["accuracy"]["copy"]["accuracy"] == 1.0
    assert summary["consistency"]["greedy/alone"]["match_rate"] == 1.0


@pytest.mark.parametrize("kwargs, message", [({"interval_s": 0}, "interval_s"), ({"burst_size": 1}, "burst_size"),
                                             ({"timeout_s": 0}, "timeout_s"),
                                             ({"max_in_flight": 2}, "max_in_flight")])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ProberConfig(**kwargs)


def test_the_nominal_rate_is_three_requests_per_second_by_default():
    assert ProberConfig().requests_per_s == pytest.approx(3.0)
