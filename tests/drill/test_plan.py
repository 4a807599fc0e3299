"""A drill's schedule is fixed by (incident, variant, seed) before anything runs."""
from pathlib import Path

import pytest

from incidents.schema import load_incident
from sandbox.drill.plan import make_plan

INCIDENTS = Path(__file__).resolve().parents[2] / "incidents"


@pytest.fixture(scope="module")
def surge():
    return load_incident(INCIDENTS / "traffic-surge.yaml")


@pytest.fixture(scope="module")
def ttft():
    return load_incident(INCIDENTS / "ttft-after-deploy.yaml")


def test_the_same_seed_gives_the_same_plan_and_another_seed_moves_the_injection(ttft):
    a, b = make_plan(ttft, "prefix-off", 7), make_plan(ttft, "prefix-off", 7)
    assert a.to_dict() == b.to_dict()
    times = {make_plan(ttft, "prefix-off", s).inject_at_s for s in range(20)}
    tl = ttft.timeline
    assert len(times) > 5 and all(tl.inject_at_s <= t <= tl.inject_at_s + tl.jitter_s for t in times)


def test_the_injection_event_carries_the_variants_faults(ttft):
    plan = make_plan(ttft, "prefill-budget", 1)
    (inject,) = [e for e in plan.events if e.kind == "inject"]
    assert inject.faults == tuple(ttft.variants["prefill-budget"].faults)
    assert inject.at_s == plan.inject_at_s


def test_a_surge_multiplies_the_rate_from_the_injection_on(surge):
    plan = make_plan(surge, "surge", 3)
    before, after = plan.segment_at(plan.inject_at_s - 1), plan.segment_at(plan.inject_at_s + 1)
    factor = surge.variants["surge"].traffic.rate_factor
    assert before.rate == surge.traffic.rate and after.rate == pytest.approx(surge.traffic.rate * factor)
    assert before.profile == after.profile == surge.traffic.profile


def test_a_decoy_changes_the_prompt_mix_at_the_injection(ttft):
    plan = make_plan(ttft, "prompts-grew", 0)
    assert plan.segment_at(0).profile == "shared-prefix"
    assert plan.segment_at(plan.inject_at_s + 0.1).profile == "shared-prefix-long"


def test_a_duration_shorter_than_the_injection_is_refused(ttft):
    with pytest.raises(ValueError, match="must be longer than the injection time"):
        make_plan(ttft, "prefix-off", 0, duration_s=30)


def test_a_batch_job_peak_runs_beside_the_base_traffic_with_its_own_profile():
    oom = load_incident(INCIDENTS / "oom-at-peak.yaml")
    plan = make_plan(oom, "headroom", 0)
    peaks = [p for p in oom.traffic.peaks if p.concurrency]
    assert [(j.start_s, j.end_s, j.concurrency, j.profile) for j in plan.jobs] == [
        (p.at_s, p.at_s + p.duration_s, p.concurrency, p.profile) for p in peaks]
    assert {plan.segment_at(j.start_s + 1).rate for j in plan.jobs} == {oom.traffic.rate}  # the base goes on
