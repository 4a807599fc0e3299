import pytest

from services.engine import EngineConfig, SamplingParams


@pytest.mark.parametrize("field,value", [
    ("block_size", 0), ("max_num_seqs", -1), ("max_num_batched_tokens", 0), ("gpu_memory_utilization", 1.5),
    ("gpu_memory_utilization", 0), ("num_gpu_blocks", 0), ("dtype", "float8"), ("quantization", "int3"),
    ("quantization_granularity", "per-row"), ("kv_cache_dtype", "fp4"), ("kernel_backend", "cuda"),
    ("num_speculative_tokens", -1), ("enable_prefix_caching", "yes"), ("batch_invariant", 1),
    ("kv_cache_scale", -0.5), ("device", "tpu"),
])
def test_bad_engine_config_raises_value_error_naming_the_field(model_path, field, value):
    with pytest.raises(ValueError, match=field):
        EngineConfig(model=model_path, **{field: value})


def test_speculative_tokens_without_a_draft_model_are_refused(model_path):
    with pytest.raises(ValueError, match="speculative_model"):
        EngineConfig(model=model_path, num_speculative_tokens=2)


def test_missing_model_directory_is_refused(tmp_path):
    with pytest.raises(ValueError, match="model"):
        EngineConfig(model=str(tmp_path / "nope"))


@pytest.mark.parametrize("field,value", [
    ("temperature", -1), ("top_p", 0), ("top_p", 1.5), ("top_k", -2), ("max_tokens", 0), ("seed", "x"),
])
def test_bad_sampling_params_raise_value_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


def test_prompt_longer_than_max_model_len_is_refused(model_path):
    from services.engine import LLM
    llm = LLM(model_path, max_model_len=64)
    with pytest.raises(ValueError, match="max_model_len"):
        llm.generate("copy: " + "a" * 80 + " -> ", SamplingParams(max_tokens=4))
    assert not llm.llm_engine.has_unfinished_requests()
