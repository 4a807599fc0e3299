"""Speculative decoding with the shipped draft model is lossless."""
from scipy import stats

from services.engine import LLM, SamplingParams
from services.model.tasks import TASKS, eval_set


def prompts():
    return [e.prompt for t in TASKS for e in eval_set(t)[:4]]


def test_greedy_output_is_identical_with_and_without_speculation(model_path, draft_model_path):
    params = SamplingParams(temperature=0, max_tokens=32)
    plain = LLM(model_path, dtype="float32", batch_invariant=True).generate(prompts(), params)
    spec_llm = LLM(model_path, dtype="float32", batch_invariant=True,
                   speculative_model=draft_model_path, num_speculative_tokens=3)
    spec = spec_llm.generate(prompts(), params)
    assert [o.outputs[0].token_ids for o in spec] == [o.outputs[0].token_ids for o in plain]
    s = spec_llm.llm_engine.stats
    assert s.spec_decode_num_drafts_total > 0
    assert 0 < s.spec_decode_num_accepted_tokens_total <= s.spec_decode_num_draft_tokens_total


def test_sampled_outputs_follow_the_targets_distribution(model_path, draft_model_path):
    """Chi-square two-sample test on the first three sampled characters of a story."""
    n = 400
    params = [SamplingParams(temperature=1.0, max_tokens=3, seed=1000 + i) for i in range(n)]
    prompt = ["story: the cat sees "] * n
    plain = LLM(model_path).generate(prompt, params)
    spec = LLM(model_path, speculative_model=draft_model_path, num_speculative_tokens=2).generate(prompt, params)
    a = [o.outputs[0].text for o in plain]
    b = [o.outputs[0].text for o in spec]
    keys = sorted(set(a) | set(b))
    table = [[a.count(k) for k in keys], [b.count(k) for k in keys]]
    # Merge rare outcomes so expected counts are large enough for chi-square.
    common = [i for i, k in enumerate(keys) if table[0][i] + table[1][i] >= 10]
    rare = [i for i in range(len(keys)) if i not in common]
    rows = [[r[i] for i in common] + [sum(r[i] for i in rare)] for r in table]
    if not rare:
        rows = [r[:-1] for r in rows]
    assert stats.chi2_contingency(rows).pvalue > 1e-3


def test_spec_decode_frees_every_block(model_path, draft_model_path):
    llm = LLM(model_path, speculative_model=draft_model_path, num_speculative_tokens=3, num_gpu_blocks=80)
    llm.generate(prompts(), SamplingParams(temperature=0.7, max_tokens=20, seed=5))
    pool = llm.llm_engine.scheduler.kv_cache_manager.block_pool
    assert pool.num_free_blocks == pool.num_blocks


def acceptance_rate(model_path, draft, n_per_task: int = 4) -> float:
    llm = LLM(model_path, speculative_model=draft, num_speculative_tokens=3)
    llm.generate(prompts_per_task(n_per_task), SamplingParams(temperature=0, max_tokens=48))
    s = llm.llm_engine.stats
    return s.spec_decode_num_accepted_tokens_total / s.spec_decode_num_draft_tokens_total


def prompts_per_task(n: int) -> list[str]:
    return [e.prompt for t in TASKS for e in eval_set(t, n)]


def test_the_early_draft_is_accepted_far_less_often_than_the_shipped_draft(
        model_path, draft_model_path, early_draft_model_path):
    shipped = acceptance_rate(model_path, draft_model_path)
    early = acceptance_rate(model_path, early_draft_model_path)
    print(f"acceptance with k=3: shipped draft {shipped:.2f}, early draft {early:.2f}")
    assert shipped > 0.8 and early < 0.5


def test_speculation_with_the_early_draft_is_still_lossless(model_path, early_draft_model_path):
    params = SamplingParams(temperature=0, max_tokens=24)
    plain = LLM(model_path, dtype="float32", batch_invariant=True).generate(prompts(), params)
    spec = LLM(model_path, dtype="float32", batch_invariant=True, speculative_model=early_draft_model_path,
               num_speculative_tokens=3).generate(prompts(), params)
    assert [o.outputs[0].token_ids for o in spec] == [o.outputs[0].token_ids for o in plain]
