"""Engine throughput: continuous batching vs one request at a time vs HF `generate`.

Same process, same weights (fp32), same workload: N requests with prompts of
32–256 tokens, each generating exactly M new tokens. Prints JSON. Also the cost
of batch-invariant mode: continuous batching with `batch_invariant` off and on,
interleaved (off, on, off, on; the best of each), since this machine is shared.

    python bench/engine_throughput.py --json
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.engine import LLM, SamplingParams  # noqa: E402
from services.model.paths import target_path  # noqa: E402
from services.model.tasks import MAKERS, TASKS  # noqa: E402


def workload(n: int, seed: int, tok) -> list[list[int]]:
    """Prompts of 32–256 tokens: task examples as preamble, then one task prompt."""
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        target_len = rng.randint(32, 256)
        ids: list[int] = []
        while True:
            ex = MAKERS[rng.choice(TASKS)](rng)
            piece = tok.encode(ex.prompt + ex.answer + "\n", add_special_tokens=False)
            if len(ids) + len(piece) + 1 > target_len:
                break
            ids += piece
        ids = [tok.bos_token_id] + ids
        ids += tok.encode("x" * (target_len - len(ids)), add_special_tokens=False)
        prompts.append(ids[:target_len])
    return prompts


def run_engine(llm: LLM, prompts, max_tokens: int, one_at_a_time: bool) -> tuple[int, float]:
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    t0 = time.perf_counter()
    if one_at_a_time:
        outs = [llm.generate([p], params)[0] for p in prompts]
    else:
        outs = llm.generate(prompts, params)
    elapsed = time.perf_counter() - t0
    return sum(len(o.outputs[0].token_ids) for o in outs), elapsed


def run_transformers(path: str, prompts, max_tokens: int, batch_size: int, pad_id: int) -> tuple[int, float]:
    import transformers

    model = transformers.LlamaForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    tokens = 0
    for warm in (True, False):
        t0 = time.perf_counter()
        tokens = _hf_pass(model, prompts, 4 if warm else max_tokens, batch_size, pad_id)
    return tokens, time.perf_counter() - t0


def _hf_pass(model, prompts, max_tokens: int, batch_size: int, pad_id: int) -> int:
    tokens = 0
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i:i + batch_size]
        width = max(len(p) for p in chunk)
        ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in chunk])  # left padding
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_tokens,
                                 min_new_tokens=max_tokens, do_sample=False, pad_token_id=pad_id)
        tokens += (out.shape[1] - width) * len(chunk)
    return tokens


def batch_invariant_cost(path: str, prompts, max_tokens: int, max_num_seqs: int) -> dict:
    """Tokens/s of continuous batching without and with batch-invariant mode, side by side."""
    engines = {mode: LLM(path, dtype="float32", max_num_seqs=max_num_seqs, max_num_batched_tokens=2048,
                         batch_invariant=mode == "on") for mode in ("off", "on")}
    best = {mode: 0.0 for mode in engines}
    for mode, llm in engines.items():
        run_engine(llm, prompts, 4, one_at_a_time=False)  # warm-up
    for _ in range(2):
        for mode, llm in engines.items():
            tokens, seconds = run_engine(llm, prompts, max_tokens, one_at_a_time=False)
            best[mode] = max(best[mode], tokens / seconds)
    return {"tokens_per_s_off": round(best["off"], 1), "tokens_per_s_on": round(best["on"], 1),
            "on_over_off": round(best["on"] / best["off"], 3)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--hf-batch-size", type=int, default=16, help="static batch size for transformers")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    path = str(target_path())
    llm = LLM(path, dtype="float32", max_num_seqs=a.requests, max_num_batched_tokens=2048)
    tok = llm.get_tokenizer()
    prompts = workload(a.requests, a.seed, tok)
    # Warm-up, the same for every contender: one untimed pass over the whole
    # workload's prompts with a few new tokens (allocator and page-fault costs).
    run_engine(llm, prompts, 4, one_at_a_time=False)
    cb_tokens, cb_s = run_engine(llm, prompts, a.max_tokens, one_at_a_time=False)
    one_tokens, one_s = run_engine(llm, prompts, a.max_tokens, one_at_a_time=True)
    hf_tokens, hf_s = run_transformers(path, prompts, a.max_tokens, a.hf_batch_size, tok.pad_token_id)
    result = {
        "workload": {"requests": a.requests, "prompt_tokens_min": min(map(len, prompts)),
                     "prompt_tokens_max": max(map(len, prompts)), "new_tokens": a.max_tokens,
                     "threads": a.threads, "dtype": "float32"},
        "continuous_batching": {"tokens": cb_tokens, "seconds": round(cb_s, 3), "tokens_per_s": round(cb_tokens / cb_s, 1)},
        "one_at_a_time": {"tokens": one_tokens, "seconds": round(one_s, 3), "tokens_per_s": round(one_tokens / one_s, 1)},
        "transformers_generate": {"tokens": hf_tokens, "seconds": round(hf_s, 3), "batch_size": a.hf_batch_size,
                                  "tokens_per_s": round(hf_tokens / hf_s, 1)},
    }
    result["batch_invariant_cost"] = batch_invariant_cost(path, prompts, a.max_tokens, a.requests)
    result["ratio_vs_one_at_a_time"] = round((cb_tokens / cb_s) / (one_tokens / one_s), 2)
    result["ratio_vs_transformers"] = round((cb_tokens / cb_s) / (hf_tokens / hf_s), 2)
    print(json.dumps(result, indent=None if a.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
