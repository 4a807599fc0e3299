"""Activation headroom at peak batch, with the serving config (services/serve_config.yaml).

The KV pool is sized from a profiled step of short sequences; the SDPA
attention's gathered keys and values grow with running sequences x context,
so a peak of long requests needs the headroom that gpu_memory_utilization
leaves. The figures: 256 MiB capacity, 11.3 MB of bf16-emulated weights.
"""
import pytest

from services.engine import (
    LLM,
    DeviceOutOfMemoryError,
    EngineConfig,
    LLMEngine,
    SamplingParams,
)
from services.model.tasks import long_story_prompt

SERVE = dict(max_num_seqs=32, max_num_batched_tokens=512, max_model_len=1024)


def free_for_activations(engine: LLMEngine) -> int:
    plan = engine.memory_plan
    return plan.capacity_bytes - plan.weights_bytes - plan.kv_pool_bytes


def decode_step_bytes(engine: LLMEngine, num_seqs: int, context: int) -> int:
    return engine.runner.activation_bytes(num_seqs, num_seqs, context // engine.config.block_size, num_seqs)


@pytest.mark.parametrize("batch_invariant", [False, True])
def test_the_serving_configs_worst_step_fits_its_headroom(model_path, batch_invariant):
    engine = LLMEngine(EngineConfig(model=model_path, batch_invariant=batch_invariant, **SERVE))
    max_blocks = SERVE["max_model_len"] // engine.config.block_size
    worst = max(decode_step_bytes(engine, 32, SERVE["max_model_len"]),
                engine.runner.activation_bytes(512, 32, max_blocks, 32))  # a full budget beside 31 decodes
    assert worst < free_for_activations(engine)


@pytest.mark.parametrize("batch_invariant", [False, True])
def test_a_raised_max_num_seqs_admits_a_peak_whose_step_exceeds_the_headroom(model_path, batch_invariant):
    engine = LLMEngine(EngineConfig(model=model_path, batch_invariant=batch_invariant, **{**SERVE, "max_num_seqs": 256}))
    assert decode_step_bytes(engine, 32, 576) < free_for_activations(engine)
    assert decode_step_bytes(engine, 160, 576) > free_for_activations(engine)
    with pytest.raises(DeviceOutOfMemoryError, match="out of device memory"):
        engine.memory.reserve_step(decode_step_bytes(engine, 160, 576))


def test_a_peak_of_32_long_requests_runs_at_090_utilization_and_runs_out_of_memory_at_098(model_path):
    # 32 prompts of ~500 tokens; 40 output tokens keep the first ones decoding
    # until the last is prefilled, so all 32 decode together at the peak.
    prompts = [long_story_prompt(500, seed) for seed in range(32)]
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    default = LLM(model_path, **SERVE)
    default.generate(prompts, params)
    peak = default.llm_engine.memory.peak_activation_bytes
    raised = LLM(model_path, gpu_memory_utilization=0.98, **SERVE)
    assert free_for_activations(raised.llm_engine) < peak < free_for_activations(default.llm_engine)
    with pytest.raises(DeviceOutOfMemoryError, match="out of device memory"):
        raised.generate(prompts, params)
