"""Per-task exact-match accuracy (greedy, through the engine) and draft agreement.

    python -m services.model.evaluate --json
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

from services.engine import LLM, SamplingParams
from services.model.llama import load_pretrained
from services.model.paths import draft_path, target_path
from services.model.reference import greedy_generate
from services.model.tasks import TASKS, check, eval_set
from services.model.tokenizer import CharTokenizer


def task_accuracy(model: str, n: int, **engine_config) -> dict[str, float]:
    llm = LLM(model, **engine_config)
    params = SamplingParams(temperature=0, max_tokens=64)
    scores = {}
    for task in TASKS:
        examples = eval_set(task, n)
        outs = llm.generate([e.prompt for e in examples], params)
        scores[task] = sum(check(e, o.outputs[0].text) for e, o in zip(examples, outs)) / len(examples)
    return scores


@torch.no_grad()
def draft_agreement(target: str, draft: str, n: int) -> float:
    """Share of answer positions where the draft's greedy next token equals the
    target's, teacher-forced on the target's own greedy continuation."""
    tok = CharTokenizer.from_pretrained(target)
    t_model, d_model = load_pretrained(target), load_pretrained(draft)
    agree = total = 0
    for task in TASKS:
        for ex in eval_set(task, n):
            prompt = tok.encode(ex.prompt)
            cont = greedy_generate(t_model, prompt, 64, tok.eos_token_id)
            seq = torch.tensor([prompt + cont])
            start = len(prompt) - 1  # the position predicting the first answer token
            t_next = t_model(seq)[0, start:start + len(cont)].argmax(-1)
            d_next = d_model(seq)[0, start:start + len(cont)].argmax(-1)
            agree += int((t_next == d_next).sum())
            total += len(cont)
    return agree / total


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Evaluate the shipped models.")
    p.add_argument("--model", default=str(target_path()))
    p.add_argument("--draft", default=str(draft_path()))
    p.add_argument("-n", type=int, default=200, help="eval examples per task")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    a = p.parse_args(argv)
    torch.set_num_threads(2)
    result = {
        "target": task_accuracy(a.model, a.n, dtype="float32"),
        "target_bf16": task_accuracy(a.model, a.n),
        "draft": task_accuracy(a.draft, a.n, dtype="float32"),
        "draft_agreement": draft_agreement(a.model, a.draft, max(10, a.n // 4)),
    }
    result["pass"] = min(v for k, v in result["target"].items()) >= 0.9 and result["draft_agreement"] >= 0.6
    if a.json:
        print(json.dumps(result, sort_keys=True))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
