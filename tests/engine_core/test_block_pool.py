import pytest

from services.engine.block_pool import BlockPool, DoubleFreeError, FreeKVCacheBlockQueue, KVCacheBlock, hash_block_tokens


def ids(blocks):
    return [b.block_id for b in blocks]


def free_order(pool):
    return ids(pool.free_block_queue.get_all_free_blocks())


def test_block_hash_is_a_fixed_sha256_across_processes():
    first = hash_block_tokens(None, [1, 2, 3, 4])
    assert first.hex() == "5e957b4b790f828aca0343b1420595038924137a7eb7d4ba77dc304290ed95a9"
    second = hash_block_tokens(first, [5, 6, 7, 8])
    assert second.hex() == "b25d648e0802609da3b66af3d5681d7a2db99bca61b56fceacd5934c80d2a2f3"


def test_block_hash_depends_on_parent_and_token_boundaries():
    assert hash_block_tokens(None, [5, 6, 7, 8]) != hash_block_tokens(hash_block_tokens(None, [1, 2, 3, 4]), [5, 6, 7, 8])
    assert hash_block_tokens(None, [1, 23]) != hash_block_tokens(None, [12, 3])


def test_new_blocks_come_from_the_queue_head_with_one_reference():
    pool = BlockPool(10, enable_caching=True)
    blocks = pool.get_new_blocks(3)
    assert ids(blocks) == [0, 1, 2]
    assert [b.ref_cnt for b in blocks] == [1, 1, 1]
    assert pool.num_free_blocks == 7
    assert pool.usage == pytest.approx(0.3)


def test_touch_and_free_count_references():
    pool = BlockPool(4, enable_caching=False)
    (block,) = pool.get_new_blocks(1)
    pool.touch([block])
    assert block.ref_cnt == 2
    pool.free_blocks([block])
    assert block.ref_cnt == 1 and pool.num_free_blocks == 3
    pool.free_blocks([block])
    assert block.ref_cnt == 0 and pool.num_free_blocks == 4
    assert free_order(pool) == [1, 2, 3, 0]


def test_double_free_raises_and_changes_no_reference_count():
    pool = BlockPool(4, enable_caching=False)
    a, b = pool.get_new_blocks(2)
    pool.free_blocks([b])
    with pytest.raises(DoubleFreeError, match="block_id 1"):
        pool.free_blocks([a, b])
    assert a.ref_cnt == 1 and b.ref_cnt == 0
    assert free_order(pool) == [2, 3, 1]
    with pytest.raises(DoubleFreeError, match="block_id 0"):
        pool.free_blocks([a, a])
    assert a.ref_cnt == 1


def test_freed_cached_block_stays_hittable_until_reused():
    pool = BlockPool(2, enable_caching=True)
    (block,) = pool.get_new_blocks(1)
    h = hash_block_tokens(None, [1, 2])
    assert pool.cache_full_block(block, h, [1, 2])
    pool.free_blocks([block])
    assert pool.get_cached_block(h, [1, 2]) is block  # lazy eviction: still there
    assert ids(pool.get_new_blocks(1)) == [1]  # the never-cached block goes first
    assert pool.get_cached_block(h, [1, 2]) is block
    assert ids(pool.get_new_blocks(1)) == [0]  # now the cached block is reused...
    assert pool.get_cached_block(h, [1, 2]) is None  # ...and its hash is gone
    assert block.block_hash is None and pool.cached_block_hash_to_block == {}


def test_touching_a_cached_free_block_takes_it_off_the_queue():
    pool = BlockPool(3, enable_caching=True)
    (block,) = pool.get_new_blocks(1)
    h = hash_block_tokens(None, [7])
    pool.cache_full_block(block, h, [7])
    pool.free_blocks([block])
    assert free_order(pool) == [1, 2, 0]
    pool.touch([pool.get_cached_block(h, [7])])
    assert block.ref_cnt == 1 and free_order(pool) == [1, 2]


def test_blocks_are_evicted_in_the_order_they_were_freed():
    pool = BlockPool(4, enable_caching=False)
    b0, b1, b2 = pool.get_new_blocks(3)
    pool.free_blocks([b0])
    pool.free_blocks([b2])
    pool.free_blocks([b1])
    assert ids(pool.get_new_blocks(4)) == [3, 0, 2, 1]


def test_cache_full_block_keeps_the_existing_mapping_instead_of_deduplicating():
    pool = BlockPool(4, enable_caching=True)
    first, second = pool.get_new_blocks(2)
    h = hash_block_tokens(None, [1, 2])
    assert pool.cache_full_block(first, h, [1, 2])
    assert not pool.cache_full_block(second, h, [1, 2])
    assert pool.get_cached_block(h, [1, 2]) is first
    assert second.block_hash is None


def test_cached_block_with_other_tokens_is_not_a_hit():
    pool = BlockPool(2, enable_caching=True)
    (block,) = pool.get_new_blocks(1)
    h = hash_block_tokens(None, [1, 2])
    pool.cache_full_block(block, h, [1, 2])
    assert pool.get_cached_block(h, [1, 3]) is None  # a forged collision


def test_caching_disabled_pool_never_hits():
    pool = BlockPool(2, enable_caching=False)
    (block,) = pool.get_new_blocks(1)
    h = hash_block_tokens(None, [1])
    assert not pool.cache_full_block(block, h, [1])
    assert pool.get_cached_block(h, [1]) is None


def test_free_queue_removes_from_the_middle_head_and_tail():
    blocks = [KVCacheBlock(i) for i in range(5)]
    queue = FreeKVCacheBlockQueue(blocks)
    queue.remove(blocks[2])
    queue.remove(blocks[0])
    queue.remove(blocks[4])
    assert ids(queue.get_all_free_blocks()) == [1, 3] and queue.num_free_blocks == 2
    queue.append(blocks[0])
    assert queue.popleft() is blocks[1]
    assert ids(queue.get_all_free_blocks()) == [3, 0]


def test_asking_for_more_blocks_than_free_raises():
    pool = BlockPool(2, enable_caching=False)
    with pytest.raises(ValueError, match="3 free blocks"):
        pool.get_new_blocks(3)
    assert pool.num_free_blocks == 2


@pytest.mark.parametrize("num_blocks", [0, -1, 2.5, True])
def test_invalid_num_blocks_is_rejected(num_blocks):
    with pytest.raises(ValueError, match="num_blocks"):
        BlockPool(num_blocks, enable_caching=True)
