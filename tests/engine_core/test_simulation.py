"""Drive the scheduler with a toy model and random traffic; check invariants every step.

Besides block bookkeeping, a shadow KV cache records which token each slot of
each physical block holds. Every step the simulated forward pass applies the
block copies, asserts it only writes blocks it owns alone, writes its tokens,
and then asserts every token the step attends to is in the right slot. Any
prefix-cache, copy-on-write or preemption bug shows up as a wrong slot.
"""

import random

import pytest

from services.engine.sequence import RequestStatus

from .helpers import check_scheduler_invariants, expected_outputs, make_request, make_scheduler, model_tokens, next_token

PREFIXES = [[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8], [1, 4, 1, 4, 2]]


class ShadowKV:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self.slots: list[list[int | None]] = [[None] * block_size for _ in range(num_blocks)]

    def forward(self, scheduler, out) -> None:
        kv = scheduler.kv_cache_manager
        for src, dst in out.block_copies:
            self.slots[dst] = list(self.slots[src])
        # Like a real forward pass, every layer writes the whole batch's KV
        # before attending, so a block cached by one request earlier in this
        # batch may be read by another request hitting it in the same batch.
        for item, tokens, table, end in self._items(kv, out):
            for pos in range(item.num_computed_tokens, end):
                block = table[pos // self.block_size]
                # A shared block may only receive the very tokens it is cached for.
                assert block.ref_cnt == 1 or block.token_ids[pos % self.block_size] == tokens[pos], (
                    f"{item.request.request_id} corrupts shared {block}")
                self.slots[block.block_id][pos % self.block_size] = tokens[pos]
        for item, tokens, table, end in self._items(kv, out):
            for pos in range(end):  # what attention reads this step
                assert self.slots[table[pos // self.block_size].block_id][pos % self.block_size] == tokens[pos]
        for block in kv.block_pool.cached_block_hash_to_block.values():
            assert tuple(self.slots[block.block_id]) == block.token_ids

    @staticmethod
    def _items(kv, out):
        for item in out.scheduled:
            tokens = item.request.all_token_ids + list(item.spec_token_ids)
            end = item.num_computed_tokens + item.num_new_tokens
            yield item, tokens, kv.req_to_blocks[item.request.request_id], end


def propose_drafts(scheduler, rng, k):
    """A drafter that guesses the toy model right most of the time."""
    drafts = {}
    for request in scheduler.running:
        cur, guess = request.all_token_ids[-1], []
        for _ in range(rng.randint(0, k)):
            cur = next_token(cur) if rng.random() < 0.7 else rng.randrange(50)
            guess.append(cur)
        drafts[request.request_id] = guess
    scheduler.update_draft_token_ids(drafts)


@pytest.mark.parametrize("seed, chunked, caching, num_spec_tokens", [
    (0, True, True, 0),
    (1, False, True, 0),
    (2, True, False, 2),
    (3, True, True, 3),
    (4, False, False, 0),
])
def test_random_traffic_keeps_every_invariant(seed, chunked, caching, num_spec_tokens):
    rng = random.Random(seed)
    num_blocks, block_size = 16, 4
    sched = make_scheduler(num_blocks=num_blocks, block_size=block_size, max_num_seqs=4, budget=16,
                           chunked=chunked, caching=caching, num_spec_tokens=num_spec_tokens)
    shadow = ShadowKV(num_blocks, block_size)
    finished, aborted, submitted = [], set(), 0
    for step in range(400):
        if step < 300 and rng.random() < 0.4:
            prompt = rng.choice(PREFIXES) + [rng.randrange(50) for _ in range(rng.randint(0, 6))]
            request = make_request(f"r{submitted}", prompt, max_tokens=rng.randint(1, 20),
                                   eos_token_id=rng.choice([None, rng.randrange(50)]),
                                   ignore_eos=rng.random() < 0.2,
                                   stop_token_ids=tuple(rng.sample(range(50), rng.randint(0, 2))))
            sched.add_request(request)
            submitted += 1
        if rng.random() < 0.03 and sched.requests:
            victim = rng.choice(sorted(sched.requests))
            aborted.add(victim)
            finished += sched.abort_requests([victim])

        out = sched.schedule()
        check_scheduler_invariants(sched, out)
        shadow.forward(sched, out)
        sampled = {s.request.request_id: model_tokens(s.request, s.spec_token_ids) for s in out.scheduled if s.samples}
        finished += sched.update_from_output(out, sampled)
        check_scheduler_invariants(sched, out)
        for item in out.scheduled:
            request = item.request
            if item.samples and request.status is RequestStatus.RUNNING and num_spec_tokens:
                # A draft model may now write KV up to position num_tokens + k - 2.
                table = sched.kv_cache_manager.req_to_blocks[request.request_id]
                assert len(table) * block_size >= request.num_tokens + num_spec_tokens - 1
        if num_spec_tokens:
            propose_drafts(sched, rng, num_spec_tokens)
        if step >= 300 and not sched.has_unfinished_requests():
            break

    assert not sched.has_unfinished_requests(), "requests starved"
    assert len(finished) == submitted
    assert sched.kv_cache_manager.num_free_blocks == num_blocks
    for request in finished:
        if request.request_id in aborted:
            assert request.status is RequestStatus.FINISHED_ABORTED
        else:
            assert request.output_token_ids == expected_outputs(request), request.request_id
    # The pool is small enough that the traffic must exercise preemption.
    assert sched.num_preemptions_total > 0
