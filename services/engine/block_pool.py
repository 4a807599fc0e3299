"""Physical KV-cache blocks: reference counts, the free list, the prefix-cache index.

The GPU KV cache is carved into `num_blocks` fixed-size blocks. Each block is
owned by zero or more requests (`ref_cnt`). A block nobody owns sits in the
`free_block_queue`; if it was full when freed it keeps its `block_hash`, so a
later request with the same prefix can take it back ("hit") instead of
recomputing it. Only when the block is popped for new data is its hash dropped
(lazy eviction):

    free_block_queue (head is evicted first)
    head -> [b7 h=..a3] <-> [b2 no hash] <-> [b5 h=..f0] <- tail
             oldest free                      freed last

    cached_block_hash_to_block:  {..a3: b7, ..f0: b5, ..91: b0 (ref_cnt 2)}

Invariant: a block carries a block_hash exactly when the index maps that hash
to it, so evicting a block never removes another block's mapping.
"""

from __future__ import annotations

import hashlib
import struct
from collections import Counter
from collections.abc import Iterable, Sequence


def hash_block_tokens(parent_block_hash: bytes | None, token_ids: Sequence[int]) -> bytes:
    """Chained sha256 of one full block: equal hashes imply equal whole prefixes.

    Python's hash() is salted per process, so it would break reproducibility
    and any cross-process cache; sha256 over a fixed encoding does not.
    """
    hasher = hashlib.sha256()
    # A tag byte keeps "first block" and "block after parent P" in separate
    # input spaces, so no parent digest can impersonate the root.
    if parent_block_hash is None:
        hasher.update(b"\x00")
    else:
        hasher.update(b"\x01")
        hasher.update(parent_block_hash)
    # Fixed-width little-endian int64: [1, 23] and [12, 3] must differ.
    hasher.update(struct.pack(f"<{len(token_ids)}q", *token_ids))
    return hasher.digest()


class DoubleFreeError(RuntimeError):
    """A block was freed more times than it was allocated or touched."""


class KVCacheBlock:
    """Metadata for one physical block; the tensor data lives in the model runner."""

    __slots__ = ("block_id", "ref_cnt", "block_hash", "token_ids", "prev_free_block", "next_free_block")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: bytes | None = None
        # The tokens the hash was computed from, compared on every cache hit so
        # a hash collision can never hand a request someone else's KV.
        self.token_ids: tuple[int, ...] = ()
        # Links of the free-block queue; both None while the block is owned.
        self.prev_free_block: KVCacheBlock | None = None
        self.next_free_block: KVCacheBlock | None = None

    def __repr__(self) -> str:
        h = self.block_hash.hex()[:8] if self.block_hash is not None else None
        return f"KVCacheBlock(block_id={self.block_id}, ref_cnt={self.ref_cnt}, block_hash={h})"


class FreeKVCacheBlockQueue:
    """Intrusive doubly linked list of free blocks: O(1) popleft, append, remove.

    A deque cannot remove from the middle in O(1), and a cache hit must pull an
    arbitrary free block back out of the queue.
    """

    def __init__(self, blocks: Iterable[KVCacheBlock]) -> None:
        self._head: KVCacheBlock | None = None
        self._tail: KVCacheBlock | None = None
        self.num_free_blocks = 0
        for block in blocks:
            self.append(block)

    def popleft(self) -> KVCacheBlock:
        if self._head is None:
            raise IndexError("popleft from an empty free block queue")
        block = self._head
        self.remove(block)
        return block

    def remove(self, block: KVCacheBlock) -> None:
        prev_block, next_block = block.prev_free_block, block.next_free_block
        if prev_block is None:
            assert self._head is block, f"block {block.block_id} is not in the free queue"
            self._head = next_block
        else:
            prev_block.next_free_block = next_block
        if next_block is None:
            assert self._tail is block, f"block {block.block_id} is not in the free queue"
            self._tail = prev_block
        else:
            next_block.prev_free_block = prev_block
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        assert block.prev_free_block is None and block.next_free_block is None and self._head is not block, (
            f"block {block.block_id} is already in the free queue"
        )
        if self._tail is None:
            self._head = block
        else:
            self._tail.next_free_block = block
            block.prev_free_block = self._tail
        self._tail = block
        self.num_free_blocks += 1

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        """Head-to-tail snapshot (eviction order), for tests and debugging."""
        out, block = [], self._head
        while block is not None:
            out.append(block)
            block = block.next_free_block
        return out


class BlockPool:
    """Hands out blocks, counts their owners, and indexes full blocks by hash."""

    def __init__(self, num_blocks: int, enable_caching: bool) -> None:
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
            raise ValueError(f"num_blocks must be an int >= 1, got {num_blocks!r}")
        self.num_blocks = num_blocks
        self.enable_caching = bool(enable_caching)
        self.blocks = [KVCacheBlock(i) for i in range(num_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        self.cached_block_hash_to_block: dict[bytes, KVCacheBlock] = {}

    @property
    def num_free_blocks(self) -> int:
        """Blocks no request owns, cached-but-evictable ones included."""
        return self.free_block_queue.num_free_blocks

    @property
    def usage(self) -> float:
        """Fraction of blocks owned by at least one request, in [0, 1]."""
        return 1.0 - self.num_free_blocks / self.num_blocks

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Pop blocks from the queue head (least recently freed) with ref_cnt 1."""
        if num_blocks < 0:
            raise ValueError(f"num_blocks must be >= 0, got {num_blocks}")
        if num_blocks > self.num_free_blocks:
            raise ValueError(f"cannot get {num_blocks} free blocks, only {self.num_free_blocks} are free")
        blocks = []
        for _ in range(num_blocks):
            block = self.free_block_queue.popleft()
            self._evict(block)
            assert block.ref_cnt == 0
            block.ref_cnt = 1
            blocks.append(block)
        return blocks

    def _evict(self, block: KVCacheBlock) -> None:
        """Forget a reused block's old contents; its hash stops hitting now."""
        if block.block_hash is None:
            return
        assert self.cached_block_hash_to_block.get(block.block_hash) is block
        del self.cached_block_hash_to_block[block.block_hash]
        block.block_hash = None
        block.token_ids = ()

    def free_blocks(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one reference per listed block; unowned blocks go to the queue tail.

        Validated up front so a double free changes no reference count at all.
        """
        blocks = list(blocks)
        for block_id, count in Counter(b.block_id for b in blocks).items():
            block = self.blocks[block_id]
            if count > block.ref_cnt:
                raise DoubleFreeError(
                    f"block_id {block_id} freed {count} time(s) but its ref_cnt is {block.ref_cnt}"
                )
        for block in blocks:
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                # Keep block_hash: the block stays hittable until it is reused.
                self.free_block_queue.append(block)

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Add one owner per block, pulling unowned (cached) blocks off the queue."""
        for block in blocks:
            if block.ref_cnt == 0:
                self.free_block_queue.remove(block)
            block.ref_cnt += 1

    def get_cached_block(self, block_hash: bytes, token_ids: Sequence[int]) -> KVCacheBlock | None:
        if not self.enable_caching:
            return None
        block = self.cached_block_hash_to_block.get(block_hash)
        if block is None or block.token_ids != tuple(token_ids):
            return None
        return block

    def cache_full_block(self, block: KVCacheBlock, block_hash: bytes, token_ids: Sequence[int]) -> bool:
        """Index a full, final block under its hash; True if `block` now serves it.

        If another block already serves the hash, that mapping wins and `block`
        stays uncached: swapping a request's block for the existing one would
        rewrite its block table, and block tables are append-only.
        """
        if not self.enable_caching:
            return False
        assert block.ref_cnt > 0, f"caching unowned block {block.block_id}"
        if block.block_hash is not None:
            # Shared blocks (fork) are offered once per owner; same content.
            assert block.block_hash == block_hash, f"block {block.block_id} re-cached under a new hash"
            return True
        if block_hash in self.cached_block_hash_to_block:
            return False
        block.block_hash = block_hash
        block.token_ids = tuple(token_ids)
        self.cached_block_hash_to_block[block_hash] = block
        return True
