"""Naive greedy decoding: the whole sequence is recomputed every step.

No KV cache, no batching, no kernels: the slowest correct answer, against
which the engine's output is checked.
"""
from __future__ import annotations

import torch

from services.model.llama import LlamaForCausalLM


@torch.no_grad()
def greedy_generate(model: LlamaForCausalLM, prompt_ids: list[int], max_new_tokens: int,
                    eos_token_id: int | None) -> list[int]:
    ids = list(prompt_ids)
    out: list[int] = []
    for _ in range(max_new_tokens):
        logits = model(torch.tensor([ids]))[0, -1]
        tok = int(torch.argmax(logits))
        out.append(tok)
        if tok == eos_token_id:
            break
        ids.append(tok)
    return out

