"""The replica's engine loop, without Ray: batching across callers, aborts, crashes, wedges, knobs."""
import asyncio
import dataclasses
import time

import pytest

from services.engine import EngineConfig, LLMEngine, SamplingParams
from services.model.paths import target_path
from services.serve.config import ReplicaKnobs
from services.serve.engine_loop import EngineDeadError, EngineLoop, EngineWedgedError
from services.serve.knobs import apply_knobs

LONG = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


@pytest.fixture(scope="module")
def engine_config():
    return EngineConfig(model=str(target_path()), max_num_seqs=8, max_num_batched_tokens=256, max_model_len=256,
                        torch_threads=1)


@pytest.fixture
def loop(engine_config):
    engine = LLMEngine(engine_config)
    loop = EngineLoop(engine, None, publish_interval_s=0.05).start()
    yield loop
    loop.stop()


async def collect(loop, rid, prompt, params=LONG):
    stream = loop.add_request(rid, prompt, params)
    await stream.accepted()
    outs = [out async for out in stream]
    return outs


def test_requests_arriving_at_different_times_share_steps(loop):
    sizes = []
    step = loop.engine.step

    def counting_step():
        outs = step()
        sizes.append(len(outs))
        return outs

    loop.engine.step = counting_step

    async def main():
        first = asyncio.create_task(collect(loop, "a", "copy: abc -> "))
        await asyncio.sleep(0.05)
        second = asyncio.create_task(collect(loop, "b", "sort: cba -> "))
        return await first, await second

    a, b = asyncio.run(main())
    assert a[-1].finished and b[-1].finished
    assert "".join(o.delta_text for o in a) == a[-1].outputs[0].text
    assert len(a[-1].outputs[0].token_ids) == 24 and max(sizes) == 2


def test_an_abort_ends_the_stream_and_frees_the_blocks(loop):
    async def main():
        stream = loop.add_request("x", "copy: abcdef -> ", SamplingParams(temperature=0, max_tokens=200,
                                                                           ignore_eos=True))
        await stream.accepted()
        await stream.__anext__()
        loop.abort("x")
        return [out async for out in stream]

    outs = asyncio.run(main())
    assert outs[-1].finished and outs[-1].outputs[0].finish_reason == "abort"
    assert loop.call(lambda e: e.scheduler.kv_cache_manager.usage) == 0


def test_a_bad_request_fails_alone(loop):
    async def main():
        stream = loop.add_request("big", "a" * 400, LONG)
        with pytest.raises(ValueError, match="max_model_len"):
            await stream.accepted()
        return await collect(loop, "ok", "add: 1+2 -> ")

    assert asyncio.run(main())[-1].finished


def test_a_step_that_raises_kills_the_loop_and_fails_health(loop):
    def boom():
        raise RuntimeError("device fell off the bus")

    loop.engine.step = boom

    async def main():
        with pytest.raises(EngineDeadError, match="device fell off"):
            await collect(loop, "c", "copy: a -> ")

    asyncio.run(main())
    with pytest.raises(EngineDeadError):
        loop.check_health()

    async def later():
        loop.add_request("d", "copy: a -> ", LONG)

    with pytest.raises(EngineDeadError):
        asyncio.run(later())


def test_a_step_that_hangs_is_reported_wedged(loop):
    loop.wedge_timeout_s = 0.2
    step = loop.engine.step

    def slow():
        time.sleep(0.6)
        return step()

    loop.engine.step = slow

    async def main():
        stream = loop.add_request("w", "copy: a -> ", SamplingParams(temperature=0, max_tokens=2))
        await stream.accepted()
        await asyncio.sleep(0.45)
        with pytest.raises(EngineWedgedError):
            loop.check_health()
        return [o async for o in stream]

    assert asyncio.run(main())[-1].finished
    loop.check_health()  # healthy again once the step returns


def test_requests_that_no_longer_fit_a_leaking_kv_cache_are_reported_wedged(engine_config):
    # Aborted requests keep their blocks (abort_mode "deferred"): once the leak has eaten the
    # pool, a new request can never be scheduled, and the replica must fail its health check.
    config = dataclasses.replace(engine_config, num_gpu_blocks=8, abort_mode="deferred")
    loop = EngineLoop(LLMEngine(config), None, publish_interval_s=0.05, wedge_timeout_s=0.3).start()
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)

    def prompt(rid):  # about 60 tokens (4 blocks), none shared with another request's
        return f"copy: {rid * 48} -> "

    async def abort_after_first_token(rid):
        stream = loop.add_request(rid, prompt(rid), params)
        await stream.accepted()
        await stream.__anext__()
        loop.abort(rid)
        return [out async for out in stream]

    async def main():
        await abort_after_first_token("a")
        await abort_after_first_token("b")  # 8 blocks leaked by now
        stream = loop.add_request("c", prompt("c"), params)
        await stream.accepted()
        await asyncio.sleep(0.6)
        assert loop.call(lambda e: e.scheduler.kv_cache_manager.usage) == 1.0
        with pytest.raises(EngineWedgedError, match="no request could be scheduled"):
            loop.check_health()
        # Its waiting request fails at once (a graceful stop would otherwise wait for it forever).
        with pytest.raises(EngineDeadError, match="no request could be scheduled"):
            [out async for out in stream]
        with pytest.raises(EngineDeadError):
            loop.check_health()

    try:
        asyncio.run(main())
    finally:
        loop.stop()


def test_knobs_change_the_scheduler_and_none_restores_the_deployed_value(loop, engine_config):
    loop.call(lambda e: apply_knobs(e, ReplicaKnobs(max_num_seqs=2, enable_prefix_caching=False), engine_config))
    assert loop.call(lambda e: (e.scheduler.config.max_num_seqs, e.scheduler.kv_cache_manager.enable_prefix_caching)) \
        == (2, False)
    loop.call(lambda e: apply_knobs(e, ReplicaKnobs(), engine_config))
    assert loop.call(lambda e: (e.scheduler.config.max_num_seqs, e.scheduler.kv_cache_manager.enable_prefix_caching)) \
        == (8, True)


def test_knobs_that_break_the_token_budget_are_refused(loop, engine_config):
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        loop.call(lambda e: apply_knobs(e, ReplicaKnobs(max_num_seqs=64, max_num_batched_tokens=32), engine_config))
