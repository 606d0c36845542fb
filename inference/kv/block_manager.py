"""Paged KV-cache bookkeeping: which blocks each sequence holds. Plain Python, no tensors.

Blocks are reference counted: a forked choice shares its parent's blocks and copies the one it
writes into (copy-on-write); a full, computed block gets a hash of (salt, parent hash, tokens)
so a later sequence with the same prefix and salt reuses it (prefix caching). Freed blocks stay
cached until they are needed again, least recently freed first.

Running out of blocks is an answer (``None``), not an exception: the scheduler decides whom to
preempt.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from dataclasses import dataclass
from hashlib import blake2b

from inference.sequence import Sequence

BlockCopy = tuple[int, int]  # (source block id, destination block id)


@dataclass(slots=True)
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None


@dataclass(frozen=True, slots=True)
class KVStats:
    num_blocks: int
    used_blocks: int
    cached_free_blocks: int
    block_size: int

    @property
    def usage(self) -> float:
        return self.used_blocks / self.num_blocks if self.num_blocks else 0.0


def block_hash(parent: int | None, salt: str, tokens: list[int] | tuple[int, ...]) -> int:
    """Hash of one full block; chaining the parent makes it a hash of the whole prefix.

    Stable across processes and machines (blake2b, not the per-process ``hash()`` of a str), so
    replicas can publish the hashes they hold and a router can compute them for a prompt.
    The first block hashes the salt, length-prefixed; later blocks chain their parent instead.
    """
    if parent is None:
        raw = salt.encode()
        head = b"\x00" + len(raw).to_bytes(4, "little") + raw
    else:
        head = b"\x01" + parent.to_bytes(8, "little")
    digest = blake2b(head + array("q", tokens).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def prefix_hashes(tokens: list[int], salt: str, block_size: int) -> list[int]:
    """Chained hashes of every full block of ``tokens``: what a router looks up for a prompt."""
    hashes: list[int] = []
    for start in range(0, len(tokens) - block_size + 1, block_size):
        hashes.append(block_hash(hashes[-1] if hashes else None, salt,
                                 tokens[start:start + block_size]))
    return hashes


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int = 16, prefix_caching: bool = True):
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        # Free blocks in eviction order: the front is reused first.
        self._free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self._cached: dict[int, int] = {}  # block hash -> block id
        self._hashes: dict[str, list[int]] = {}  # seq id -> hashes of its computed full blocks

    # ---- queries -------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        """Blocks ``allocate_slots`` would take from the free list (copy-on-write included)."""
        total = -(-(seq.num_computed_tokens + num_new_tokens) // self.block_size)
        return max(0, total - len(seq.block_ids)) + int(self._needs_copy(seq))

    def stats(self) -> KVStats:
        cached_free = sum(1 for b in self._free if self.blocks[b].hash is not None)
        used = self.num_blocks - len(self._free)
        return KVStats(self.num_blocks, used, cached_free, self.block_size)

    def slot(self, seq: Sequence, pos: int) -> int:
        """Flat cache slot of token position ``pos``: block id * block size + offset."""
        return seq.block_ids[pos // self.block_size] * self.block_size + pos % self.block_size

    # ---- allocation ----------------------------------------------------------------------
    def match_prefix(self, seq: Sequence) -> int:
        """Attach cached blocks for the longest cached prefix of a sequence holding no blocks.

        Leaves at least one token to compute (its logits are needed). Returns the number of
        tokens served from the cache; ``seq.num_computed_tokens`` moves past them.
        """
        assert not seq.block_ids, "match_prefix runs before a sequence holds blocks"
        if not self.prefix_caching:
            return 0
        bs, parent, hashes = self.block_size, None, []
        for start in range(0, seq.num_tokens - 1 - bs + 1, bs):
            h = block_hash(parent, seq.salt, seq.tokens(start, start + bs))
            block_id = self._cached.get(h)
            if block_id is None:
                break
            self._take(block_id)
            seq.block_ids.append(block_id)
            hashes.append(h)
            parent = h
        self._hashes[seq.seq_id] = hashes
        cached = len(hashes) * bs
        seq.num_computed_tokens = seq.num_cached_tokens = cached
        return cached

    def allocate_slots(self, seq: Sequence, num_new_tokens: int) -> list[BlockCopy] | None:
        """Make room for ``num_new_tokens`` tokens after ``seq.num_computed_tokens``.

        Returns the block copies the runner must do first (copy-on-write), or None, changing
        nothing, when there are not enough free blocks.
        """
        total = -(-(seq.num_computed_tokens + num_new_tokens) // self.block_size)
        ids = seq.block_ids
        copy = self._needs_copy(seq)
        if max(0, total - len(ids)) + copy > len(self._free):  # blocks_needed, computed once
            return None
        if not copy and total <= len(ids):
            return []  # the common decode: its slot is in a block it holds already
        copies = []
        if copy:
            idx = seq.num_computed_tokens // self.block_size
            src = ids[idx]
            dst = self._pop_free()
            self.blocks[src].ref_count -= 1
            ids[idx] = dst
            copies.append((src, dst))
        while len(ids) < total:
            ids.append(self._pop_free())
        return copies

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Let ``child`` share every block of ``parent``; writes then copy (see allocate)."""
        assert not child.block_ids
        for b in parent.block_ids:
            self.blocks[b].ref_count += 1
        child.block_ids = list(parent.block_ids)
        self._hashes[child.seq_id] = list(self._hashes.get(parent.seq_id, ()))

    def free(self, seq: Sequence) -> None:
        """Release a sequence's blocks. Hashed blocks stay in the cache until reused."""
        for b in reversed(seq.block_ids):
            block = self.blocks[b]
            block.ref_count -= 1
            if block.ref_count == 0:
                self._free[b] = None
                if block.hash is None:  # nothing worth keeping: reuse it first
                    self._free.move_to_end(b, last=False)
        seq.block_ids = []
        self._hashes.pop(seq.seq_id, None)

    def cache_computed_blocks(self, seq: Sequence) -> None:
        """Register hashes of the sequence's full blocks that are now computed."""
        if not self.prefix_caching:
            return
        bs = self.block_size
        full = min(seq.num_computed_tokens // bs, len(seq.block_ids))
        hashes = self._hashes.get(seq.seq_id)
        if full <= (len(hashes) if hashes is not None else 0):
            return  # no block filled up since the last call: most decode steps
        if hashes is None:
            hashes = self._hashes[seq.seq_id] = []
        for i in range(len(hashes), full):
            parent = hashes[-1] if hashes else None
            h = block_hash(parent, seq.salt, seq.tokens(i * bs, (i + 1) * bs))
            hashes.append(h)
            block = self.blocks[seq.block_ids[i]]
            if block.hash is None and h not in self._cached:
                block.hash = h
                self._cached[h] = block.block_id

    # ---- internals -----------------------------------------------------------------------
    def _needs_copy(self, seq: Sequence) -> bool:
        idx = seq.num_computed_tokens // self.block_size
        return idx < len(seq.block_ids) and self.blocks[seq.block_ids[idx]].ref_count > 1

    def _pop_free(self) -> int:
        block_id, _ = self._free.popitem(last=False)
        self._evict(block_id)
        self.blocks[block_id].ref_count = 1
        return block_id

    def _take(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            del self._free[block_id]
        block.ref_count += 1

    def _evict(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.hash is not None:
            if self._cached.get(block.hash) == block_id:
                del self._cached[block.hash]
            block.hash = None
