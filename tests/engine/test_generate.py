"""The engine against a naive full-recompute loop of the same weights."""
import pytest

from services.engine import LLM, SamplingParams
from services.model.reference import greedy_generate
from services.model.tasks import TASKS, eval_set

GREEDY = SamplingParams(temperature=0, max_tokens=24)


def mixed_prompts(n_per_task=3):
    prompts = [e.prompt for t in TASKS for e in eval_set(t)[:n_per_task]]
    # Long prompts: a preamble of other examples, as the training rows had.
    prompts.append(" ".join(e.prompt + e.answer for e in eval_set("story")[:4]) + "\nsort: qwerty -> ")
    prompts.append("copy: abc -> abc\n" * 9 + "reverse: hello -> ")
    return prompts


def naive(reference_model, tokenizer, prompts, max_tokens):
    return [greedy_generate(reference_model, tokenizer.encode(p), max_tokens, tokenizer.eos_token_id)
            for p in prompts]


@pytest.fixture(scope="module")
def expected(reference_model, tokenizer):
    return naive(reference_model, tokenizer, mixed_prompts(), GREEDY.max_tokens)


def token_ids(outputs):
    return [o.outputs[0].token_ids for o in outputs]


def test_greedy_output_equals_naive_full_recompute_for_mixed_length_prompts(model_path, expected):
    llm = LLM(model_path, dtype="float32")
    assert token_ids(llm.generate(mixed_prompts(), GREEDY)) == expected


def test_long_prompt_prefilled_in_chunks_gives_same_output(model_path, expected):
    llm = LLM(model_path, dtype="float32", max_num_batched_tokens=16, max_num_seqs=4)
    assert token_ids(llm.generate(mixed_prompts(), GREEDY)) == expected


def test_preemption_and_recompute_under_block_pressure_give_same_greedy_output(model_path, expected):
    llm = LLM(model_path, dtype="float32", num_gpu_blocks=40, block_size=8)
    outputs = llm.generate(mixed_prompts(), GREEDY)
    assert token_ids(outputs) == expected
    assert llm.llm_engine.scheduler.num_preemptions_total > 0
    assert any(o.metrics.num_preemptions for o in outputs)


def test_every_block_is_free_after_all_requests_finish(model_path):
    llm = LLM(model_path, num_gpu_blocks=64)
    llm.generate(mixed_prompts(), SamplingParams(temperature=0.8, max_tokens=12, seed=3))
    pool = llm.llm_engine.scheduler.kv_cache_manager.block_pool
    assert pool.num_free_blocks == pool.num_blocks


def test_prefix_hit_skips_prefill_and_keeps_output(model_path, reference_model, tokenizer):
    preamble = "story: the cat sees a dog. a red fox likes the hen.\n" * 2
    prompts = [preamble + "sort: dcba -> ", preamble + "copy: xyz -> "]
    llm = LLM(model_path, dtype="float32", block_size=8)
    first = llm.generate(prompts[0], GREEDY)[0]
    second = llm.generate(prompts[1], GREEDY)[0]
    assert first.metrics.num_cached_tokens == 0
    shared_blocks = len(tokenizer.encode(preamble)) // 8
    assert second.metrics.num_cached_tokens == shared_blocks * 8
    kv = llm.llm_engine.scheduler.kv_cache_manager
    assert kv.prefix_cache_hits == shared_blocks * 8
    assert second.outputs[0].token_ids == naive(reference_model, tokenizer, prompts[1:], 24)[0]


def test_fully_cached_prompt_recomputes_last_token_with_copy_on_write(model_path):
    prompt = "story: the cat sees a dog. a red fox likes the hen."  # <bos> + 52 chars, cut to 48
    llm = LLM(model_path, dtype="float32", block_size=8)
    ids = llm.get_tokenizer().encode(prompt)[:48]
    assert len(ids) % 8 == 0
    a = llm.generate([ids], GREEDY)[0]
    b = llm.generate([ids], GREEDY)[0]
    assert b.metrics.num_cached_tokens == len(ids) - 1
    assert a.outputs[0].token_ids == b.outputs[0].token_ids


def test_same_seed_gives_same_tokens_and_other_seeds_differ(model_path):
    # Batch-invariant numerics: alone and in a batch of six the logits are the same bits, so the seed
    # alone decides (without it, split-K follows the batch's row count and a near-tie can flip).
    llm = LLM(model_path, batch_invariant=True)
    prompts = ["story: the "] * 6
    params = [SamplingParams(temperature=1.0, top_p=0.95, max_tokens=30, seed=s) for s in (7, 7, 7, 8, 9, 10)]
    texts = [o.outputs[0].text for o in llm.generate(prompts, params)]
    assert texts[0] == texts[1] == texts[2]
    alone = llm.generate(prompts[0], params[0])[0].outputs[0].text
    assert alone == texts[0]
    assert len(set(texts[3:] + texts[:1])) > 1


def test_stop_string_ends_request_and_is_not_returned(model_path):
    llm = LLM(model_path)
    out = llm.generate("story: the cat ", SamplingParams(temperature=0, max_tokens=60, stop=["."]))[0]
    assert out.outputs[0].finish_reason == "stop"
    assert out.outputs[0].stop_reason == "."
    assert "." not in out.outputs[0].text and out.outputs[0].text


def test_a_generation_configs_extra_eos_id_ends_requests_that_do_not_ignore_eos(model_path):
    from services.model.paths import generation_config_path
    from services.model.tasks import eval_set
    story = eval_set("story")[0]  # "story: a " -> "red cat likes a dog. ...": id 73 is "e"
    plain, extra = LLM(model_path), LLM(model_path, generation_config=str(generation_config_path("instruct")))
    assert (plain.llm_engine.extra_eos_token_ids, extra.llm_engine.extra_eos_token_ids) == ((), (73,))
    greedy = SamplingParams(temperature=0, max_tokens=64)
    whole = plain.generate(story.prompt, greedy)[0].outputs[0]
    cut = extra.generate(story.prompt, greedy)[0].outputs[0]
    assert whole.finish_reason == "stop" and whole.stop_reason is None and "e" in whole.text[:-1]
    # the stop token stays in the text, as vLLM keeps a stop token that is not a special one
    assert (cut.text, cut.finish_reason, cut.stop_reason) == (whole.text[:whole.text.index("e") + 1], "stop", 73)
    ignoring = extra.generate(story.prompt, SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))[0]
    assert len(ignoring.outputs[0].token_ids) == 20 and ignoring.outputs[0].finish_reason == "length"


def test_a_generation_config_that_is_not_one_is_refused(tmp_path, model_path):
    from services.engine.config import EngineConfig
    with pytest.raises(ValueError, match="has no generation_config.json"):
        EngineConfig(model=model_path, generation_config=str(tmp_path))
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": ["e"]}')
    with pytest.raises(ValueError, match="eos_token_id must be a token id or a list of them"):
        EngineConfig(model=model_path, generation_config=str(tmp_path)).extra_eos_token_ids(2)


def test_ignore_eos_generates_exactly_max_tokens(model_path):
    llm = LLM(model_path)
    out = llm.generate("copy: ab -> ", SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))[0]
    assert len(out.outputs[0].token_ids) == 20
    assert out.outputs[0].finish_reason == "length"


def test_abort_frees_blocks_and_reports_abort(model_path):
    llm = LLM(model_path, num_gpu_blocks=64)
    engine = llm.llm_engine
    engine.add_request("a", "story: the ", SamplingParams(max_tokens=50, ignore_eos=True))
    engine.add_request("b", "copy: abc -> ", SamplingParams(max_tokens=50, ignore_eos=True))
    engine.step()
    engine.step()
    engine.abort_request("a")
    finished = {}
    while engine.has_unfinished_requests():
        for o in engine.step():
            if o.finished:
                finished[o.request_id] = o
    assert finished["a"].outputs[0].finish_reason == "abort"
    assert finished["b"].outputs[0].finish_reason == "length"
    pool = engine.scheduler.kv_cache_manager.block_pool
    assert pool.num_free_blocks == pool.num_blocks


def test_streaming_deltas_concatenate_to_the_final_text(model_path):
    llm = LLM(model_path)
    engine = llm.llm_engine
    engine.add_request("s", "story: a ", SamplingParams(temperature=0, max_tokens=40, stop=["fox"]))
    pieces, final = [], None
    while engine.has_unfinished_requests():
        for o in engine.step():
            pieces.append(o.delta_text)
            final = o
    assert "".join(pieces) == final.outputs[0].text


def test_snapshot_counts_prompt_and_generated_tokens(model_path):
    llm = LLM(model_path)
    outs = llm.generate(["copy: abc -> ", "sort: cba -> "], SamplingParams(temperature=0, max_tokens=8))
    snap = llm.llm_engine.snapshot()
    assert snap.prompt_tokens == sum(len(o.prompt_token_ids) for o in outs)
    assert snap.generation_tokens == sum(len(o.outputs[0].token_ids) for o in outs)
    assert snap.num_running == snap.num_waiting == 0
    assert snap.kv_cache_usage == 0.0
    assert 0 < snap.memory_used_bytes <= snap.memory_capacity_bytes
