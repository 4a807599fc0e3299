"""Lossless verification of draft tokens (Leviathan et al., Chen et al.).

Draft token d_i is accepted with probability min(1, p_i(d_i) / q_i(d_i)); at
the first rejection a token is drawn from the residual max(0, p_i - q_i); when
all k are accepted a bonus token is drawn from p_{k+1}. The accepted sequence
is distributed exactly as sampling from the target alone. For greedy requests
p and q are one-hot, so this reduces to "accept while the draft matches the
target's argmax", and the output equals non-speculative greedy decoding.
"""
from __future__ import annotations

import torch

from services.engine.sampler import draw


def verify(draft_tokens: list[int], draft_probs: torch.Tensor, target_probs: torch.Tensor,
           generator: torch.Generator, greedy: bool) -> tuple[list[int], int]:
    """Returns (tokens to append, number of draft tokens accepted).

    draft_probs: [k, V] (the distributions the drafts were drawn from);
    target_probs: [k + 1, V]. Tokens appended = accepted drafts + one more.
    """
    k = len(draft_tokens)
    assert draft_probs.shape[0] == k and target_probs.shape[0] == k + 1
    out: list[int] = []
    for i, d in enumerate(draft_tokens):
        if greedy:
            target_tok = int(torch.argmax(target_probs[i]))
            if d != target_tok:
                return out + [target_tok], i
            out.append(d)
            continue
        p, q = float(target_probs[i, d]), float(draft_probs[i, d])
        u = float(torch.rand((), generator=generator))
        if q > 0 and u < min(1.0, p / q):
            out.append(d)
            continue
        residual = torch.clamp(target_probs[i] - draft_probs[i], min=0)
        if float(residual.sum()) <= 0:  # p == q: any rejection resamples from p itself
            residual = target_probs[i]
        return out + [draw(residual, generator)], i
    last = target_probs[k]
    bonus = int(torch.argmax(last)) if greedy else draw(last, generator)
    return out + [bonus], k
