"""Engine switches that a replica can be rebuilt with (dataclasses.replace on its
EngineConfig): the attention kernel, the abort path, the sampler, dtype and
the KV pool size. Each one is a real code path, checked end to end."""
import dataclasses

import pytest

from kernels.paged_attention import paged_attention_ref
from services.engine import LLM, EngineConfig, LLMEngine, SamplingParams
from services.model.tasks import eval_set


def engine(model_path, **overrides) -> LLMEngine:
    return LLMEngine(EngineConfig(model=model_path, **overrides))


def rebuilt(eng: LLMEngine, **changes) -> LLMEngine:
    """What the serving layer does for a per-replica override."""
    return LLMEngine(dataclasses.replace(eng.config, **changes))


@pytest.mark.parametrize("field, value", [("attention_impl", "flash"), ("abort_mode", "lazy"),
                                          ("sampler_impl", "fast")])
def test_unknown_switch_values_are_refused_naming_the_field(model_path, field, value):
    with pytest.raises(ValueError, match=field):
        EngineConfig(model=model_path, **{field: value})


def test_paged_attention_impl_runs_the_reference_kernel_and_generates_the_same_tokens(model_path):
    base = engine(model_path, dtype="float32", batch_invariant=True)
    paged = rebuilt(base, attention_impl="paged")
    assert paged.runner._attention is paged_attention_ref
    assert base.runner._attention is not paged_attention_ref
    prompts = [e.prompt for e in eval_set("reverse", 6)]
    params = SamplingParams(temperature=0, max_tokens=12)
    fast, ref = (LLM.from_engine(eng).generate(prompts, params) for eng in (base, paged))
    assert [o.outputs[0].token_ids for o in fast] == [o.outputs[0].token_ids for o in ref]


def run_and_abort(eng: LLMEngine, rid: str, prompt: str) -> None:
    eng.add_request(rid, prompt, SamplingParams(max_tokens=40, ignore_eos=True))
    for _ in range(3):  # prefill and two decode steps
        eng.step()
    eng.abort_request(rid)
    while eng.has_unfinished_requests():
        eng.step()


def test_deferred_abort_mode_leaks_kv_blocks_with_every_abort(model_path):
    eng = engine(model_path, abort_mode="deferred", num_gpu_blocks=64)
    usage = []
    for i, e in enumerate(eval_set("copy", 4)):
        run_and_abort(eng, f"r{i}", e.prompt)
        usage.append(eng.snapshot().kv_cache_usage)
    assert 0 < usage[0] < usage[1] < usage[2] < usage[3]
    assert eng.snapshot().num_running == 0


def test_inline_abort_mode_returns_kv_usage_to_zero_after_every_abort(model_path):
    eng = engine(model_path, num_gpu_blocks=64)
    for i, e in enumerate(eval_set("copy", 4)):
        run_and_abort(eng, f"r{i}", e.prompt)
        assert eng.snapshot().kv_cache_usage == 0.0


def seeded_samples(llm: LLM, repeats: int = 3) -> list[tuple[int, ...]]:
    params = SamplingParams(temperature=1.0, max_tokens=24, seed=1234)
    return [tuple(llm.generate("story: the ", params)[0].outputs[0].token_ids) for _ in range(repeats)]


def test_default_sampler_repeats_a_seeded_request_exactly_alone_and_in_a_batch(model_path):
    llm = LLM(model_path)
    alone = seeded_samples(llm)
    assert len(set(alone)) == 1
    others = [SamplingParams(temperature=1.0, max_tokens=24) for _ in range(5)]
    batch = llm.generate(["story: the "] + [e.prompt for e in eval_set("story", 5)],
                         [SamplingParams(temperature=1.0, max_tokens=24, seed=1234)] + others)
    assert tuple(batch[0].outputs[0].token_ids) == alone[0]


def test_batched_sampler_ignores_the_request_seed_so_seeded_repeats_differ(model_path):
    assert len(set(seeded_samples(LLM(model_path, sampler_impl="batched")))) == 3


def test_batched_sampler_keeps_greedy_requests_deterministic(model_path):
    llm = LLM(model_path, sampler_impl="batched")
    params = SamplingParams(temperature=0, max_tokens=16)
    assert len({tuple(llm.generate("story: a red ", params)[0].outputs[0].token_ids) for _ in range(3)}) == 1


def test_float32_and_bfloat16_replicas_give_different_greedy_stories(model_path):
    prompts = [e.prompt for e in eval_set("story", 24)]
    params = SamplingParams(temperature=0, max_tokens=48)
    bf16 = engine(model_path, batch_invariant=True)
    texts = {}
    for name, eng in (("bf16", bf16), ("fp32", rebuilt(bf16, dtype="float32"))):
        texts[name] = [o.outputs[0].text for o in LLM.from_engine(eng).generate(prompts, params)]
    differ = sum(a != b for a, b in zip(texts["bf16"], texts["fp32"])) / len(prompts)
    print(f"greedy story outputs differing fp32 vs bf16: {differ:.0%}")
    assert differ >= 0.2


def test_a_replica_rebuilt_with_few_gpu_blocks_preempts_under_load(model_path):
    base = engine(model_path)
    small = rebuilt(base, num_gpu_blocks=12)
    assert (base.num_blocks, small.num_blocks) == (base.num_blocks, 12) and base.num_blocks > 100
    LLM.from_engine(small).generate([e.prompt for e in eval_set("story", 8)], SamplingParams(temperature=0, max_tokens=40))
    assert small.snapshot().num_preemptions > 0
