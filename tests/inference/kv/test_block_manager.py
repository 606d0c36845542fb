from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from inference.kv.block_manager import BlockManager, prefix_hashes
from tests.inference.factories import make_request

ROOT = Path(__file__).resolve().parents[3]


def seq(prompt_len=8, salt="t", rid="a"):
    return make_request(rid, prompt_len, salt=salt)[0]


def computed(kv, prompt_len, salt="t", rid="a"):
    """A sequence whose whole prompt is computed and whose full blocks are registered."""
    s = seq(prompt_len, salt=salt, rid=rid)
    kv.allocate_slots(s, prompt_len)
    s.num_computed_tokens = prompt_len
    kv.cache_computed_blocks(s)
    return s


def test_allocate_and_free_returns_every_block():
    kv = BlockManager(8, 4)
    s = seq(10)
    assert kv.allocate_slots(s, 10) == []
    assert len(s.block_ids) == 3 and kv.num_free_blocks == 5
    kv.free(s)
    assert kv.num_free_blocks == 8 and s.block_ids == []


def test_out_of_blocks_is_an_answer_not_an_exception():
    kv = BlockManager(2, 4)
    s = seq(12)
    assert kv.allocate_slots(s, 12) is None
    assert s.block_ids == [] and kv.num_free_blocks == 2


def test_prefix_cache_hit_needs_same_salt_and_leaves_one_token():
    kv = BlockManager(16, 4)
    kv.free(computed(kv, 9, salt="tenant-a"))
    other_tenant = seq(9, salt="tenant-b", rid="b")
    assert kv.match_prefix(other_tenant) == 0
    same = seq(9, salt="tenant-a", rid="c")
    assert kv.match_prefix(same) == 8  # two full blocks; the ninth token is computed again
    assert same.num_computed_tokens == 8
    exact = seq(8, salt="tenant-a", rid="d")
    assert kv.match_prefix(exact) == 4  # never the whole prompt: its last token needs logits


def test_cached_blocks_are_evicted_least_recent_first():
    kv = BlockManager(3, 4)
    kv.free(computed(kv, 8))  # two hashed free blocks, one plain free block
    b = seq(4, salt="other", rid="b")
    kv.allocate_slots(b, 4)
    assert kv.stats().cached_free_blocks == 2  # the plain block went first
    c = seq(8, salt="other2", rid="c")
    kv.allocate_slots(c, 8)
    assert kv.stats().cached_free_blocks == 0


def test_fork_shares_blocks_and_copies_on_write():
    kv = BlockManager(8, 4)
    parent, child = make_request("r", 6, n=2)
    kv.allocate_slots(parent, 6)
    parent.num_computed_tokens = 6
    kv.fork(parent, child)
    assert child.block_ids == parent.block_ids
    assert kv.blocks[parent.block_ids[1]].ref_count == 2
    child.num_computed_tokens = 5  # recompute the last prompt token, in the shared block
    shared = child.block_ids[1]
    copies = kv.allocate_slots(child, 1)
    assert copies == [(shared, child.block_ids[1])] and child.block_ids[1] != shared
    assert child.block_ids[0] == parent.block_ids[0]  # the full first block stays shared
    kv.free(parent)
    kv.free(child)
    assert kv.num_free_blocks == 8


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["alloc", "free", "fork"]), st.integers(0, 5),
                          st.integers(1, 9)), max_size=40))
def test_blocks_are_conserved(ops):
    kv = BlockManager(12, 4)
    live = {}
    for i, (op, slot, n) in enumerate(ops):
        s = live.get(slot)
        if op == "alloc":
            s = s or seq(n, rid=f"s{i}")
            if kv.allocate_slots(s, n) is not None:
                s.num_computed_tokens += n
                kv.cache_computed_blocks(s)
            live[slot] = s
        elif op == "free" and s is not None:
            kv.free(live.pop(slot))
        elif op == "fork" and s is not None and s.block_ids:
            child = seq(1, rid=f"c{i}")
            kv.fork(s, child)
            old = live.get((slot + 1) % 6)
            if old is not None:
                kv.free(old)
            live[(slot + 1) % 6] = child
        refs = {}
        for t in live.values():
            for b in t.block_ids:
                refs[b] = refs.get(b, 0) + 1
        assert all(kv.blocks[b].ref_count == c for b, c in refs.items())
        assert kv.num_free_blocks + len(refs) == kv.num_blocks


_HASH_SNIPPET = (
    "from inference.kv.block_manager import prefix_hashes;"
    "print(prefix_hashes(list(range(40)), 'tenant-7', 16))"
)


def test_block_hashes_are_the_same_in_every_process():
    import os
    import subprocess
    import sys

    outs = set()
    for seed in ("1", "2"):  # the per-process hash() of str differs between these seeds
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run([sys.executable, "-c", _HASH_SNIPPET], env=env, check=True,
                             capture_output=True, text=True, cwd=ROOT)
        outs.add(run.stdout)
    assert len(outs) == 1
    assert outs == {f"{prefix_hashes(list(range(40)), 'tenant-7', 16)}\n"}


def test_prefix_hashes_match_what_the_manager_registers():
    kv = BlockManager(16, 4)
    a = computed(kv, 13, salt="t")
    expected = prefix_hashes(a.tokens(0, 13), "t", 4)
    assert len(expected) == 3 and set(expected) <= set(kv._cached)
    assert prefix_hashes(a.tokens(0, 13), "u", 4)[0] not in kv._cached
