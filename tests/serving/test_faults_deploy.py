"""deploy and knobs faults go out through the deployer; their reverts bring the old settings back.

Runs before the STACK_ORDER tests and leaves the stack as it found it.
"""
import random
import time
from pathlib import Path

import pytest

from faults import FaultContext, build
from services.stack.deploy_config import SERVER, DeployConfig, next_version

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def ctx(stack):
    with FaultContext(stack.cfg, stack.refresh(), random.Random(7), log=print) as ctx:
        yield ctx


def deployed(ctx) -> DeployConfig:
    return DeployConfig.load(Path(ctx.state.deployed_config))


def test_a_deploy_rolls_out_a_new_version_and_its_revert_rolls_back(stack, ctx):
    old_version, old_args = ctx.state.version, deployed(ctx).args
    fault = build({"type": "deploy", "set": {"engine.max_num_batched_tokens": 256}})
    ticks = []
    ctx.tick = lambda: ticks.append(time.monotonic())  # a drill watches its alerts while the rollout runs
    where = fault.inject(ctx)
    assert len(ticks) >= 2, ticks
    assert where.version == next_version(old_version) == ctx.state.version and where.component == "deployment"
    stack.wait_for(f'count(vllm:cache_config_info{{version="{where.version}",max_num_batched_tokens="256"}} == 1)',
                   lambda v: v == 2)
    fault.revert(ctx)
    fault.revert(ctx)
    assert ctx.state.version == old_version and deployed(ctx).args == old_args
    # The first rollout's old replicas said v1 and 512 too, and Serve stops them only once drained: here the
    # count took 14-16 s to read 2 after the revert returned (three runs), and CI once saw 4 for more than 15 s.
    # So: exactly the two new ones, once the old ones are gone, with room to spare.
    stack.wait_for(f'count(vllm:cache_config_info{{version="{old_version}",max_num_batched_tokens="512"}} == 1)',
                   lambda v: v == 2, timeout_s=75)
    # And the second version's replicas gone too, so the tests after this one see the two running ones only.
    stack.wait_for(f'count(vllm:num_requests_running{{version!="{old_version}"}}) or vector(0)', lambda v: v == 0,
                   timeout_s=60)


def test_knobs_apply_in_place_on_every_replica_and_revert(stack, ctx):
    old = deployed(ctx).deployment(SERVER).get("user_config") or {}
    fault = build({"type": "knobs", "set": {"max_num_seqs": 4}})
    where = fault.inject(ctx)
    assert where.version == ctx.state.version and where.replica is None
    stack.wait_for('count(vllm:cache_config_info{max_num_seqs="4"} == 1)', lambda v: v == 2)
    fault.revert(ctx)
    stack.wait_for('count(vllm:cache_config_info{max_num_seqs="32"} == 1)', lambda v: v == 2)
    assert {k: v for k, v in (deployed(ctx).deployment(SERVER).get("user_config") or {}).items()
            if v is not None} == old
