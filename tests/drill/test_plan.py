"""A drill's schedule is fixed by (incident, variant, seed) before anything runs."""
import http.server
import threading
import time
from pathlib import Path

import pytest

from incidents.schema import load_incident
from incidents.source import IncidentError
from sandbox.drill.plan import DrillPlan, Job, Segment, make_plan
from sandbox.drill.traffic_runner import TrafficRunner
from tests.incidents.samples import VALID, edit, fake_faults

INCIDENTS = Path(__file__).resolve().parents[2] / "incidents"
KNEES = {"shared-prefix": 4.0, "documents": 3.0}  # requests/s, as `sandbox calibrate` would measure them
CEILINGS = {"shared-prefix": 8.0, "documents": 5.0}


@pytest.fixture(scope="module")
def surge():
    return load_incident(INCIDENTS / "traffic-surge.yaml")


@pytest.fixture(scope="module")
def absolute_surge(tmp_path_factory):
    """traffic-surge with its base rate written in requests/s (2.0), as tests may."""
    text = (INCIDENTS / "traffic-surge.yaml").read_text()
    rate = next(line for line in text.splitlines() if line.startswith("  rate: "))
    path = tmp_path_factory.mktemp("absolute") / "traffic-surge.yaml"
    path.write_text(text.replace(rate, "  rate: 2.0"))
    return load_incident(path)


@pytest.fixture(scope="module")
def ttft():
    return load_incident(INCIDENTS / "ttft-after-deploy.yaml")


@pytest.fixture(scope="module")
def knee(tmp_path_factory):
    """The sample incident in knee units: its base at half the knee, a peak at twice the documents knee, and
    a decoy (prompts-grew) that changes the mix and multiplies the load by 1.5."""
    text = edit(VALID, "rate: 3.0", "rate: 0.5 knee")
    text = edit(text, "{at_s: 150, duration_s: 60, rate: 6.0}", "{at_s: 150, duration_s: 60, rate: 2knee, profile: documents}")
    text = edit(text, "traffic: {profile: long-prompts}", "traffic: {profile: long-prompts, rate_factor: 1.5}")
    path = tmp_path_factory.mktemp("incidents") / "ttft-after-deploy.yaml"
    path.write_text(text)
    return load_incident(path, fault_validator=fake_faults)


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


def test_a_surge_is_a_job_of_clients_from_the_landing_beside_the_unchanged_base_rate(surge):
    plan = make_plan(surge, "surge", 3, knees={"default": 4.0}, ceilings={"default": 5.0})
    before, after = plan.segment_at(plan.inject_at_s - 1), plan.segment_at(plan.inject_at_s + 1)
    assert str(surge.traffic.rate) == "0.25 ceiling"
    assert before.rate == after.rate == pytest.approx(1.25)  # 0.25 of the ceiling, before and after
    (job,) = plan.jobs
    assert (job.start_s, job.end_s, job.concurrency, job.profile, job.after_landing) == (
        plan.inject_at_s, plan.duration_s, 128, surge.traffic.profile, True)


def test_a_variants_job_waits_for_the_landing_and_lasts_as_long_as_the_traffic(surge):
    plan = make_plan(surge, "surge", 3, knees={"default": 4.0}, ceilings={"default": 5.0})
    runner = TrafficRunner("http://127.0.0.1:9", "model", plan, seed=0, wait_for_landing=True)
    assert runner._changed is False  # the job's loop waits on it, past its start
    runner.extend(plan.duration_s + 40.0)
    assert runner.until_s == plan.duration_s + 40.0  # where the job's clients stop, as the base traffic does


@pytest.mark.parametrize("value, message", [
    ("0", "must be > 0, got 0"), ("2.5", "must be a whole number of clients, got 2.5"),
    ("many", "expected a number, got string 'many'"),
])
def test_a_variants_concurrency_that_is_not_a_whole_number_of_clients_is_refused(tmp_path, value, message):
    text = (INCIDENTS / "traffic-surge.yaml").read_text().replace("traffic: {concurrency: 128}",
                                                                     f"traffic: {{concurrency: {value}}}")
    path = tmp_path / "traffic-surge.yaml"
    path.write_text(text)
    with pytest.raises(IncidentError) as error:
        load_incident(path)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "concurrency: " + value in t)
    assert str(error.value) == f"{path}:{line}: variants.surge.traffic.concurrency: {message}"


def test_a_decoy_changes_the_prompt_mix_at_the_injection(ttft):
    plan = make_plan(ttft, "prompts-grew", 0)
    assert plan.segment_at(0).profile == "shared-prefix"
    assert plan.segment_at(plan.inject_at_s + 0.1).profile == "shared-prefix-long"


def test_a_duration_shorter_than_the_injection_is_refused(ttft):
    with pytest.raises(ValueError, match="must be longer than the injection time"):
        make_plan(ttft, "prefix-off", 0, duration_s=30)


def test_a_batch_job_peak_runs_beside_the_base_traffic_with_its_own_profile():
    oom = load_incident(INCIDENTS / "oom-at-peak.yaml")
    plan = make_plan(oom, "headroom", 0, knees=KNEES, ceilings=CEILINGS)
    peaks = [p for p in oom.traffic.peaks if p.concurrency]
    assert [(j.start_s, j.end_s, j.concurrency, j.profile) for j in plan.jobs] == [
        (p.at_s, p.at_s + p.duration_s, p.concurrency, p.profile) for p in peaks]
    base = oom.traffic.rate.per_second(KNEES, "shared-prefix", CEILINGS)
    assert {plan.segment_at(j.start_s + 1).rate for j in plan.jobs} == {base}  # the base goes on


def test_an_absolute_plan_is_the_same_with_or_without_knees(absolute_surge):
    plan = make_plan(absolute_surge, "surge", 3)
    assert plan.segments == [Segment(0.0, 2.0, "default")]  # the surge is a job of clients, not a rate
    assert plan.unresolved_profiles() == set()
    assert make_plan(absolute_surge, "surge", 3, knees={}).to_dict() == plan.to_dict() == plan.resolved({}).to_dict()
    assert plan.to_dict()["segments"][0] == {"start_s": 0.0, "rate": 2.0, "profile": "default",
                                             "knee": None, "knee_profile": None, "unit": None}


def test_a_knee_plan_keeps_its_fractions_and_is_unresolved_until_resolved(knee):
    plan = make_plan(knee, "prompts-grew", 0)
    inject = plan.inject_at_s
    # after injection the decoy's mix (long-prompts) runs at the base profile's knee: it changes the mix, not the load
    assert plan.segments == [Segment(0.0, None, "shared-prefix", 0.5, "shared-prefix"),
                             Segment(inject, None, "long-prompts", 0.75, "shared-prefix"),
                             Segment(150.0, None, "documents", 3.0, "documents"),
                             Segment(210.0, None, "long-prompts", 0.75, "shared-prefix")]
    assert plan.unresolved_profiles() == {"shared-prefix", "documents"}
    assert [(s["rate"], s["knee"]) for s in plan.to_dict()["segments"]] == [(None, 0.5), (None, 0.75), (None, 3.0),
                                                                           (None, 0.75)]


def test_resolved_rates_are_the_fraction_times_the_rate_factor_times_the_knee(knee):
    plan = make_plan(knee, "prompts-grew", 0)
    resolved = plan.resolved(KNEES)
    assert [(s.start_s, s.rate, s.knee) for s in resolved.segments] == [
        (0.0, 2.0, 0.5), (plan.inject_at_s, 3.0, 0.75), (150.0, 9.0, 3.0), (210.0, 3.0, 0.75)]
    assert resolved.unresolved_profiles() == set() and plan.unresolved_profiles() == {"shared-prefix", "documents"}
    assert make_plan(knee, "prompts-grew", 0, knees=KNEES).to_dict() == resolved.to_dict()
    assert [s.rate for s in make_plan(knee, "prefix-off", 0, knees=KNEES).segments] == [2.0, 6.0, 2.0]


def test_the_base_share_is_the_baselines_rate_over_its_profiles_ceiling(knee):
    resolved = make_plan(knee, "prompts-grew", 0).resolved(KNEES)  # 2.0 req/s of shared-prefix at first
    assert resolved.base_share({"shared-prefix": 8.0, "documents": 1.0}) == 0.25
    assert resolved.base_share({"documents": 1.0}) is None  # no ceiling for its profile: no share
    assert make_plan(knee, "prompts-grew", 0).base_share({"shared-prefix": 8.0}) is None  # not resolved yet


def test_a_missing_knee_is_a_value_error_naming_the_profile(knee):
    plan = make_plan(knee, "prompts-grew", 0)
    with pytest.raises(ValueError, match="not calibrated: the knee of 'documents', which the plan's"):
        plan.resolved({"shared-prefix": 4.0})
    with pytest.raises(ValueError, match="not calibrated: the knee of 'documents', the knee of 'shared-prefix'"):
        make_plan(knee, "prompts-grew", 0, knees={})


def test_the_traffic_runner_refuses_a_plan_with_unresolved_knee_rates(knee):
    with pytest.raises(ValueError, match="^the plan's knee-unit rates are not resolved: calibrate first$"):
        TrafficRunner("http://127.0.0.1:9", "model", make_plan(knee, "prompts-grew", 0), seed=0)
    runner = TrafficRunner("http://127.0.0.1:9", "model", make_plan(knee, "prompts-grew", 0, knees=KNEES), seed=0)
    assert runner.plan.segments[0].rate == 2.0  # built, never started: nothing is sent


def test_a_decoys_change_waits_in_the_runner_until_the_injection_has_landed(ttft):
    plan = make_plan(ttft, "prompts-grew", 7, knees={"shared-prefix": 4.0}, ceilings={"shared-prefix": 8.0})
    after = plan.inject_at_s + 1
    assert [s.profile for s in plan.held] == ["shared-prefix"]  # the traffic without the change
    assert plan.segment_at(after, changed=False).profile == "shared-prefix"
    runner = TrafficRunner("http://127.0.0.1:9", "model", plan, seed=0, wait_for_landing=True)
    assert runner.segment_at(after).profile == "shared-prefix"  # a rollout is still under way
    runner.landed()
    assert runner.segment_at(after).profile == "shared-prefix-long"
    assert runner.segment_at(plan.inject_at_s - 1).profile == "shared-prefix"
    # without waiting (a plan run by hand), the change comes at the planned time
    assert TrafficRunner("http://127.0.0.1:9", "model", plan, seed=0).segment_at(after).profile == "shared-prefix-long"


def test_a_variant_without_a_traffic_change_holds_nothing_back(ttft):
    plan = make_plan(ttft, "prefix-off", 7, knees={"shared-prefix": 4.0}, ceilings={"shared-prefix": 8.0})
    assert plan.held == []
    assert plan.segment_at(plan.inject_at_s + 1, changed=False) == plan.segment_at(plan.inject_at_s + 1)


def test_a_late_landing_moves_the_traffics_end_on_and_never_shortens_it(ttft):
    plan = make_plan(ttft, "prefix-off", 7, knees={"shared-prefix": 4.0}, ceilings={"shared-prefix": 8.0})
    runner = TrafficRunner("http://127.0.0.1:9", "model", plan, seed=0, wait_for_landing=True)
    assert runner.until_s == plan.duration_s
    runner.extend(plan.duration_s + 55.0)  # the deploy landed 55 s after its planned injection
    assert runner.until_s == plan.duration_s + 55.0
    assert runner.segment_at(plan.duration_s + 50.0) == plan.segments[-1]  # the last segment goes on
    runner.extend(plan.duration_s)
    assert runner.until_s == plan.duration_s + 55.0
    open_ended = TrafficRunner("http://127.0.0.1:9", "model", plan, seed=0, open_ended=True)
    open_ended.extend(plan.duration_s + 55.0)
    assert open_ended.until_s is None  # an interactive drill's traffic has no end to move


def test_the_baseline_runs_alone_until_its_first_change_the_injection_or_a_peak(surge, ttft):
    plan = make_plan(ttft, "prefix-off", 7)
    assert plan.quiet_until_s() == plan.inject_at_s
    surged = make_plan(surge, "surge", 7)
    assert surged.quiet_until_s() == surged.inject_at_s == surged.jobs[0].start_s
    oom = make_plan(load_incident(INCIDENTS / "oom-at-peak.yaml"), "headroom", 7)
    assert oom.quiet_until_s() == min(oom.inject_at_s, oom.jobs[0].start_s) == oom.inject_at_s
    early = make_plan(load_incident(INCIDENTS / "oom-at-peak.yaml"), "headroom", 7)
    early.jobs[0] = type(early.jobs[0])(20.0, 40.0, 3, "documents")
    assert early.quiet_until_s() == 20.0


def test_a_variants_job_sends_nothing_until_the_injection_lands_and_then_keeps_its_clients_busy():
    """The real runner against a loopback server that answers every request at once (with a 503): the job's
    four clients wait for `landed()`, past their planned start, then send one request after another."""
    class Overloaded(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the stdlib's name
            self.rfile.read(int(self.headers.get("content-length", 0)))
            body = b'{"error": {"message": "overloaded", "type": "overloaded", "code": 503}}'
            self.send_response(503)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Overloaded)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    plan = DrillPlan("traffic-surge", "surge", 0, 0.0, 30.0, 0.0, [Segment(0.0, 0.2, "short")],
                     jobs=[Job(0.0, 30.0, 4, "short", after_landing=True)])
    runner = TrafficRunner(f"http://127.0.0.1:{server.server_port}", "model", plan, seed=0,
                           wait_for_landing=True).start()
    try:
        time.sleep(1.5)
        before = runner.stats.sent  # the base traffic's few arrivals at 0.2 req/s, no job client's
        runner.landed()
        time.sleep(1.5)
        after = runner.stats.sent
    finally:
        runner.stop()
        server.shutdown()
    assert before <= 3
    assert after - before >= 20  # four clients, each sending again as soon as its 503 comes back


def test_a_job_client_refused_backs_off_as_the_openai_client_does():
    from sandbox.drill.traffic_runner import backoff_s

    assert [backoff_s(n, 0.0) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert backoff_s(3, 0.5) == 2.0 * 0.875  # up to a quarter less, by the jitter drawn
    with pytest.raises(ValueError):
        backoff_s(0, 0.5)


def test_the_progress_line_counts_refusals_apart_from_errors(surge):
    from sandbox.traffic.generator import RequestResult

    plan = make_plan(surge, "surge", 3, knees={"default": 4.0}, ceilings={"default": 5.0})
    runner = TrafficRunner("http://127.0.0.1:9", "model", plan, seed=0)
    runner.stats.sent = 6
    for status in ("200", "200", "429", "429", "503", "499"):
        runner.stats.add(RequestResult(status, 0.1, ttft_s=0.05 if status == "200" else None))
    line = runner.progress(12.0)
    assert "sent 6  ok 2  errors 1  refused 2  TTFT p50 50.0 ms" in line
    runner.stats.results = [r for r in runner.stats.results if r.status != "429"]
    assert "refused" not in runner.progress(13.0)
