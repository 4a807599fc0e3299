"""CI's share of mitigation (issue 17): a deploy cause and two replica causes, fixed by `sandbox mitigate` on the
live stack, and judged by the recovery oracle reading the real Prometheus.

The page itself is not provoked here (the suite's stack is idle and would take minutes to page); what is checked
is what decides a verdict once it has: the oracle reads the page's expression quiet under light traffic, yet
calls it recovered only once the action has taken the mechanism out of the stack (`Fault.in_place`), as read from
the stack itself. Full drills, page and all, are `bench/mitigation_drill.py`. Runs before the STACK_ORDER tests
and leaves the stack as it found it (the faults' reverts run whatever the test did).
"""
import json
import random
import threading
import time

import httpx
import pytest

from faults import FaultContext, build
from faults.replicas import list_replicas
from sandbox.mitigation.oracle import STILL_IN_PLACE, RecoveryOracle
from services.serve.cgroup_cpu import cpu_mount

pytestmark = pytest.mark.stack

WINDOW_S = 16.0  # the oracle's quiet window, shortened (RECOVERY_WINDOW_S is 120 s in a drill)


@pytest.fixture(scope="module")
def ctx(stack):
    with FaultContext(stack.cfg, stack.refresh(), random.Random(11), log=print) as ctx:
        yield ctx


@pytest.fixture
def light_traffic(stack):
    """A request every 0.4 s, so the page's quantile has a reading at every step of the window."""
    done, statuses = threading.Event(), []

    def send():
        with httpx.Client(timeout=60) as client:
            while not done.is_set():
                body = {"model": stack.model, "prompt": "copy: light -> ", "max_tokens": 4, "temperature": 0}
                try:
                    statuses.append(client.post(f"{stack.api_url}/v1/completions", json=body).status_code)
                except httpx.HTTPError:
                    statuses.append(None)
                done.wait(0.4)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    yield statuses
    done.set()
    thread.join(timeout=70)


def mitigate(stack, *args: str) -> dict:
    out = stack.cli("mitigate", *args, "--json", timeout_s=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def judged_over_a_window(stack, oracle: RecoveryOracle, since: float):
    """The verdict once a whole window (and a scrape) has passed since `since`."""
    time.sleep(max(0.0, since + WINDOW_S + 2 * stack.cfg.scrape_interval_s - time.time()))
    return oracle.judge(since, time.time())


def test_a_rollback_takes_a_bad_deploy_out_and_only_then_a_quiet_page_is_recovery(stack, ctx, light_traffic):
    fault = build({"type": "deploy", "set": {"engine.enable_prefix_caching": False}})
    fault.inject(ctx)
    try:
        ctx.state = stack.refresh()
        bad = ctx.state.version
        oracle = RecoveryOracle(stack.prom, "TimeToFirstTokenHigh", time.time(), window_s=WINDOW_S,
                                invariant=lambda: fault.in_place(ctx))
        before = judged_over_a_window(stack, oracle, time.time())
        assert before.outcome == "not recovered" and before.reason.startswith(STILL_IN_PLACE), before
        assert bad in before.invariant and "enable_prefix_caching=false" in before.invariant

        report = mitigate(stack, "rollback-deploy")
        ctx.state = stack.refresh()
        assert report["action"] == "rollback-deploy" and ctx.state.version != bad
        after = judged_over_a_window(stack, oracle, time.time())
        assert after.outcome == "recovered" and after.invariant is None, after
        assert after.ttm_s is not None and after.ttm_s > 0
    finally:
        ctx.state = stack.refresh()
        fault.revert(ctx)
    assert light_traffic and all(s == 200 for s in light_traffic[-5:]), light_traffic[-10:]


def test_a_restarted_replica_comes_back_without_its_override_and_that_is_recovery(stack, ctx, light_traffic):
    fault = build({"type": "replica-override", "replica": "random", "set": {"num_gpu_blocks": 64}})
    where = fault.inject(ctx)
    try:
        oracle = RecoveryOracle(stack.prom, "ReplicaTimeToFirstTokenHigh", time.time(), window_s=WINDOW_S,
                                invariant=lambda: fault.in_place(ctx))
        still = fault.in_place(ctx)
        assert still is not None and where.replica in still and "num_gpu_blocks" in still

        report = mitigate(stack, "restart-replica", "--replica", where.replica)
        assert report["replaced_by"] and where.replica not in report["replaced_by"]
        assert where.replica not in {r.replica_id for r in list_replicas(ctx)} and len(list_replicas(ctx)) == 2
        after = judged_over_a_window(stack, oracle, time.time())
        assert after.outcome == "recovered" and after.invariant is None, after
    finally:
        fault.revert(ctx)  # the replica it names is gone: the revert only forgets its settings
    assert light_traffic and all(s == 200 for s in light_traffic[-5:]), light_traffic[-10:]


@pytest.mark.skipif(cpu_mount() is None, reason="no cgroup hierarchy with the cpu controller")
def test_a_drained_replica_loses_nothing_in_flight_and_its_replacement_runs_outside_the_cpu_quota(stack, ctx,
                                                                                                  light_traffic):
    fault = build({"type": "cpu-throttle", "replica": "random", "cpu_fraction": 0.5})
    where = fault.inject(ctx)
    try:
        oracle = RecoveryOracle(stack.prom, "ReplicaTimeToFirstTokenHigh", time.time(), window_s=WINDOW_S,
                                invariant=lambda: fault.in_place(ctx))
        assert fault.in_place(ctx) is not None
        sent = len(light_traffic)
        report = mitigate(stack, "drain-replica", "--replica", where.replica)
        assert report["replaced_by"] and where.replica not in report["replaced_by"]
        assert where.replica not in {r.replica_id for r in list_replicas(ctx)} and len(list_replicas(ctx)) == 2
        after = judged_over_a_window(stack, oracle, time.time())
        assert after.outcome == "recovered" and after.invariant is None, after
        assert len(light_traffic) > sent + 10
    finally:
        fault.revert(ctx)
    # a drain, unlike a restart, fails nothing that was in flight
    assert light_traffic and all(s == 200 for s in light_traffic), [s for s in light_traffic if s != 200]
