"""pause: one replica's process stops (SIGSTOP) and resumes on time or at revert; Serve keeps it.

Runs before the STACK_ORDER tests and leaves the stack as it found it.
"""
import random
import time

import httpx
import pytest

from faults import FaultContext, build
from faults.replicas import list_replicas

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def ctx(stack):
    with FaultContext(stack.cfg, stack.refresh(), random.Random(7), log=print) as ctx:
        yield ctx


def wait_until(predicate, timeout_s: float) -> float:
    t0 = time.monotonic()
    while not predicate():
        assert time.monotonic() - t0 < timeout_s, "condition not reached in time"
        time.sleep(0.1)
    return time.monotonic() - t0


def all_served(stack, n: int = 6) -> bool:
    body = {"model": stack.model, "prompt": "sort: cba -> ", "max_tokens": 4, "temperature": 0}
    return all(httpx.post(f"{stack.api_url}/v1/completions", json=body, timeout=60).status_code == 200
               for _ in range(n))


def test_a_paused_replica_resumes_when_its_time_is_up(stack, ctx):
    pids = {r.replica_id: r.pid for r in list_replicas(ctx)}
    fault = build({"type": "pause", "replica": 1, "seconds": 3})
    where = fault.inject(ctx)
    assert fault.paused and where.replica == sorted(pids)[1] and where.component == "process"
    waited = wait_until(lambda: not fault.paused, timeout_s=10)
    assert 2.0 < waited < 4.0
    fault.revert(ctx)
    assert all_served(stack)
    assert {r.replica_id: r.pid for r in list_replicas(ctx)} == pids


def test_revert_resumes_a_paused_replica_at_once(stack, ctx):
    pids = {r.replica_id: r.pid for r in list_replicas(ctx)}
    fault = build({"type": "pause", "replica": 0, "seconds": 600})
    fault.inject(ctx)
    assert fault.paused
    fault.revert(ctx)
    assert not fault.paused
    fault.revert(ctx)
    assert all_served(stack)
    assert {r.replica_id: r.pid for r in list_replicas(ctx)} == pids
