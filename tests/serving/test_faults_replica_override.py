"""replica-override: one replica's engine is rebuilt with other settings, in the same process; revert undoes it.

Runs before the STACK_ORDER tests and leaves the stack as it found it.
"""
import random
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from faults import FaultContext, InjectionFailed, Location, build
from faults.replicas import list_replicas

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def ctx(stack):
    with FaultContext(stack.cfg, stack.refresh(), random.Random(7), log=print) as ctx:
        yield ctx


def configs(stack) -> dict[str, dict]:
    """replica -> its current cache_config_info labels."""
    return {r["metric"]["replica"]: r["metric"] for r in stack.prom.query("vllm:cache_config_info == 1")}


def complete(stack, i: int) -> tuple[int, str | None]:
    body = {"model": stack.model, "prompt": f"copy: abc{i} -> ", "max_tokens": 32, "temperature": 0,
            "ignore_eos": True}
    resp = httpx.post(f"{stack.api_url}/v1/completions", json=body, timeout=120)
    return resp.status_code, resp.headers.get("x-served-by")


def test_an_override_rebuilds_one_replica_in_place_and_revert_restores_it(stack, ctx):
    replicas = list_replicas(ctx)
    assert len(replicas) == 2
    target, other = replicas[0].replica_id, replicas[1].replica_id
    stack.wait_for("count(vllm:cache_config_info == 1)", lambda v: v == 2)
    before = configs(stack)
    fault = build({"type": "replica-override", "replica": 0, "set": {"num_gpu_blocks": 24}})

    with ThreadPoolExecutor(6) as pool:  # requests in flight while the engine is rebuilt all finish
        during = [pool.submit(complete, stack, i) for i in range(6)]
        where = fault.inject(ctx)
        statuses = [f.result()[0] for f in during]
    assert statuses == [200] * 6
    assert where == Location(target, stack.state.version, "engine")
    stack.wait_for(f'count(vllm:cache_config_info{{replica="{target}",num_gpu_blocks="24"}} == 1)', lambda v: v == 1)
    after = configs(stack)
    assert after[other] == before[other]
    assert {k: v for k, v in after[target].items() if k != "num_gpu_blocks"} == \
        {k: v for k, v in before[target].items() if k != "num_gpu_blocks"}
    assert {r.replica_id: r.pid for r in list_replicas(ctx)} == {r.replica_id: r.pid for r in replicas}
    with ThreadPoolExecutor(4) as pool:
        served = list(pool.map(lambda i: complete(stack, i), range(8)))
    assert {s for s, _ in served} == {200} and target in {r for _, r in served}

    fault.revert(ctx)
    fault.revert(ctx)
    stack.wait_for(f'count(vllm:cache_config_info{{replica="{target}",'
                   f'num_gpu_blocks="{before[target]["num_gpu_blocks"]}"}} == 1)', lambda v: v == 1)
    assert configs(stack) == before
    assert {r.replica_id: r.pid for r in list_replicas(ctx)} == {r.replica_id: r.pid for r in replicas}
    assert ray_get(ctx.runtime().status.remote(target))["settings"] == {}


def test_settings_the_replica_cannot_run_are_refused_and_it_keeps_serving(stack, ctx):
    target = list_replicas(ctx)[1].replica_id
    before = configs(stack)
    fault = build({"type": "replica-override", "replica": 1, "set": {"num_gpu_blocks": 1_000_000}})
    with pytest.raises(InjectionFailed, match="num_gpu_blocks=1000000 needs .* B of KV cache"):
        fault.inject(ctx)
    assert fault.location().replica == target
    fault.revert(ctx)
    assert configs(stack) == before
    with ThreadPoolExecutor(4) as pool:
        served = list(pool.map(lambda i: complete(stack, i), range(8)))
    assert {s for s, _ in served} == {200}


def ray_get(ref):
    import ray

    return ray.get(ref)
