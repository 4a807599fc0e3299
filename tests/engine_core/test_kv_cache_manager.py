import pytest

from services.engine.block_pool import BlockPool
from services.engine.kv_cache_manager import KVCacheManager

from .helpers import check_kv_invariants, make_kv, make_request


def admit(kv, request):
    """What the scheduler does for a waiting request that fits the step whole."""
    blocks, num_hit = kv.get_computed_blocks(request)
    copies = kv.allocate_slots(request, request.num_tokens - num_hit, blocks, num_new_computed_tokens=num_hit)
    assert copies is not None
    request.num_computed_tokens = request.num_tokens
    kv.begin_step()  # the forward pass ran: the new blocks hold their KV
    return num_hit, copies


def test_prefix_hit_skips_prefill():
    kv = make_kv(10, 4)
    a = make_request("a", list(range(10)))
    assert admit(kv, a) == (0, [])
    assert kv.get_block_table("a") == [0, 1, 2]

    b = make_request("b", list(range(8)) + [40, 41])
    blocks, num_hit = kv.get_computed_blocks(b)
    assert [blk.block_id for blk in blocks] == [0, 1] and num_hit == 8
    assert kv.allocate_slots(b, 2, blocks, num_new_computed_tokens=8) == []
    assert kv.get_block_table("b") == [0, 1, 3]
    assert [kv.block_pool.blocks[i].ref_cnt for i in range(4)] == [2, 2, 1, 1]
    assert (kv.prefix_cache_queries, kv.prefix_cache_hits) == (20, 8)
    check_kv_invariants(kv)


def test_fully_cached_prompt_recomputes_its_last_token_with_copy_on_write():
    kv = make_kv(4, 4)
    admit(kv, make_request("a", list(range(8))))
    assert kv.get_block_table("a") == [0, 1]

    b = make_request("b", list(range(8)))
    blocks, num_hit = kv.get_computed_blocks(b)
    assert [blk.block_id for blk in blocks] == [0, 1] and num_hit == 7  # never the whole prompt
    copies = kv.allocate_slots(b, 1, blocks, num_new_computed_tokens=7)
    assert copies == [(1, 2)]  # slot 7 lives in shared block 1: b writes a private copy
    assert kv.get_block_table("b") == [0, 2]
    assert kv.get_block_table("a") == [0, 1]
    assert [kv.block_pool.blocks[i].ref_cnt for i in range(4)] == [2, 1, 1, 0]
    # The copy is not indexed: the hash keeps pointing at the original block.
    assert kv.block_pool.blocks[2].block_hash is None
    check_kv_invariants(kv)


def test_prompt_fully_cached_in_the_same_step_recomputes_its_last_block_instead_of_copying():
    kv = make_kv(8, 4)
    a = make_request("a", list(range(8)))
    assert kv.allocate_slots(a, 8) == []  # cached now, but written only by this step's forward
    b = make_request("b", list(range(8)))
    blocks, num_hit = kv.get_computed_blocks(b)
    # Copying block 1 before the forward would copy garbage; recompute it.
    assert [blk.block_id for blk in blocks] == [0] and num_hit == 4
    assert kv.allocate_slots(b, 4, blocks, num_new_computed_tokens=4) == []
    assert kv.get_block_table("b") == [0, 2]
    kv.begin_step()
    c = make_request("c", list(range(8)))
    blocks, num_hit = kv.get_computed_blocks(c)
    assert [blk.block_id for blk in blocks] == [0, 1] and num_hit == 7  # next step: copy-on-write again


def test_fully_cached_prompt_of_a_finished_request_is_reused_without_a_copy():
    kv = make_kv(4, 4)
    a = make_request("a", list(range(8)))
    admit(kv, a)
    kv.free(a)
    b = make_request("b", list(range(8)))
    blocks, num_hit = kv.get_computed_blocks(b)
    assert num_hit == 7
    assert kv.allocate_slots(b, 1, blocks, num_new_computed_tokens=7) == []  # sole owner writes in place
    assert kv.get_block_table("b") == [0, 1]
    check_kv_invariants(kv)


def test_fork_then_append_copies_the_shared_last_block():
    kv = make_kv(8, 4)
    parent = make_request("parent", list(range(6)))
    admit(kv, parent)
    parent.output_token_ids.append(30)
    child = make_request("child", list(range(6)))
    child.output_token_ids.append(31)
    child.num_computed_tokens = 6
    kv.fork(parent, child)
    assert kv.get_block_table("child") == [0, 1]
    check_kv_invariants(kv, allow_fork=True)

    assert kv.allocate_slots(child, 1) == [(1, 2)]  # slot 6 is in shared, partial block 1
    assert kv.get_block_table("child") == [0, 2]
    assert kv.allocate_slots(parent, 1) == []  # block 1 is the parent's alone now
    assert kv.get_block_table("parent") == [0, 1]
    assert [kv.block_pool.blocks[i].ref_cnt for i in range(3)] == [2, 1, 1]
    check_kv_invariants(kv, allow_fork=True)


def test_allocate_slots_returns_none_and_changes_nothing_when_out_of_blocks():
    kv = make_kv(4, 4)
    a = make_request("a", list(range(12)))
    admit(kv, a)
    kv.free(a)  # blocks 0..2 stay cached but evictable
    pool = kv.block_pool
    before = ([b.ref_cnt for b in pool.blocks], [b.block_id for b in pool.free_block_queue.get_all_free_blocks()],
              dict(pool.cached_block_hash_to_block))

    b = make_request("b", list(range(8)) + list(range(20, 32)))  # 20 tokens = 5 blocks, 2 of them hit
    blocks, num_hit = kv.get_computed_blocks(b)
    assert [blk.block_id for blk in blocks] == [0, 1] and num_hit == 8
    # 3 new blocks needed, but touching the 2 hits leaves only 2 of the 4 free.
    assert kv.allocate_slots(b, 12, blocks, num_new_computed_tokens=8) is None
    after = ([b.ref_cnt for b in pool.blocks], [b.block_id for b in pool.free_block_queue.get_all_free_blocks()],
             dict(pool.cached_block_hash_to_block))
    assert after == before
    assert "b" not in kv.req_to_blocks
    check_kv_invariants(kv)


def test_copy_on_write_counts_toward_the_free_block_check():
    kv = make_kv(2, 4)
    admit(kv, make_request("a", list(range(8))))
    b = make_request("b", list(range(8)))
    blocks, num_hit = kv.get_computed_blocks(b)
    assert kv.allocate_slots(b, 1, blocks, num_new_computed_tokens=num_hit) is None
    assert [blk.ref_cnt for blk in kv.block_pool.blocks] == [1, 1]
    check_kv_invariants(kv)


def test_draft_tokens_are_not_cached_until_accepted():
    kv = make_kv(8, 4)
    r = make_request("r", [1, 2])
    admit(kv, r)
    r.output_token_ids.append(3)  # 3 tokens known, 2 computed
    r.spec_token_ids = [4, 5, 6]
    assert kv.allocate_slots(r, 4) == []  # writes slots 2..5
    assert kv.get_block_table("r") == [0, 1]
    # Block 0 is full (slots 0-3) but slot 3 holds a draft: not final, not cached.
    assert kv.block_pool.cached_block_hash_to_block == {}


def test_blocks_are_freed_tail_first():
    kv = make_kv(6, 4)
    a = make_request("a", list(range(12)))
    admit(kv, a)
    kv.free(a)
    assert [b.block_id for b in kv.block_pool.free_block_queue.get_all_free_blocks()] == [3, 4, 5, 2, 1, 0]


def test_every_block_is_free_after_all_requests_finish():
    kv = make_kv(16, 4)
    requests = [make_request(f"r{i}", list(range(3 + 4 * i))) for i in range(3)]
    for r in requests:
        admit(kv, r)
    child = make_request("child", requests[0].prompt_token_ids)
    child.num_computed_tokens = requests[0].num_computed_tokens
    kv.fork(requests[0], child)
    for r in requests + [child]:
        kv.free(r)
    assert kv.num_free_blocks == 16 and kv.usage == 0.0
    assert kv.req_to_blocks == {} and kv.num_cached_block == {}
    check_kv_invariants(kv)


def test_prefix_cache_counts_each_lookup_once_until_the_request_is_freed():
    kv = make_kv(8, 4)
    admit(kv, make_request("a", list(range(8))))
    b = make_request("b", list(range(6)))
    kv.get_computed_blocks(b)
    kv.get_computed_blocks(b)  # e.g. retried while waiting: not counted again
    assert (kv.prefix_cache_queries, kv.prefix_cache_hits) == (8 + 6, 4)
    kv.free(b)  # preempted: the re-lookup counts again
    kv.get_computed_blocks(b)
    assert (kv.prefix_cache_queries, kv.prefix_cache_hits) == (8 + 12, 8)


def test_get_computed_blocks_finds_nothing_when_caching_is_off():
    kv = make_kv(8, 4, caching=False)
    admit(kv, make_request("a", list(range(8))))
    assert kv.get_computed_blocks(make_request("b", list(range(8)))) == ([], 0)
    assert kv.prefix_cache_queries == 0


def test_manager_config_is_validated():
    with pytest.raises(ValueError, match="block_size"):
        KVCacheManager(BlockPool(4, True), 0, True)
    with pytest.raises(ValueError, match="enable_prefix_caching"):
        KVCacheManager(BlockPool(4, False), 4, True)
    kv = make_kv(4, 4)
    with pytest.raises(ValueError, match="num_new_computed_tokens"):
        kv.allocate_slots(make_request("a", [1]), 1, kv.block_pool.blocks[:1], num_new_computed_tokens=5)
    with pytest.raises(KeyError):
        kv.get_block_table("nobody")
