"""cpu-throttle: a real CFS quota on one replica; its cpu.stat and Prometheus show the throttling; revert ends it.

Runs before the STACK_ORDER tests and leaves the stack as it found it.
"""
import asyncio
import json
import random

import pytest

from faults import FaultContext, build
from faults.replicas import list_replicas
from incidents.profiles import PROFILES
from sandbox.traffic.generator import run_traffic
from services.serve.cgroup_cpu import cgroup_of, cpu_mount, read_cpu_stat

pytestmark = pytest.mark.stack

THROTTLED = 'sandbox:replica_cpu_throttled_seconds_total{{replica="{}"}}'
ITL = ("sum by (replica) (increase(vllm:inter_token_latency_seconds_sum[{w}s])) / "
       "sum by (replica) (increase(vllm:inter_token_latency_seconds_count[{w}s]))")


@pytest.fixture(scope="module")
def ctx(stack):
    with FaultContext(stack.cfg, stack.refresh(), random.Random(7), log=print) as ctx:
        yield ctx


def traffic(stack, seconds: float, seed: int) -> dict:
    stats = asyncio.run(run_traffic(stack.api_url, stack.model, PROFILES["short"], rate=3.0, duration_s=seconds,
                                    seed=seed))
    return stats.summary()


def itl_by_replica(stack, window_s: int) -> dict[str, float]:
    return {r["metric"]["replica"]: float(r["value"][1]) for r in stack.prom.query(ITL.format(w=window_s))}


@pytest.mark.skipif(cpu_mount() is None, reason="no cgroup hierarchy with the cpu controller")
def test_a_throttled_replica_is_slower_and_its_throttling_reaches_prometheus(stack, ctx):
    replicas = list_replicas(ctx)
    target, other = replicas[0], replicas[1]
    mount = cpu_mount()
    origin = cgroup_of(target.pid, mount)
    before_other = stack.value(THROTTLED.format(other.replica_id))
    fault = build({"type": "cpu-throttle", "replica": 0, "cpu_fraction": 0.2})
    try:
        where = fault.inject(ctx)
        assert where.replica == target.replica_id and where.component == "cpu"
        group = cgroup_of(target.pid, mount)
        assert group != origin and group.name.startswith("sandbox-")
        summary = traffic(stack, 12, seed=5)
        assert summary["statuses"] == {"200": summary["sent"]}
        stat = read_cpu_stat(group)
        assert stat.throttled_periods > 10 and stat.throttled_seconds > 0.5, stat
        stack.wait_for(THROTTLED.format(target.replica_id), lambda v: v > 0.5, timeout_s=10)
        itl = itl_by_replica(stack, 15)
        print(json.dumps({"cpu_fraction": 0.2, "throttled": vars(stat), "mean_itl_s": {
            "throttled": itl[target.replica_id], "other": itl[other.replica_id]}}))
        assert itl[target.replica_id] > 1.5 * itl[other.replica_id]
    finally:
        fault.revert(ctx)
    assert cgroup_of(target.pid, mount) == origin and not group.exists()
    assert stack.value(THROTTLED.format(other.replica_id)) == before_other
    settled = stack.settled(THROTTLED.format(target.replica_id), quiet_s=2)
    summary = traffic(stack, 4, seed=6)
    assert summary["statuses"] == {"200": summary["sent"]}
    assert stack.settled(THROTTLED.format(target.replica_id), quiet_s=2) == settled
