"""Seeded sampling: greedy, temperature, top-k, top-p.

Every request owns a `torch.Generator`; a draw uses only that generator, so a
seeded request gets the same tokens whatever else is in the batch. Sampling is
inverse-CDF on one uniform per draw, which the rejection sampler shares.
"""
from __future__ import annotations

import torch

from services.engine.sampling_params import SamplingParams


def processed_probs(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """Distributions the sampler draws from. logits: [N, V] -> probs [N, V] (fp32).

    Greedy rows become one-hot on the argmax, so the rejection sampler treats
    greedy and random rows alike.
    """
    logits = logits.float()
    n, v = logits.shape
    temps = torch.tensor([p.temperature if not p.greedy else 1.0 for p in params])
    probs = torch.softmax(logits / temps[:, None], dim=-1)
    for i, p in enumerate(params):
        if p.greedy:
            row = torch.zeros(v)
            row[int(torch.argmax(logits[i]))] = 1.0
            probs[i] = row
    needs_filter = [i for i, p in enumerate(params) if not p.greedy and (p.top_k > 0 or p.top_p < 1)]
    if needs_filter:
        idx = torch.tensor(needs_filter)
        probs[idx] = _top_k_top_p(probs[idx], [params[i] for i in needs_filter])
    return probs


def _top_k_top_p(probs: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    # probs: [M, V]. Top-p keeps the smallest prefix of the sorted distribution
    # whose mass reaches p (the token that crosses p is kept).
    sorted_p, order = torch.sort(probs, dim=-1, descending=True)
    v = probs.shape[-1]
    ranks = torch.arange(v)[None, :]
    top_k = torch.tensor([p.top_k if p.top_k > 0 else v for p in params])[:, None]
    top_p = torch.tensor([float(p.top_p) for p in params])[:, None]
    mass_before = torch.cumsum(sorted_p, dim=-1) - sorted_p
    keep = (ranks < top_k) & (mass_before < top_p)
    keep[:, 0] = True
    filtered = torch.where(keep, sorted_p, torch.zeros_like(sorted_p))
    out = torch.zeros_like(probs).scatter_(-1, order, filtered)
    return out / out.sum(dim=-1, keepdim=True)


def draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One token from probs [V] by inverse CDF with one uniform from `generator`."""
    return inverse_cdf(probs, float(torch.rand((), generator=generator)))


def inverse_cdf(probs: torch.Tensor, u: float) -> int:
    cdf = torch.cumsum(probs, dim=0)
    idx = int(torch.searchsorted(cdf, u * cdf[-1], right=True))
    # Guard the top end against rounding, and never pick a zero-mass token.
    idx = min(idx, probs.shape[0] - 1)
    while probs[idx] == 0 and idx > 0:
        idx -= 1
    return idx


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator],
           shared: torch.Generator | None = None) -> list[int]:
    """One token per row. logits: [N, V].

    With `shared` (the engine's `sampler_impl="batched"`), the uniforms of all
    random rows come from one draw on that engine-wide generator and
    `generators` is not used: per-request seeds have no effect.
    """
    greedy = all(p.greedy for p in params)
    if greedy:
        return torch.argmax(logits, dim=-1).tolist()
    probs = processed_probs(logits, params)
    batched = shared is not None
    uniforms = iter(torch.rand(sum(not p.greedy for p in params), generator=shared).tolist()) if batched else None
    out = []
    for i, p in enumerate(params):
        if p.greedy:
            out.append(int(torch.argmax(probs[i])))
        else:
            out.append(inverse_cdf(probs[i], next(uniforms)) if batched else draw(probs[i], generators[i]))
    return out
