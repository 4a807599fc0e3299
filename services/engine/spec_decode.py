"""Draft-model proposals for speculative decoding.

The draft keeps its own KV cache indexed by the target's block tables (same
block ids, same slots), so it needs no allocator of its own. After each step
it catches up on tokens it has not seen (prefill chunks, the newest sampled
token, drafts the target accepted) and then proposes k tokens for every
decoding request, one single-token forward per draft position.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from services.engine.model_runner import ForwardBatch, ModelRunner, SeqSlice
from services.engine.sampler import draw, processed_probs


@dataclass
class Proposal:
    token_ids: list[int]
    probs: torch.Tensor  # [k, V] distributions the drafts were drawn from


@dataclass
class DraftWork:
    """One request's share of a draft forward: catch up, optionally propose."""
    request_id: str
    token_ids: list[int]       # all known tokens of the request
    start: int                 # first position the draft has not computed
    block_table: list[int]
    propose: bool              # decoding (target sampled): propose k tokens
    params: object
    generator: torch.Generator


class DraftProposer:
    def __init__(self, runner: ModelRunner, num_speculative_tokens: int, block_size: int):
        self.runner, self.k, self.block_size = runner, num_speculative_tokens, block_size
        self.num_computed: dict[str, int] = {}  # request id -> positions with valid draft KV

    def forget(self, request_id: str) -> None:
        self.num_computed.pop(request_id, None)

    def reset(self, request_id: str) -> None:
        self.num_computed[request_id] = 0

    def computed(self, request_id: str) -> int:
        return self.num_computed.get(request_id, 0)

    def accept(self, request_id: str, num_accepted: int) -> None:
        """After verification. The draft fed drafts 1..k-1 at their true positions, so
        the accepted ones among them already have valid draft KV."""
        if request_id in self.num_computed:
            self.num_computed[request_id] += min(num_accepted, self.k - 1)

    def _batch(self, rows: list[tuple[list[int], int, list[int]]]) -> ForwardBatch:
        """rows: (token ids to feed, first position, block table); logits of each last token."""
        seqs = [SeqSlice(tokens, start, table, 1) for tokens, start, table in rows]
        return ForwardBatch.build(seqs, self.block_size, self.runner.numerics.device)

    def run(self, work: list[DraftWork]) -> dict[str, Proposal]:
        if not work:
            return {}
        rows = [(w.token_ids[w.start:], w.start, w.block_table) for w in work]
        logits = self.runner.forward(self._batch(rows))  # [B, V]
        for w in work:
            self.num_computed[w.request_id] = len(w.token_ids)
        proposing = [(i, w) for i, w in enumerate(work) if w.propose]
        drafts = {w.request_id: [] for _, w in proposing}
        probs = {w.request_id: [] for _, w in proposing}
        current = logits[[i for i, _ in proposing]] if proposing else None
        for step in range(self.k):
            if not proposing:
                break
            p = processed_probs(current, [w.params for _, w in proposing])
            next_rows = []
            for j, (_, w) in enumerate(proposing):
                tok = int(torch.argmax(p[j])) if w.params.greedy else draw(p[j], w.generator)
                drafts[w.request_id].append(tok)
                probs[w.request_id].append(p[j])
                next_rows.append(([tok], len(w.token_ids) + step, w.block_table))
            if step + 1 < self.k:
                current = self.runner.forward(self._batch(next_rows))
                for _, w in proposing:
                    self.num_computed[w.request_id] = len(w.token_ids)  # drafts are not final
        return {rid: Proposal(drafts[rid], torch.stack(probs[rid])) for rid in drafts}
