"""RMSNorm, SiLU-and-mul, rotary and KV write: Triton (interpreter) against the references."""

from __future__ import annotations

import pytest
import torch

from kernels._triton.activation import silu_and_mul_triton
from kernels._triton.kv_cache import write_kv_triton
from kernels._triton.rms_norm import rms_norm_triton
from kernels._triton.rotary import rotary_embedding_triton
from kernels.activation import silu_and_mul_reference
from kernels.kv_cache import write_kv_reference
from kernels.rms_norm import rms_norm_reference
from kernels.rotary import build_cos_sin_cache, rotary_embedding_reference
from tests.kernels.paged import rel_err

DTYPES = [(torch.float32, 1e-5), (torch.float16, 1e-3)]


def _poison(t: torch.Tensor) -> torch.Tensor:
    return t.fill_(float("nan"))


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("num_tokens,hidden", [(1, 64), (7, 576), (3, 1000)])
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm(num_tokens, hidden, with_residual, dtype, tol, monkeypatch):
    x = torch.randn(num_tokens, hidden).to(dtype)
    weight = (1 + 0.1 * torch.randn(hidden)).to(dtype)
    residual = torch.randn(num_tokens, hidden).to(dtype) if with_residual else None
    empty_like = torch.empty_like
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: _poison(empty_like(*a, **k)))
    out = rms_norm_triton(x, weight, 1e-5, residual)
    ref = rms_norm_reference(x, weight, 1e-5, residual)
    if with_residual:
        assert rel_err(out[1], ref[1]) <= tol
        out, ref = out[0], ref[0]
    assert rel_err(out, ref) <= tol


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("num_tokens,d", [(1, 64), (5, 1536), (2, 1100)])
def test_silu_and_mul(num_tokens, d, dtype, tol, monkeypatch):
    x = torch.randn(num_tokens, 2 * d).to(dtype)
    empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: _poison(empty(*a, **k)))
    assert rel_err(silu_and_mul_triton(x), silu_and_mul_reference(x)) <= tol


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(1, 1, 64), (9, 3, 64), (32, 8, 128)])
def test_rotary_on_fused_qkv_views(heads, kv_heads, head_dim, dtype, tol):
    num_tokens = 5
    cache = build_cos_sin_cache(head_dim, 300, 10000.0, dtype=dtype)
    positions = torch.tensor([0, 1, 299, 17, 17])
    # q and k as strided slices of one [T, (H + 2 KVH) * D] projection, as the model has them
    qkv = torch.randn(num_tokens, (heads + 2 * kv_heads) * head_dim).to(dtype)
    qkv_ref = qkv.clone()

    def split(t):
        q = t[:, : heads * head_dim].view(num_tokens, heads, head_dim)
        k = t[:, heads * head_dim : (heads + kv_heads) * head_dim]
        return q, k.view(num_tokens, kv_heads, head_dim)

    rotary_embedding_reference(positions, *split(qkv_ref), cache)
    q, k = rotary_embedding_triton(positions, *split(qkv), cache)
    q_ref, k_ref = split(qkv_ref)
    assert rel_err(q, q_ref) <= tol and rel_err(k, k_ref) <= tol
    untouched = (heads + kv_heads) * head_dim
    assert torch.equal(qkv[:, untouched:], qkv_ref[:, untouched:])  # v untouched


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("kv_heads,head_dim,block_size", [(1, 64, 16), (3, 64, 32), (8, 128, 16)])
def test_write_kv(kv_heads, head_dim, block_size, dtype):
    num_blocks, num_tokens = 4, 6
    shape = (num_blocks, block_size, kv_heads, head_dim)
    k_cache, v_cache = torch.randn(shape).to(dtype), torch.randn(shape).to(dtype)
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    key = torch.randn(num_tokens, kv_heads, head_dim).to(dtype)
    value = torch.randn(num_tokens, kv_heads, head_dim).to(dtype)
    slots = torch.randperm(num_blocks * block_size)[:num_tokens]
    slots[2] = -1  # padding token
    write_kv_reference(key, value, k_ref, v_ref, slots)
    write_kv_triton(key, value, k_cache, v_cache, slots)
    assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref)
    assert not torch.equal(k_cache.flatten(0, 1)[slots[0]], torch.zeros(kv_heads, head_dim))
