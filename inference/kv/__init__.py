"""Paged KV cache: block bookkeeping (plain Python) shared by the engine and the simulator."""

from inference.kv.block_manager import BlockCopy, BlockManager, KVStats

__all__ = ["BlockCopy", "BlockManager", "KVStats"]
