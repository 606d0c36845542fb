"""The CPU decode path (grouped query rows, row gather, additive mask) against a naive loop."""

from __future__ import annotations

import math

import pytest
import torch

from inference.model.metadata import AttentionMetadata
from kernels import decode_attention
from kernels.decode_attention import decode_rows, paged_decode_attention_reference
from kernels.kv_cache import write_kv_reference
from tests.kernels.paged import make_paged, rel_err


def naive_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 tables: torch.Tensor, seq_lens: list[int], scale: float) -> torch.Tensor:
    """One sequence, one head, one token at a time in float64: a textbook softmax."""
    block_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = q.shape[1] // kv_heads
    out = torch.empty(q.shape, dtype=torch.float64)
    for s, n in enumerate(seq_lens):
        for h in range(q.shape[1]):
            g = h // group
            keys = [k_cache[int(tables[s, t // block_size]), t % block_size, g].double()
                    for t in range(n)]
            vals = [v_cache[int(tables[s, t // block_size]), t % block_size, g].double()
                    for t in range(n)]
            logits = [scale * float(q[s, h].double() @ key) for key in keys]
            top = max(logits)
            weights = [math.exp(x - top) for x in logits]
            total = sum(weights)
            out[s, h] = sum(w / total * val for w, val in zip(weights, vals))
    return out


def poison(cache: torch.Tensor, junk: float) -> torch.Tensor:
    """``make_paged`` leaves NaN in every unwritten row; swap in other junk (inf, huge)."""
    return torch.where(cache.isnan(), torch.full_like(cache, junk), cache)


@pytest.mark.parametrize(
    "heads,kv_heads,head_dim,block_size,seq_lens",
    [
        (9, 3, 64, 16, [1, 15, 16, 17, 150, 33]),  # SmolLM2 heads; lengths around page edges
        (9, 3, 64, 16, [1]),  # a lone one-token sequence
        (8, 2, 32, 8, [5, 1, 24, 9]),  # GQA groups of 4
        (4, 1, 16, 4, [7, 2]),  # MQA
        (2, 2, 8, 16, [3, 40]),  # MHA
    ],
)
@pytest.mark.parametrize("junk", [float("nan"), float("inf"), float("-inf"), 3e38])
def test_decode_matches_naive_loop_and_ignores_junk(heads, kv_heads, head_dim, block_size,
                                                    seq_lens, junk):
    k_cache, v_cache, tables = make_paged(seq_lens, block_size, kv_heads, head_dim)
    k_cache, v_cache = poison(k_cache, junk), poison(v_cache, junk)
    q = torch.randn(len(seq_lens), heads, head_dim)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    scale = head_dim**-0.5
    out = paged_decode_attention_reference(q, k_cache, v_cache, tables, lens, scale)
    assert out.dtype == torch.float32 and bool(out.isfinite().all())
    ref = naive_decode(q, k_cache, v_cache, tables, seq_lens, scale)
    for s in range(len(seq_lens)):
        assert rel_err(out[s], ref[s]) <= 1e-6


def test_decode_reads_no_stale_row_of_a_reused_block():
    """A block freed by a longer sequence and handed to a shorter one keeps old (finite) rows
    past the new length: they must not count."""
    k_cache, v_cache, tables = make_paged([20, 3], 16, 3, 64)
    q = torch.randn(2, 9, 64)
    lens = torch.tensor([20, 3], dtype=torch.int32)
    clean = paged_decode_attention_reference(q, k_cache, v_cache, tables, lens, 0.125)
    stale = int(tables[1, 0])
    k_cache[stale, 3:], v_cache[stale, 3:] = 50.0, -50.0  # what the previous owner left
    k_cache[int(tables[0, 1]), 4:] = 1e30  # and past the longer sequence's end
    torch.testing.assert_close(
        paged_decode_attention_reference(q, k_cache, v_cache, tables, lens, 0.125), clean,
        rtol=0, atol=0)


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
def test_decode_half_caches(dtype, tol):
    seq_lens = [1, 17, 40]
    k_cache, v_cache, tables = make_paged(seq_lens, 16, 3, 64, dtype)
    q = torch.randn(3, 9, 64).to(dtype)
    out = paged_decode_attention_reference(q, k_cache, v_cache, tables,
                                           torch.tensor(seq_lens, dtype=torch.int32), 0.125)
    assert out.dtype == dtype
    assert rel_err(out, naive_decode(q, k_cache, v_cache, tables, seq_lens, 0.125)) <= tol


@pytest.mark.parametrize("chunk_bytes", [1, 2 * 2 * 48 * 64 * 4 * 2])  # 1 sequence, 2
def test_decode_in_chunks_of_sequences(chunk_bytes, monkeypatch):
    monkeypatch.setattr(decode_attention, "CHUNK_BYTES", chunk_bytes)
    seq_lens = [1, 40, 17, 33, 5]
    k_cache, v_cache, tables = make_paged(seq_lens, 16, 2, 64)
    q = torch.randn(5, 6, 64)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    index = decode_rows(tables, lens, 40, 16, 2, 64)
    assert index[2] == ((0, 1), (1, 2), (2, 3), (3, 4), (4, 5)) if chunk_bytes == 1 else \
        index[2] == ((0, 2), (2, 4), (4, 5))
    out = paged_decode_attention_reference(q, k_cache, v_cache, tables, lens, 0.125, index)
    assert rel_err(out, naive_decode(q, k_cache, v_cache, tables, seq_lens, 0.125)) <= 1e-6


def test_decode_rows_point_past_each_length_at_the_first_row():
    tables = torch.tensor([[4, 2, -1], [7, 99, -1], [1, 0, 3]], dtype=torch.int32)
    rows, mask, chunks = decode_rows(tables, torch.tensor([20, 3, 33], dtype=torch.int32), 33,
                                     16, 1, 64)
    assert chunks == ((0, 3),)
    rows = rows.view(3, 48)
    heads = decode_rows(tables, torch.tensor([20, 3, 33], dtype=torch.int32), 33, 16, 3, 64)[0]
    torch.testing.assert_close(heads.view(3, 3, 48), rows[:, None] * 3 + torch.arange(3)[:, None])
    assert mask.shape == (3, 1, 1, 48) and mask.dtype == torch.float32
    assert rows[0, :16].tolist() == list(range(64, 80))
    assert rows[0, 16:20].tolist() == list(range(32, 36))
    assert rows[0, 20:].eq(64).all() and rows[1, 3:].eq(112).all()  # never -1 or block 99
    assert rows[2, 32] == 48 and rows[2, 33:].eq(16).all()
    flat = mask.view(3, 48)
    for s, n in enumerate([20, 3, 33]):
        assert flat[s, :n].eq(0).all() and flat[s, n:].eq(float("-inf")).all()


def test_metadata_index_is_built_once_and_matches_the_uncached_call():
    seq_lens = [5, 33, 1]
    k_cache, v_cache, tables = make_paged(seq_lens, 16, 3, 64)
    meta = AttentionMetadata.build([t[t >= 0].tolist()[: -(-n // 16)] for t, n in
                                    zip(tables, seq_lens)], seq_lens, [1, 1, 1], 16)
    index = meta.decode_index(16, 3, 64)
    assert meta.decode_index(16, 3, 64) is index
    q = torch.randn(3, 9, 64)
    torch.testing.assert_close(
        paged_decode_attention_reference(q, k_cache, v_cache, meta.block_tables, meta.seq_lens,
                                         0.125, index),
        paged_decode_attention_reference(q, k_cache, v_cache, tables, meta.seq_lens, 0.125))


@pytest.mark.parametrize("slots", [[], [-1, -1], [3, -1, 0]])
def test_write_kv_reference_skips_negative_slots(slots):
    k_cache, v_cache = torch.zeros(2, 2, 1, 4), torch.zeros(2, 2, 1, 4)
    key, value = torch.randn(len(slots), 1, 4), torch.randn(len(slots), 1, 4)
    write_kv_reference(key, value, k_cache, v_cache, torch.tensor(slots, dtype=torch.int64))
    expect_k, expect_v = torch.zeros(4, 1, 4), torch.zeros(4, 1, 4)
    for i, slot in enumerate(slots):
        if slot >= 0:
            expect_k[slot], expect_v[slot] = key[i], value[i]
    torch.testing.assert_close(k_cache.flatten(0, 1), expect_k, rtol=0, atol=0)
    torch.testing.assert_close(v_cache.flatten(0, 1), expect_v, rtol=0, atol=0)
