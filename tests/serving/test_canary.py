"""The canary on the live stack: its metrics reach Prometheus, the healthy model scores well and answers
consistently, the alert rules are loaded and evaluate cleanly, and none fires on the healthy stack.

The prober runs as `python -m sandbox.canary` (as a drill starts it) for about 20 s of probes, and is
stopped before the module ends, so the session's stack is left as it was found.
"""
import json
import time
from pathlib import Path

import pytest
import yaml

from sandbox.canary import process
from sandbox.canary.endpoint import target_file
from services.engine.config import EngineConfig
from services.model.tasks import TASKS
from services.stack import alerts

pytestmark = pytest.mark.stack

CANARY_PORT = 19450  # away from a person's sandbox (9450) and the test stack's other ports
CONSISTENCY = "sandbox_canary_consistency_checks_total"


def _batch_invariant(stack) -> bool:
    deployed = yaml.safe_load(Path(stack.refresh().deployed_config).read_text())
    engine = deployed["applications"][0]["args"].get("engine", {})
    return bool(engine.get("batch_invariant", EngineConfig.batch_invariant))


def _wait_until_unscraped(stack, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while any(t["labels"].get("job") == "canary" for t in stack.prom.targets()):
        assert time.monotonic() < deadline, "Prometheus still scrapes the stopped canary"
        time.sleep(0.25)


@pytest.fixture(scope="module")
def canary(stack, tmp_path_factory):
    """The canary's counts in Prometheus after ~20 s of probes, what was firing then, and its exit."""
    log = tmp_path_factory.mktemp("canary") / "canary.log"
    state = stack.refresh()
    proc = process.spawn(state.api_url, state.model_name, state.targets_dir, log, first_port=CANARY_PORT)
    announced = target_file(state.targets_dir, proc.pid)
    started = time.monotonic()
    try:
        stack.wait_for('count(up{job="canary"} == 1)', lambda v: v == 1, timeout_s=20)
        # About 20 s of probes: four checks of every task, two bursts.
        stack.wait_for(f"min(sum by (task) (sandbox_canary_checks_total)) >= 4 and on() "
                       f'sum({CONSISTENCY}{{load="burst"}}) >= 8 and on() count(count by (task) '
                       f"(sandbox_canary_checks_total)) == {len(TASKS)}", lambda v: v >= 4, timeout_s=60)
        # Each alert has had its window of canary data; what does the rule manager say?
        active = alerts.active_alerts(stack.prom)
        problems = alerts.rule_problems(stack.prom)
        loaded = alerts.loaded_alerts(stack.prom)
        accuracy = {r["metric"]["task"]: float(r["value"][1]) for r in stack.prom.query(
            'sum by (task) (sandbox_canary_checks_total{result="correct"}) / sum by (task) (sandbox_canary_checks_total)')}
        consistency = {(r["metric"]["mode"], r["metric"]["load"], r["metric"]["result"]): float(r["value"][1])
                       for r in stack.prom.query(f"sum by (mode, load, result) ({CONSISTENCY})")}
        replicas = {r["metric"]["replica"] for r in stack.prom.query(f"sum by (replica) ({CONSISTENCY}) > 0")}
        engine_replicas = {r["metric"]["replica"] for r in stack.prom.query("vllm:cache_config_info == 1")}
        probing_s = time.monotonic() - started
    finally:
        process.stop(proc)
        _wait_until_unscraped(stack)  # later tests scrape every active target
    summary = json.loads(log.read_text().splitlines()[-1])
    yield {"accuracy": accuracy, "consistency": consistency, "replicas": replicas,
           "engine_replicas": engine_replicas, "active": active, "problems": problems, "loaded": loaded,
           "summary": summary, "returncode": proc.returncode, "announced": announced, "probing_s": probing_s}


def test_the_canary_is_scraped_and_stops_cleanly(canary):
    assert canary["returncode"] == 0
    assert not canary["announced"].exists()
    assert canary["summary"]["references"] == 14 and canary["summary"]["skipped"] == 0


def test_every_task_scores_above_0_9(canary):
    assert set(canary["accuracy"]) == set(TASKS)
    assert all(v > 0.9 for v in canary["accuracy"].values()), canary["accuracy"]


def test_consistency_is_checked_alone_and_in_bursts_in_both_modes(canary):
    seen = {(mode, load) for mode, load, _ in canary["consistency"]}
    assert seen == {(m, lo) for m in ("greedy", "seeded") for lo in ("alone", "burst")}


def test_answers_name_the_engine_replica_that_served_them(canary):
    assert canary["replicas"] and canary["replicas"] <= canary["engine_replicas"]


def test_seeded_repeats_match_their_reference(canary):
    assert canary["consistency"].get(("seeded", "alone", "mismatch"), 0) == 0
    assert canary["consistency"].get(("seeded", "burst", "mismatch"), 0) == 0


def test_greedy_repeats_match_their_reference(stack, canary):
    mismatches = sum(v for (mode, _, result), v in canary["consistency"].items()
                     if mode == "greedy" and result == "mismatch")
    if mismatches and not _batch_invariant(stack):
        pytest.xfail(f"{mismatches:.0f} greedy mismatches: the deployed engine is not batch-invariant "
                     "(services/serve_config.yaml), so batching flips near-ties")
    assert mismatches == 0


def test_the_rules_are_loaded_and_evaluate_without_error(canary):
    assert sorted(canary["loaded"]) == sorted(alerts.alert_names())
    assert canary["problems"] == []


def test_no_alert_is_pending_or_firing_on_the_healthy_stack(stack, canary):
    active = sorted({a.name for a in canary["active"]})
    if active == ["CanaryOutputsInconsistent"] and not _batch_invariant(stack):
        pytest.xfail("greedy canary repeats mismatch: the deployed engine is not batch-invariant")
    assert active == []
