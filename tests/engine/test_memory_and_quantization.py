"""Device-memory budget and quantized paths."""
import pytest

from services.engine import LLM, DeviceOutOfMemoryError, SamplingParams
from services.model.tasks import eval_set


def test_kv_pool_is_sized_from_the_memory_budget(model_path):
    small = LLM(model_path, device_memory_capacity=64 * 2**20).llm_engine
    large = LLM(model_path, device_memory_capacity=128 * 2**20).llm_engine
    assert large.num_blocks > small.num_blocks > 0
    plan = small.memory_plan
    assert plan.weights_bytes + plan.profiled_activation_bytes + plan.kv_pool_bytes <= 0.9 * plan.capacity_bytes
    assert plan.kv_pool_bytes == small.runner.kv_pool_bytes()


def test_a_step_beyond_the_capacity_raises_out_of_memory(model_path):
    # The KV pool is forced to fill the device; a big prefill step has no headroom.
    probe = LLM(model_path).llm_engine
    block = probe.memory_plan.kv_block_bytes
    capacity = probe.memory_plan.weights_bytes + 40 * block + 1024
    llm = LLM(model_path, device_memory_capacity=capacity, num_gpu_blocks=40, max_num_seqs=8)
    with pytest.raises(DeviceOutOfMemoryError, match="out of device memory"):
        llm.generate(["copy: " + "ab" * 100 + " -> "] * 2, SamplingParams(max_tokens=4))


def test_too_little_memory_for_any_kv_block_is_a_config_error(model_path):
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        LLM(model_path, device_memory_capacity=8 * 2**20)


def accuracy(llm, task, n=40):
    from services.model.tasks import check
    ex = eval_set(task, n)
    outs = llm.generate([e.prompt for e in ex], SamplingParams(temperature=0, max_tokens=32))
    return sum(check(e, o.outputs[0].text) for e, o in zip(ex, outs)) / n


def probe_logits(model_path, **kw):
    from services.engine import LLM
    llm = LLM(model_path, dtype="float32", batch_invariant=True, **kw)
    engine, rows = llm.llm_engine, []
    original = engine._sample

    def recording(plan, logits, r):
        rows.append(logits.clone())
        return original(plan, logits, r)

    engine._sample = recording
    llm.generate([e.prompt for e in eval_set("add", 8)], SamplingParams(temperature=0, max_tokens=1))
    return rows[0]


def test_weight_quantization_error_grows_as_granularity_coarsens(model_path):
    full = probe_logits(model_path)
    err = {name: (probe_logits(model_path, quantization=q, quantization_granularity=g) - full).abs().mean().item()
           for name, q, g in [("int8-channel", "int8", "per-channel"), ("int4-group", "int4", "per-group"),
                              ("int4-tensor", "int4", "per-tensor")]}
    assert 0 < err["int8-channel"] < err["int4-group"] < err["int4-tensor"]


def test_int8_weights_keep_accuracy(model_path):
    full = accuracy(LLM(model_path), "add")
    assert accuracy(LLM(model_path, quantization="int8", quantization_granularity="per-channel"), "add") >= full - 0.05


def test_int8_kv_cache_with_calibrated_scale_keeps_accuracy_and_a_bad_scale_loses_it(model_path):
    full = accuracy(LLM(model_path), "reverse")
    good = LLM(model_path, kv_cache_dtype="int8")
    assert good.llm_engine.kv_scale > 0
    assert accuracy(good, "reverse") >= full - 0.05
    bad = accuracy(LLM(model_path, kv_cache_dtype="int8", kv_cache_scale=good.llm_engine.kv_scale / 40), "reverse")
    assert bad < full - 0.2
