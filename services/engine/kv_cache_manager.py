"""Per-request block tables on top of the BlockPool: prefix hits, allocation, copy-on-write.

A request's block table maps token positions to physical blocks; slot s of
the request lives in block_table[s // block_size] at offset s % block_size:

    block_size = 4, num_tokens = 10, block_table = [7, 2, 9]
    positions:  0  1  2  3 | 4  5  6  7 | 8  9  .  .
    block:      ---- 7 ----|---- 2 -----|---- 9 ----
                full, hashed | full, hashed | partial (never hashed)

Blocks may be shared (ref_cnt > 1) through prefix-cache hits or fork(). A
shared block must never be written, so before a step writes into one, the
writer gets a private copy: allocate_slots() swaps in a fresh block and returns
(src_block_id, dst_block_id) for the model runner to copy before the forward.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.engine.block_pool import BlockPool, KVCacheBlock, hash_block_tokens
from services.engine.sequence import Request


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheManager:
    def __init__(self, block_pool: BlockPool, block_size: int, enable_prefix_caching: bool) -> None:
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")
        if enable_prefix_caching and not block_pool.enable_caching:
            raise ValueError("enable_prefix_caching=True needs a block_pool built with enable_caching=True")
        self.block_pool = block_pool
        self.block_size = block_size
        self.enable_prefix_caching = bool(enable_prefix_caching)
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        # How many leading blocks of each table were already offered to the
        # cache, so each step hashes only the blocks that became full.
        self.num_cached_block: dict[str, int] = {}
        # Chained hashes of each request's full blocks, extended as it grows.
        self.req_to_block_hashes: dict[str, list[bytes]] = {}
        # Blocks cached since begin_step(): their KV is written by the step
        # being scheduled now, so they cannot be the source of a copy yet.
        self._blocks_cached_this_step: set[int] = set()
        # Requests counted in the prefix-cache stats since their last free().
        self._queried: set[str] = set()
        self.prefix_cache_queries = 0  # tokens looked up
        self.prefix_cache_hits = 0  # tokens found

    @property
    def usage(self) -> float:
        return self.block_pool.usage

    @property
    def num_free_blocks(self) -> int:
        return self.block_pool.num_free_blocks

    def get_block_table(self, request_id: str) -> list[int]:
        if request_id not in self.req_to_blocks:
            raise KeyError(f"request {request_id!r} holds no blocks")
        return [block.block_id for block in self.req_to_blocks[request_id]]

    def begin_step(self) -> None:
        """Mark a step boundary: the previous step's forward pass has written its KV."""
        self._blocks_cached_this_step.clear()

    def _block_hashes(self, request: Request) -> list[bytes]:
        """Hashes of all full blocks of request.all_token_ids (tokens are append-only)."""
        hashes = self.req_to_block_hashes.setdefault(request.request_id, [])
        num_full = request.num_tokens // self.block_size
        if len(hashes) < num_full:
            tokens = request.all_token_ids
            for i in range(len(hashes), num_full):
                parent = hashes[i - 1] if i > 0 else None
                hashes.append(hash_block_tokens(parent, tokens[i * self.block_size : (i + 1) * self.block_size]))
        return hashes

    def get_computed_blocks(self, request: Request) -> tuple[list[KVCacheBlock], int]:
        """Longest cached run of the request's leading full blocks, and its token count.

        The count is capped at num_tokens - 1: the model must run at least the
        last token to produce logits. When every block hits, the last block is
        still returned; writing that token into it triggers copy-on-write.
        """
        if not self.enable_prefix_caching:
            return [], 0
        tokens = request.all_token_ids
        blocks: list[KVCacheBlock] = []
        for i, block_hash in enumerate(self._block_hashes(request)):
            block = self.block_pool.get_cached_block(block_hash, tokens[i * self.block_size : (i + 1) * self.block_size])
            if block is None:
                break
            blocks.append(block)
        if blocks and len(blocks) * self.block_size >= request.num_tokens:
            # Every token hit, so the last block gets rewritten, copy-on-write.
            # A block cached in this very step is still empty at copy time
            # (copies run before the forward): recompute that block instead.
            if blocks[-1].block_id in self._blocks_cached_this_step:
                blocks.pop()
        num_computed_tokens = min(len(blocks) * self.block_size, request.num_tokens - 1)
        # With block_size 1 the capped last token fills its block alone: no copy needed.
        del blocks[_cdiv(num_computed_tokens, self.block_size):]
        if request.request_id not in self._queried:
            self._queried.add(request.request_id)
            self.prefix_cache_queries += request.num_tokens
            self.prefix_cache_hits += num_computed_tokens
        return blocks, num_computed_tokens

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        new_computed_blocks: Sequence[KVCacheBlock] = (),
        num_lookahead_tokens: int = 0,
        *,
        num_new_computed_tokens: int | None = None,
    ) -> list[tuple[int, int]] | None:
        """Grow the block table to cover this step's writes; None if the pool is short.

        Written slots are [start, start + num_new_tokens + num_lookahead_tokens)
        with start = request.num_computed_tokens + num_new_computed_tokens.
        num_new_computed_tokens defaults to len(new_computed_blocks) * block_size;
        pass get_computed_blocks()'s count when it was capped below that.
        On None nothing changed. Otherwise returns the copy-on-write pairs.
        """
        if num_new_tokens < 1 or num_lookahead_tokens < 0:
            raise ValueError(f"need num_new_tokens >= 1 and num_lookahead_tokens >= 0, "
                             f"got {num_new_tokens} and {num_lookahead_tokens}")
        new_computed_blocks = list(new_computed_blocks)
        if num_new_computed_tokens is None:
            num_new_computed_tokens = len(new_computed_blocks) * self.block_size
        if _cdiv(num_new_computed_tokens, self.block_size) != len(new_computed_blocks):
            raise ValueError(f"num_new_computed_tokens={num_new_computed_tokens} does not match "
                             f"{len(new_computed_blocks)} new computed blocks")
        table = self.req_to_blocks.get(request.request_id, [])
        if new_computed_blocks and (table or request.num_computed_tokens):
            raise ValueError("new_computed_blocks are only valid for a request with no computed tokens")

        bs = self.block_size
        start = request.num_computed_tokens + num_new_computed_tokens
        end = start + num_new_tokens + num_lookahead_tokens
        num_old = len(table)
        future = table + new_computed_blocks
        num_new_blocks = max(0, _cdiv(end, bs) - len(future))
        # Existing blocks this step writes into that someone else also owns.
        # New computed blocks gain an owner from the touch below, hence the +1.
        cow_indices = [
            i for i in range(start // bs, min(len(future), _cdiv(end, bs)))
            if future[i].ref_cnt + (i >= num_old) > 1
        ]
        # Touching an unowned cached block takes it off the free queue.
        num_evictable_computed = sum(1 for b in new_computed_blocks if b.ref_cnt == 0)
        if num_new_blocks + len(cow_indices) > self.block_pool.num_free_blocks - num_evictable_computed:
            return None

        self.block_pool.touch(new_computed_blocks)
        future.extend(self.block_pool.get_new_blocks(num_new_blocks))
        block_copies = []
        for i in cow_indices:
            src = future[i]
            (future[i],) = self.block_pool.get_new_blocks(1)
            self.block_pool.free_blocks([src])  # still owned by the sharer(s)
            block_copies.append((src.block_id, future[i].block_id))
        self.req_to_blocks[request.request_id] = future
        if request.request_id not in self.num_cached_block:
            self.num_cached_block[request.request_id] = len(new_computed_blocks)

        # Draft tokens may be rejected, so blocks holding them are not final.
        self._cache_full_blocks(request, start + num_new_tokens - len(request.spec_token_ids))
        return block_copies

    def _cache_full_blocks(self, request: Request, num_final_tokens: int) -> None:
        if not self.enable_prefix_caching:
            return
        assert num_final_tokens <= request.num_tokens, "caching tokens the request does not have"
        rid = request.request_id
        num_full = num_final_tokens // self.block_size
        first = self.num_cached_block[rid]
        if num_full <= first:
            return
        hashes = self._block_hashes(request)
        tokens = request.all_token_ids
        table = self.req_to_blocks[rid]
        for i in range(first, num_full):
            token_ids = tokens[i * self.block_size : (i + 1) * self.block_size]
            if self.block_pool.cache_full_block(table[i], hashes[i], token_ids):
                self._blocks_cached_this_step.add(table[i].block_id)
        self.num_cached_block[rid] = num_full

    def free(self, request: Request) -> None:
        """Release the request's blocks, tail first, and forget the request.

        Tail blocks hold the least shareable suffix, so they reach the free
        queue first and are evicted before the widely shared prefix blocks.
        A request that holds no blocks (e.g. still waiting) is a no-op.
        """
        rid = request.request_id
        blocks = self.req_to_blocks.pop(rid, [])
        self.block_pool.free_blocks(reversed(blocks))
        self.num_cached_block.pop(rid, None)
        self.req_to_block_hashes.pop(rid, None)
        self._queried.discard(rid)

    def fork(self, parent: Request, child: Request) -> None:
        """Let `child` share every block of `parent` (e.g. parallel sampling).

        The caller gives the child the parent's tokens and num_computed_tokens;
        the first write into a shared partial block then copies it.
        """
        if child.request_id in self.req_to_blocks:
            raise ValueError(f"fork target {child.request_id!r} already holds blocks")
        blocks = list(self.req_to_blocks.get(parent.request_id, []))
        self.block_pool.touch(blocks)
        self.req_to_blocks[child.request_id] = blocks
        self.num_cached_block[child.request_id] = self.num_cached_block.get(parent.request_id, 0)
