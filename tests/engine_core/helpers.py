"""Shared builders, a fake clock, a toy model and invariant checks for the engine-core tests."""

from __future__ import annotations

from collections import Counter

from services.engine.block_pool import BlockPool
from services.engine.kv_cache_manager import KVCacheManager
from services.engine.scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from services.engine.sequence import Request, RequestStatus

VOCAB = 50


def next_token(token: int) -> int:
    """The toy model: deterministic, so any schedule must yield the same outputs."""
    return (token + 1) % VOCAB


def make_request(request_id: str, prompt: list[int], max_tokens: int = 16, eos_token_id: int | None = None,
                 **kwargs) -> Request:
    return Request(request_id, list(prompt), max_tokens, eos_token_id, **kwargs)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make_kv(num_blocks: int, block_size: int, caching: bool = True) -> KVCacheManager:
    return KVCacheManager(BlockPool(num_blocks, caching), block_size, caching)


def make_scheduler(num_blocks: int = 64, block_size: int = 4, max_num_seqs: int = 8, budget: int = 32,
                   chunked: bool = True, caching: bool = True, num_spec_tokens: int = 0,
                   clock: FakeClock | None = None) -> Scheduler:
    config = SchedulerConfig(max_num_seqs, budget, chunked, num_spec_tokens)
    return Scheduler(config, make_kv(num_blocks, block_size, caching), clock or FakeClock())


def model_tokens(item_request: Request, spec_token_ids: tuple[int, ...]) -> list[int]:
    """Verify drafts against the toy model: accepted prefix plus one more token."""
    cur = item_request.all_token_ids[-1]
    out = []
    for draft in spec_token_ids:
        if draft != next_token(cur):
            break
        out.append(draft)
        cur = draft
    out.append(next_token(cur))
    return out


def run_step(scheduler: Scheduler, sampled: dict[str, list[int]] | None = None
             ) -> tuple[SchedulerOutput, list[Request]]:
    """schedule() + toy model + update_from_output(); `sampled` overrides the model."""
    out = scheduler.schedule()
    tokens = {}
    for item in out.scheduled:
        if item.samples:
            rid = item.request.request_id
            tokens[rid] = sampled[rid] if sampled and rid in sampled else model_tokens(item.request,
                                                                                       item.spec_token_ids)
    return out, scheduler.update_from_output(out, tokens)


def expected_outputs(request: Request) -> list[int]:
    """What the toy model must produce for `request`, however it was scheduled."""
    cur, out = request.prompt_token_ids[-1], []
    while True:
        cur = next_token(cur)
        out.append(cur)
        if (cur == request.eos_token_id and not request.ignore_eos) or cur in request.stop_token_ids:
            return out
        if len(out) == request.max_tokens:
            return out


def check_kv_invariants(kv: KVCacheManager, allow_fork: bool = False) -> None:
    pool = kv.block_pool
    owners = Counter(b.block_id for blocks in kv.req_to_blocks.values() for b in blocks)
    for blocks in kv.req_to_blocks.values():
        assert len({b.block_id for b in blocks}) == len(blocks), "a table holds a block twice"
    for block in pool.blocks:
        assert block.ref_cnt == owners[block.block_id], f"ref_cnt of {block} != its {owners[block.block_id]} tables"
        if owners[block.block_id] > 1 and not allow_fork:
            assert block.block_hash is not None, f"{block} is shared but was never cached"
    free_ids = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]
    assert sorted(free_ids) == [b.block_id for b in pool.blocks if b.ref_cnt == 0]
    assert pool.num_free_blocks == len(free_ids)
    for block_hash, block in pool.cached_block_hash_to_block.items():
        assert block.block_hash == block_hash
    assert sum(b.block_hash is not None for b in pool.blocks) == len(pool.cached_block_hash_to_block)


def check_scheduler_invariants(scheduler: Scheduler, out: SchedulerOutput) -> None:
    config = scheduler.config
    assert out.num_batched_tokens == sum(s.num_new_tokens for s in out.scheduled)
    assert out.num_batched_tokens <= config.max_num_batched_tokens
    assert len(out.scheduled) <= config.max_num_seqs
    assert len({s.request.request_id for s in out.scheduled}) == len(out.scheduled)
    assert scheduler.num_running <= config.max_num_seqs
    kv = scheduler.kv_cache_manager
    for request in scheduler.waiting:
        assert request.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED)
        assert request.request_id not in kv.req_to_blocks and request.num_computed_tokens == 0
    for request in scheduler.running:
        assert request.status is RequestStatus.RUNNING
        assert len(kv.req_to_blocks[request.request_id]) * kv.block_size >= request.num_computed_tokens
    assert set(kv.req_to_blocks) <= {r.request_id for r in scheduler.running}
    check_kv_invariants(kv)
