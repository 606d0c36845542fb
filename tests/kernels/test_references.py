"""The PyTorch references against independent plain formulas (dense SDPA, textbook math)."""

from __future__ import annotations

import math

import pytest
import torch

from kernels.activation import silu_and_mul_reference
from kernels.decode_attention import paged_decode_attention_reference
from kernels.kv_cache import write_kv_reference
from kernels.prefill_attention import paged_prefill_attention_reference
from kernels.rms_norm import rms_norm_reference
from kernels.rotary import build_cos_sin_cache, rotary_embedding_reference
from tests.kernels.paged import dense_attention, dense_kv, make_paged, rel_err

DTYPES = [(torch.float32, 1e-5), (torch.float16, 1e-3), (torch.bfloat16, 1e-2)]


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize(
    "heads,kv_heads,head_dim,block_size,seq_lens",
    [(9, 3, 64, 16, [1, 17, 40]), (32, 8, 128, 32, [64, 5]), (1, 1, 64, 16, [16])],
)
def test_decode_reference_matches_dense(
    heads, kv_heads, head_dim, block_size, seq_lens, dtype, tol
):
    k_cache, v_cache, tables = make_paged(seq_lens, block_size, kv_heads, head_dim, dtype)
    q = torch.randn(len(seq_lens), heads, head_dim).to(dtype)
    scale = head_dim**-0.5
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    out = paged_decode_attention_reference(q, k_cache, v_cache, tables, lens, scale)
    for s, n in enumerate(seq_lens):
        k, v = dense_kv(k_cache, tables[s], n), dense_kv(v_cache, tables[s], n)
        assert rel_err(out[s : s + 1], dense_attention(q[s : s + 1], k, v, scale)) <= tol


@pytest.mark.parametrize("dtype,tol", DTYPES[:2])
@pytest.mark.parametrize(
    "heads,kv_heads,head_dim,block_size,seq_lens,q_lens",
    [
        (9, 3, 64, 16, [1, 40, 23, 33], [1, 40, 1, 9]),  # decode, full prefill, decode, chunk
        (4, 1, 128, 32, [70, 8], [3, 8]),
        (3, 3, 64, 16, [5, 6], [1, 1]),  # all decodes: the fast path
    ],
)
def test_prefill_reference_matches_dense(
    heads, kv_heads, head_dim, block_size, seq_lens, q_lens, dtype, tol
):
    k_cache, v_cache, tables = make_paged(seq_lens, block_size, kv_heads, head_dim, dtype)
    q = torch.randn(sum(q_lens), heads, head_dim).to(dtype)
    starts = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    scale = 0.3
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    out = paged_prefill_attention_reference(q, k_cache, v_cache, tables, starts, lens, scale)
    for s, n in enumerate(seq_lens):
        a, b = int(starts[s]), int(starts[s + 1])
        k, v = dense_kv(k_cache, tables[s], n), dense_kv(v_cache, tables[s], n)
        assert rel_err(out[a:b], dense_attention(q[a:b], k, v, scale)) <= tol


def test_rms_norm_reference_formula():
    x, r, w = torch.randn(5, 48), torch.randn(5, 48), torch.randn(48)
    h = x + r
    expect = h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    out, new_residual = rms_norm_reference(x, w, 1e-6, residual=r)
    torch.testing.assert_close(out, expect)
    torch.testing.assert_close(new_residual, h)
    torch.testing.assert_close(rms_norm_reference(h, w, 1e-6), expect)


def test_silu_and_mul_reference_formula():
    x = torch.randn(4, 2 * 24)
    gate, up = x[:, :24], x[:, 24:]
    torch.testing.assert_close(silu_and_mul_reference(x), gate / (1 + torch.exp(-gate)) * up)


def test_rotary_reference_matches_rotate_half():
    head_dim, theta = 64, 10000.0
    pos = torch.tensor([0, 5, 3, 127])
    q, k = torch.randn(4, 9, head_dim), torch.randn(4, 3, head_dim)
    cache = build_cos_sin_cache(head_dim, 128, theta)
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2).double() / head_dim)
    ang = torch.cat([pos.double()[:, None] * inv] * 2, dim=-1)[:, None]  # [T, 1, D]

    def rotate_half(x):
        return torch.cat((-x[..., head_dim // 2 :], x[..., : head_dim // 2]), dim=-1)

    expect_q = q.double() * ang.cos() + rotate_half(q.double()) * ang.sin()
    expect_k = k.double() * ang.cos() + rotate_half(k.double()) * ang.sin()
    q_out, k_out = rotary_embedding_reference(pos, q, k, cache)
    assert q_out is q and k_out is k  # in place
    torch.testing.assert_close(q.double(), expect_q, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(k.double(), expect_k, atol=1e-4, rtol=1e-4)


def test_llama3_scaling_bands():
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    plain = build_cos_sin_cache(128, 2, 500000.0)
    scaled = build_cos_sin_cache(128, 2, 500000.0, scaling=scaling)
    # row 1 = angle of position 1 = the frequency itself (via cos/sin halves)
    f_plain = torch.atan2(plain[1, 64:], plain[1, :64])
    f_scaled = torch.atan2(scaled[1, 64:], scaled[1, :64])
    wavelen = 2 * math.pi / f_plain
    high = wavelen < 8192 / 4.0
    low = wavelen > 8192 / 1.0
    torch.testing.assert_close(f_scaled[high], f_plain[high])
    torch.testing.assert_close(f_scaled[low], f_plain[low] / 8.0)
    mid = ~(high | low)
    assert bool(((f_scaled[mid] < f_plain[mid]) & (f_scaled[mid] > f_plain[mid] / 8.0)).all())


def test_write_kv_reference_skips_padding():
    k_cache = torch.zeros(3, 4, 2, 8)
    v_cache = torch.zeros(3, 4, 2, 8)
    key, value = torch.randn(3, 2, 8), torch.randn(3, 2, 8)
    write_kv_reference(key, value, k_cache, v_cache, torch.tensor([9, -1, 2]))
    torch.testing.assert_close(k_cache[2, 1], key[0])
    torch.testing.assert_close(v_cache[0, 2], value[2])
    assert int((k_cache != 0).any(-1).any(-1).sum()) == 2  # the padded token went nowhere


def test_decode_reference_repeats_and_follows_in_place_length_changes():
    """Repeated calls agree, and a length changed in place is honoured (nothing stale is read)."""
    k_cache, v_cache, tables = make_paged([20, 33], 16, 3, 64)
    q = torch.randn(2, 9, 64)
    lens = torch.tensor([20, 33], dtype=torch.int32)
    first = paged_decode_attention_reference(q, k_cache, v_cache, tables, lens, 0.125)
    again = paged_decode_attention_reference(q, k_cache, v_cache, tables, lens, 0.125)
    torch.testing.assert_close(again, first)
    lens[1] = 17  # shorter: the cached index would read past it
    out = paged_decode_attention_reference(q, k_cache, v_cache, tables, lens, 0.125)
    k, v = dense_kv(k_cache, tables[1], 17), dense_kv(v_cache, tables[1], 17)
    assert rel_err(out[1:], dense_attention(q[1:], k, v, 0.125)) <= 1e-5
