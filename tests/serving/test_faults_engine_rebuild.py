"""EngineLoop.rebuild, without Ray: a new engine between requests, none lost, counters carried over."""
import asyncio
import dataclasses

import pytest

from services.engine import EngineConfig, LLMEngine, SamplingParams
from services.model.paths import target_path
from services.serve.engine_loop import EngineDeadError, EngineLoop

LONG = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


@pytest.fixture(scope="module")
def engine_config():
    return EngineConfig(model=str(target_path()), max_num_seqs=8, max_num_batched_tokens=256, max_model_len=256,
                        torch_threads=1)


@pytest.fixture
def loop(engine_config):
    loop = EngineLoop(LLMEngine(engine_config), None, publish_interval_s=0.05).start()
    yield loop
    loop.stop()


async def collect(loop, rid, prompt, params=LONG):
    stream = loop.add_request(rid, prompt, params)
    await stream.accepted()
    return [out async for out in stream]


async def rebuild_in_thread(loop, build, restore, **kwargs):
    return await asyncio.to_thread(loop.rebuild, build, restore, **kwargs)


def test_a_rebuild_waits_for_running_requests_and_holds_new_ones(loop, engine_config):
    small = dataclasses.replace(engine_config, num_gpu_blocks=8)
    old_engine = loop.engine

    async def main():
        running = asyncio.create_task(collect(loop, "running", "copy: abcdef -> "))
        await asyncio.sleep(0.1)  # it is in the batch when the rebuild is asked for
        rebuild = asyncio.create_task(rebuild_in_thread(loop, lambda: LLMEngine(small), lambda: old_engine))
        await asyncio.sleep(0.05)
        held = asyncio.create_task(collect(loop, "held", "sort: dcba -> "))
        return await running, await held, await rebuild

    running, held, _ = asyncio.run(main())
    assert len(running[-1].outputs[0].token_ids) == 24  # finished on the old engine, not cut short
    assert len(held[-1].outputs[0].token_ids) == 24  # served by the new one
    assert loop.engine is not old_engine and loop.engine.num_blocks == 8


def test_counters_carry_over_a_rebuild(loop, engine_config):
    def published(engine):
        loop._publish()
        return loop.last_snapshot

    asyncio.run(collect(loop, "before", "copy: abc -> "))
    assert loop.call(published).generation_tokens == 24
    loop.rebuild(lambda: LLMEngine(engine_config), lambda: None)
    assert loop.call(published).generation_tokens == 24
    asyncio.run(collect(loop, "after", "copy: abc -> "))
    assert loop.call(published).generation_tokens == 48


def test_a_failed_build_restores_the_old_configuration_and_raises(loop, engine_config):
    def bad():
        raise ValueError("num_gpu_blocks: does not fit")

    with pytest.raises(ValueError, match="num_gpu_blocks"):
        loop.rebuild(bad, lambda: LLMEngine(engine_config))
    out = asyncio.run(collect(loop, "after", "copy: abc -> "))
    assert len(out[-1].outputs[0].token_ids) == 24 and loop.engine.num_blocks > 8


def test_requests_still_running_after_the_drain_timeout_are_failed(loop, engine_config):
    very_long = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)

    async def main():
        running = asyncio.create_task(collect(loop, "long", "copy: abc -> ", very_long))
        await asyncio.sleep(0.1)
        await rebuild_in_thread(loop, lambda: LLMEngine(engine_config), lambda: None, drain_timeout_s=0.0)
        return await asyncio.gather(running, return_exceptions=True)

    (result,) = asyncio.run(main())
    assert isinstance(result, EngineDeadError) and "interrupted" in str(result)
    assert loop.engine.scheduler.stats().num_running == 0
