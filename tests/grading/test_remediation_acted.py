"""The remediation points of a drill where the candidate acted: graded by what the action achieved (the recovery
oracle's verdict, from the run's sealed record), not by the remedy the diagnosis names. Without an action (a
replay), the named remedy is graded as before."""
from __future__ import annotations

from pathlib import Path

import pytest

from incidents.schema import load_catalogue
from sandbox.grading.diagnosis import load_diagnosis
from sandbox.grading.grader import Grader
from sandbox.grading.recorded import RecordedPrometheus, RecordedRun
from services.stack.prometheus import PrometheusError, find_binary

ROOT = Path(__file__).resolve().parents[2]
RUN = Path(__file__).parent / "fixtures" / "20261130-172507-ttft-after-deploy"  # prefix-off

try:
    find_binary("prometheus")
except PrometheusError:
    pytest.skip("needs Debian's prometheus (scripts/setup.sh installs it)", allow_module_level=True)


def _verdict(outcome: str, ttm: float | None = None, other: tuple[str, ...] = (), reason: str = "") -> dict:
    return {"outcome": outcome, "ttm_s": ttm, "other_pages": list(other), "reason": reason}


def _acted(*actions: str, verdict: dict | None) -> dict:
    return {"actions": [{"action": a, "started": 1000.0 + i} for i, a in enumerate(actions)], "verdict": verdict}


@pytest.fixture(scope="module")
def grade():
    recorded = RecordedRun(RUN, RUN.parent / f"{RUN.name}.key")
    incident = load_catalogue(ROOT / "incidents")[recorded.incident_id]
    good = load_diagnosis(RUN / "golden" / "good.yaml")  # names rollback-deploy
    with RecordedPrometheus(RUN / "prometheus") as prom:
        def remediation(mitigation):
            grader = Grader(incident, recorded.sealed["variant"], recorded.sealed["answer"], recorded.windows(),
                            prom, mitigation=mitigation)
            c = grader.remediation(good)
            return c.points, c.sentence
        yield remediation


def test_recovered_by_the_best_remedy_earns_all_ten_with_the_time_to_mitigate(grade):
    assert grade(_acted("rollback-deploy", verdict=_verdict("recovered", 212.0))) == \
        (10, "acted: rollback-deploy; service recovered (the key's first remedy), 212 s after the page")


def test_recovered_by_an_accepted_remedy_that_is_not_the_best_earns_half(grade):
    sentence = ("acted: restart-replica, then enable-prefix-caching; service recovered (an accepted remedy, not "
                "the best), 300 s after the page")
    assert grade(_acted("restart-replica", "enable-prefix-caching", verdict=_verdict("recovered", 300.0))) == \
        (5, sentence)


def test_not_recovered_or_worse_earns_nothing_whatever_the_diagnosis_names(grade):
    assert grade(_acted("restart-replica", verdict=_verdict("not recovered", reason="quiet, but the cause is "
                                                            "still in place"))) == \
        (0, "acted: restart-replica; not recovered: quiet, but the cause is still in place")
    assert grade(_acted("scale-out", verdict=_verdict("worse", other=("ServingErrorRateHigh",)))) == \
        (0, "acted: scale-out; made it worse: ServingErrorRateHigh paged after it")
    assert grade(_acted("rollback-deploy", verdict=None)) == \
        (0, "acted: rollback-deploy; not recovered: the drill ended before the oracle could judge it")


def test_without_an_action_the_named_remedy_is_graded(grade):
    assert grade(None) == (10, "'rollback-deploy' fixes it")
    assert grade({"actions": [], "verdict": None}) == (10, "'rollback-deploy' fixes it")


def _refused(*actions: str) -> list[dict]:
    return [{"action": a, "started": 990.0, "reason": f"{a}: no room for another replica on this machine"}
            for a in actions]


def test_a_key_remedy_the_machine_had_no_room_for_is_graded_as_named(grade):
    # prefix-off's key is [rollback-deploy, enable-prefix-caching]; a refusal stands for any action the machine
    # could not take (in the catalogue: scale-out, the surge's remedy, on a machine with no core free)
    tried = {"actions": [], "refused": _refused("rollback-deploy"), "verdict": None}
    assert grade(tried) == (10, "tried: rollback-deploy, the key's first remedy; this machine had no room for it "
                                "(refused, nothing changed), so the attempt is graded as named")
    later = {"actions": [], "refused": _refused("enable-prefix-caching"), "verdict": None}
    assert grade(later) == (5, "tried: enable-prefix-caching, an accepted remedy, not the best; this machine had no "
                               "room for it (refused, nothing changed), so the attempt is graded as named")


def test_a_refused_action_the_key_does_not_list_earns_nothing_and_what_was_done_after_it_counts(grade):
    # not a remedy: the diagnosis's named one is graded, as with no action
    assert grade({"actions": [], "refused": _refused("scale-out"), "verdict": None}) == (10, "'rollback-deploy' fixes it")
    # the right remedy refused, then a wrong action that did not recover: the attempt scores more
    then = {**_acted("restart-replica", verdict=_verdict("not recovered", reason="no")),
            "refused": _refused("rollback-deploy")}
    assert grade(then)[0] == 10 and grade(then)[1].startswith("tried: rollback-deploy")
    # an accepted remedy refused, then the best one applied and recovered: what was done scores more
    done = {**_acted("rollback-deploy", verdict=_verdict("recovered", 90.0)), "refused": _refused("enable-prefix-caching")}
    assert grade(done) == (10, "acted: rollback-deploy; service recovered (the key's first remedy), 90 s after the page")


def test_the_debrief_shows_each_action_on_the_timeline_and_the_recovery_shaded(tmp_path):
    from sandbox.grading.debrief import write_debrief

    recorded = RecordedRun(RUN, RUN.parent / f"{RUN.name}.key")
    incident = load_catalogue(ROOT / "incidents")[recorded.incident_id]
    w = recorded.windows()
    page = w.t0 + w.inject_s + 40
    no_room = "scale-out: no room for another replica on this machine"
    mitigation = {"actions": [{"action": "rollback-deploy", "started": page + 60, "from_page_s": 60.0}],
                  "refused": [{"action": "scale-out", "started": page + 10, "reason": no_room, "from_page_s": 10.0}],
                  "verdict": {"outcome": "recovered", "quiet_from": page + 90, "ttm_s": 90.0, "other_pages": [],
                              "reason": "TimeToFirstTokenHigh quiet for 120 s from 90 s after the page"}}
    events = recorded.record.events() + [
        {"kind": "mitigation refused", "action": "scale-out", "started": page + 10, "reason": no_room,
         "time": page + 10},
        {"kind": "mitigation", "action": "rollback-deploy", "started": page + 60, "time": page + 60}]
    with RecordedPrometheus(RUN / "prometheus") as prom:
        report = Grader(incident, recorded.sealed["variant"], recorded.sealed["answer"], w, prom,
                        mitigation=mitigation).grade(load_diagnosis(RUN / "golden" / "good.yaml"))
        md = write_debrief(tmp_path, incident, {**recorded.sealed, "mitigation": mitigation}, w, report, prom,
                           events).read_text()
    assert "| rollback-deploy | 60.0 |" in md and "Verdict: **recovered**." in md and "Time to mitigate: 90 s." in md
    assert f"| {round(w.inject_s + 100)} | mitigation action=rollback-deploy" in md
    # an action the machine had no room for: in the table and on the timeline, changing nothing
    assert f"| scale-out (refused, nothing changed: {no_room}) | 10.0 |" in md
    assert f"| {round(w.inject_s + 50)} | mitigation refused action=scale-out reason={no_room} |" in md
    assert "started=" not in md  # the wall time, which the at-column gives on the drill's clock
    assert "recovered blue" in md and list((tmp_path / "debrief").glob("*.png"))
    # the SLO curve: the page's own expression over its threshold, the quantity the oracle judged
    page_alert = next(e["alert"] for e in events if e["kind"] == "page")
    assert f"{page_alert}'s expression over its threshold" in md and (tmp_path / "debrief" / "page.png").is_file()
    doc = (tmp_path / "debrief" / "debrief.html").read_text()
    assert "<h2>Mitigation</h2>" in doc and "<td>rollback-deploy</td><td>60.0</td>" in doc
    assert ("Verdict: recovered. TimeToFirstTokenHigh quiet for 120 s from 90 s after the page. Time to mitigate: "
            "90 s.") in doc


def test_on_the_control_no_action_earns_all_ten_and_any_change_is_graded_as_making_it_worse():
    run = Path(__file__).parent / "fixtures" / "20261130-113602-quiet-shift"
    recorded = RecordedRun(run, run.parent / f"{run.name}.key")
    incident = load_catalogue(ROOT / "incidents")[recorded.incident_id]
    good = load_diagnosis(run / "golden" / "good.yaml")
    with RecordedPrometheus(run / "prometheus") as prom:
        def remediation(*actions):
            c = Grader(incident, recorded.sealed["variant"], recorded.sealed["answer"], recorded.windows(), prom,
                       mitigation=_acted(*actions, verdict=None)).remediation(good)
            return c.points, c.sentence
        assert remediation("no-action") == (10, "acted: no-action, the right call on a healthy stack")
        assert remediation("restart-replica") == \
            (0, "acted: restart-replica; made it worse: a change to a healthy stack, with nothing to fix")


def test_where_the_traffic_changed_no_action_earns_all_ten_and_rolling_back_the_harmless_deploy_nothing():
    run = Path(__file__).parent / "fixtures" / "20261130-174259-ttft-after-deploy"  # prompts-grew: a decoy deploy
    recorded = RecordedRun(run, run.parent / f"{run.name}.key")
    assert recorded.sealed["variant"] == "prompts-grew"
    incident = load_catalogue(ROOT / "incidents")[recorded.incident_id]
    good = load_diagnosis(run / "golden" / "good.yaml")
    with RecordedPrometheus(run / "prometheus") as prom:
        def remediation(*actions, verdict=None):
            c = Grader(incident, recorded.sealed["variant"], recorded.sealed["answer"], recorded.windows(), prom,
                       mitigation=_acted(*actions, verdict=verdict)).remediation(good)
            return c.points, c.sentence
        assert remediation("no-action") == (10, "acted: no-action, the key's first remedy: nothing in the stack to undo")
        still = "quiet, but the cause is still in place"
        assert remediation("rollback-deploy", verdict=_verdict("not recovered", reason=still)) == \
            (0, f"acted: rollback-deploy; not recovered: {still}")
