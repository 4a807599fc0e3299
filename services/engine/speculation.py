"""Speculative decoding as one object the engine always calls.

`Speculation` wraps the draft model (`spec_decode.DraftProposer`) and the drafts it proposed;
`NoSpeculation` is its stand-in when no draft model is configured, every method a no-op, so the
engine's step reads the same either way:

    spec.drop(preempted)            a preempted request's drafts and draft KV are thrown away
    spec.copy_blocks(pairs)         copy-on-write in the draft's KV cache too
    spec.verify(rid, drafts, ...)   the target's logits accept a prefix of the drafts (lossless)
    spec.propose(scheduled, ...)    the draft catches up and proposes the next k tokens
    spec.forget(rid)                a finished request
"""
from __future__ import annotations

import torch

from services.engine.rejection_sampler import verify
from services.engine.sampler import processed_probs
from services.engine.sequence import RequestStatus
from services.engine.spec_decode import DraftProposer, DraftWork, Proposal
from services.engine.stats import EngineStats


class NoSpeculation:
    def drop(self, request_ids: list[str]) -> None:
        pass

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        pass

    def verify(self, request_id: str, draft_token_ids: list[int], logits: torch.Tensor, params,
               generator: torch.Generator) -> tuple[list[int], int]:
        raise AssertionError(f"{request_id}: drafts scheduled without speculative decoding")

    def propose(self, scheduled, accepted: dict[str, int], finished_ids: set[str], states, kv) -> dict[str, list[int]]:
        return {}

    def forget(self, request_id: str) -> None:
        pass


class Speculation(NoSpeculation):
    def __init__(self, proposer: DraftProposer, stats: EngineStats):
        self.proposer, self.stats = proposer, stats
        self._proposals: dict[str, Proposal] = {}  # request id -> the drafts now scheduled for it

    def drop(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self._proposals.pop(rid, None)
            self.proposer.reset(rid)

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        self.proposer.runner.copy_blocks(pairs)

    def verify(self, request_id: str, draft_token_ids: list[int], logits: torch.Tensor, params,
               generator: torch.Generator) -> tuple[list[int], int]:
        """logits: [k + 1, V], the target's rows for the request's last token and its k drafts ->
        (tokens to append, drafts accepted)."""
        proposal = self._proposals.pop(request_id)
        k = len(draft_token_ids)
        target = processed_probs(logits, [params] * (k + 1))
        tokens, n_acc = verify(draft_token_ids, proposal.probs[:k], target, generator, params.greedy)
        self.stats.spec_decode_num_drafts_total += 1
        self.stats.spec_decode_num_draft_tokens_total += k
        self.stats.spec_decode_num_accepted_tokens_total += n_acc
        return tokens, n_acc

    def propose(self, scheduled, accepted: dict[str, int], finished_ids: set[str], states, kv) -> dict[str, list[int]]:
        """Draft token ids for every request still running (catching the draft up on the others)."""
        work = []
        for s in scheduled:
            req = s.request
            rid = req.request_id
            if rid in finished_ids or req.status is not RequestStatus.RUNNING:
                continue
            if rid in accepted:
                self.proposer.accept(rid, accepted[rid])
            decoding = not req.is_prefill
            tokens = req.all_token_ids
            upto = len(tokens) if decoding else req.num_computed_tokens
            start = self.proposer.computed(rid)
            if start >= upto:
                continue
            work.append(DraftWork(rid, tokens[:upto], start, kv.get_block_table(rid), decoding,
                                  states[rid].params, states[rid].generator))
        proposals = self.proposer.run(work)
        self._proposals.update(proposals)
        return {rid: p.token_ids for rid, p in proposals.items()}

    def forget(self, request_id: str) -> None:
        self._proposals.pop(request_id, None)
        self.proposer.forget(request_id)
