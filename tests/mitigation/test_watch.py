"""A drill's watch over the candidate's actions: `sandbox mitigate` adds each to the run's events, the drill picks
it up and, once paged, asks its oracle; what run.json keeps never names the cause (the sealed record does)."""
from __future__ import annotations

from sandbox.drill.record import RunRecord
from sandbox.mitigation.oracle import Verdict
from sandbox.mitigation.watch import PUBLIC_REASON, MitigationWatch, record_action, record_refusal

PAGE = {"alert": "TimeToFirstTokenHigh", "paged_at": 1000.0}
STILL = "the serving version v3 runs engine.enable_prefix_caching=false"


class Oracle:
    """The oracle's answers in turn, and what it was asked."""

    def __init__(self, *verdicts: Verdict):
        self.verdicts, self.asked = list(verdicts), []

    def judge(self, action_wall, now_wall):
        self.asked.append((action_wall, now_wall))
        return self.verdicts.pop(0)


def _record(tmp_path) -> RunRecord:
    return RunRecord.create(tmp_path / "runs", tmp_path / "keys", "20261204-180000-abcdef", {"status": "running"})


def _verdict(outcome: str, invariant: str | None = None, ttm: float | None = None) -> Verdict:
    reason = f"quiet, but the cause is still in place: {invariant}" if invariant else outcome
    return Verdict(outcome, 1100.0 if ttm else None, ttm, (), 0.0, 0.0, invariant, reason)


def test_no_action_is_no_summary_and_no_question_to_the_oracle(tmp_path):
    oracle = Oracle()
    watch = MitigationWatch(_record(tmp_path), lambda page: oracle)
    watch.poll(PAGE, now=2000.0)
    assert watch.summary(PAGE) is None and oracle.asked == []


def test_an_action_is_judged_once_paged_and_every_ten_seconds_until_it_recovers(tmp_path):
    record = _record(tmp_path)
    oracle = Oracle(_verdict("not recovered", STILL), _verdict("recovered", ttm=100.0))
    watch = MitigationWatch(record, lambda page: oracle)
    record_action(record, {"action": "rollback-deploy", "started": 1060.0}, None, None)
    watch.poll(None, now=1061.0)  # not paged yet: nothing to judge
    watch.poll(PAGE, now=1070.0)
    watch.poll(PAGE, now=1075.0)  # within ten seconds of the last question
    watch.poll(PAGE, now=1080.0)
    watch.poll(PAGE, now=1200.0)  # recovered: settled, no more questions
    assert oracle.asked == [(1060.0, 1070.0), (1060.0, 1080.0)]
    summary = watch.summary(PAGE)
    assert summary["actions"] == [{"action": "rollback-deploy", "started": 1060.0, "from_page_s": 60.0}]
    assert summary["verdict"]["outcome"] == "recovered" and summary["ttm_s"] == 100.0


def test_what_run_json_keeps_says_the_cause_is_in_place_without_naming_it(tmp_path):
    record = _record(tmp_path)
    watch = MitigationWatch(record, lambda page: Oracle(_verdict("not recovered", STILL)))
    record_action(record, {"action": "restart-replica", "started": 1060.0}, "abc123", None)
    watch.poll(PAGE, now=1070.0)
    public = watch.summary(PAGE)
    assert public["actions"][0]["replica"] == "abc123"
    assert public["verdict"]["invariant"] == "still in place" and public["verdict"]["reason"] == PUBLIC_REASON
    assert "prefix" not in str(public)
    assert watch.summary(PAGE, sealed=True)["verdict"]["invariant"] == STILL


def test_a_new_action_clears_the_verdict_about_the_one_before(tmp_path):
    record = _record(tmp_path)
    oracle = Oracle(_verdict("not recovered"), _verdict("recovered", ttm=150.0))
    watch = MitigationWatch(record, lambda page: oracle)
    record_action(record, {"action": "restart-replica", "started": 1060.0}, "r1", None)
    watch.poll(PAGE, now=1070.0)
    record_action(record, {"action": "rollback-deploy", "started": 1074.0}, None, None)
    watch.poll(PAGE, now=1075.0)
    assert watch.verdict is None  # asked again only ten seconds after the last question
    watch.poll(PAGE, now=1080.0)
    assert oracle.asked[-1] == (1074.0, 1080.0) and watch.summary(PAGE)["ttm_s"] == 150.0


def test_a_report_with_no_alert_has_no_oracle(tmp_path):
    record = _record(tmp_path)
    watch = MitigationWatch(record, lambda page: None)
    record_action(record, {"action": "no-action", "started": 1060.0}, None, None)
    watch.poll({"alert": None, "paged_at": 1000.0}, now=1100.0)
    assert watch.summary(PAGE)["verdict"] is None


def test_an_oracle_that_cannot_read_prometheus_leaves_the_verdict_and_is_asked_again(tmp_path):
    record = _record(tmp_path)

    class Unreachable:
        def judge(self, action_wall, now_wall):
            raise RuntimeError("Prometheus query failed: connection refused")

    watch = MitigationWatch(record, lambda page: Unreachable())
    record_action(record, {"action": "rollback-deploy", "started": 1060.0}, None, None)
    watch.poll(PAGE, now=1070.0)
    assert watch.verdict is None and watch.unread == "RuntimeError: Prometheus query failed: connection refused"


def test_a_verdict_about_other_pages_keeps_its_reason_in_run_json_and_hides_only_what_names_the_cause(tmp_path):
    record = _record(tmp_path)
    worse = Verdict("worse", 1100.0, None, ("ServingErrorRateHigh",), 0.0, 0.0, STILL,
                    "another page fired after the action: ServingErrorRateHigh")
    watch = MitigationWatch(record, lambda page: Oracle(worse))
    record_action(record, {"action": "scale-out", "started": 1060.0}, None, None)
    watch.poll(PAGE, now=1070.0)
    public = watch.summary(PAGE)["verdict"]
    assert public["reason"] == "another page fired after the action: ServingErrorRateHigh"
    assert public["invariant"] == "still in place"


def test_an_action_the_machine_had_no_room_for_is_kept_apart_and_never_judged(tmp_path):
    record = _record(tmp_path)
    oracle = Oracle()
    watch = MitigationWatch(record, lambda page: oracle)
    no_room = "scale-out: no room for another replica on this machine: 2 replicas of 1 thread(s) each already use its 2 cores"
    record_refusal(record, "scale-out", 1010.0, no_room)
    watch.poll(PAGE, now=1030.0)
    assert oracle.asked == []  # nothing changed: nothing to judge
    assert watch.summary(PAGE) == {"actions": [], "refused": [
        {"action": "scale-out", "started": 1010.0, "reason": no_room, "from_page_s": 10.0}],
        "verdict": None, "ttm_s": None}


def test_sandbox_mitigate_tells_a_running_drill_of_an_action_the_machine_had_no_room_for(tmp_path):
    import json
    import os

    from sandbox.commands.mitigate import _tell_the_drill_refused
    from sandbox.drill.record import DRILL_FILE
    from services.stack.settings import SandboxConfig

    cfg = SandboxConfig(home=tmp_path / "home", runs=tmp_path / "runs")
    record = RunRecord.create(cfg.runs, cfg.keys_dir, "20261207-190000-abcdef", {"status": "running"})
    cfg.home.mkdir(parents=True, exist_ok=True)
    (cfg.home / DRILL_FILE).write_text(json.dumps({"pid": os.getpid(), "run_dir": str(record.dir), "mode": "drill"}))
    _tell_the_drill_refused(cfg, "scale-out", 1005.0, "scale-out: no room for another replica on this machine")
    watch = MitigationWatch(record, lambda page: Oracle())
    watch.poll(PAGE, now=1010.0)
    assert watch.refused == [{"action": "scale-out", "started": 1005.0,
                              "reason": "scale-out: no room for another replica on this machine"}]
    assert watch.actions == []
