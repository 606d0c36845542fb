"""Q5_0/Q5_1 and the K-quants load as gguf-py dequantises them; rope factors are refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGUFReader
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize

from inference.loaders import WeightError, load_model
from inference.loaders.gguf_loader import dequantize_tensor
from tests.inference.loaders.gguf_writer import (
    crafted_block_llama,
    write_one_tensor,
    write_tiny_gguf,
)
from tests.inference.loaders.test_gguf_roundtrip import IDS, hf_logits, our_logits
from tests.inference.model.tiny_llama import make_hf_llama

K_TYPES = [Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K]
# Byte offsets of each K block's fp16 scales (d, dmin) and the largest |code x scale| product,
# to keep crafted values finite and about ±peak (llama.cpp's block_q*_K layouts).
_K_FP16 = {Q.Q2_K: (80, 82), Q.Q3_K: (108,), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}
_K_PEAK = {Q.Q2_K: 45, Q.Q3_K: 128, Q.Q4_K: 945, Q.Q5_K: 1953, Q.Q6_K: 4064}


def random_blocks(rng: np.random.Generator, qtype: Q, rows: int, cols: int,
                  peak: float = 0.1) -> np.ndarray:
    """Random K-quant rows (gguf-py cannot quantise to these types) with finite fp16 scales."""
    block, size = GGML_QUANT_SIZES[qtype]
    data = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    for off in _K_FP16[qtype]:
        scale = rng.uniform(0.5, 1.0, (rows, cols // block)) * peak / _K_PEAK[qtype]
        data[..., off:off + 2] = scale.astype(np.float16)[..., None].view(np.uint8)
    return data.reshape(rows, -1)


def stored(rng: np.random.Generator, qtype: Q, rows: int, cols: int) -> np.ndarray:
    if qtype in K_TYPES:
        return random_blocks(rng, qtype, rows, cols)
    return quantize((rng.standard_normal((rows, cols)) * 0.05).astype(np.float32), qtype)


@pytest.mark.parametrize("qtype", [Q.Q5_0, Q.Q5_1, *K_TYPES])
@pytest.mark.parametrize("rows,blocks", [(1, 1), (3, 3), (7, 2)])
def test_block_type_loads_as_gguf_dequantizes(tmp_path, qtype, rows, blocks):
    rng = np.random.default_rng(int(qtype) * 10 + rows)
    cols = GGML_QUANT_SIZES[qtype][0] * blocks
    data = stored(rng, qtype, rows, cols)
    tensor = write_one_tensor(tmp_path / "t.gguf", data, qtype)
    got = dequantize_tensor(tensor.data, tensor.tensor_type).numpy()
    assert got.shape == (rows, cols) and got.dtype == np.float32
    want = dequantize(data, qtype)
    np.testing.assert_array_equal(got, want)
    assert np.isfinite(got).all() and 0 < np.abs(got).max() < 1


def test_q4_k_block_decodes_by_llama_cpp_layout():
    """One Q4_K block built by hand: y = d * scale_j * q - dmin * min_j per 32-wide sub-block."""
    block = np.zeros(144, np.uint8)
    block[0:2] = np.array([1.0], np.float16).view(np.uint8)   # d
    block[2:4] = np.array([0.5], np.float16).view(np.uint8)   # dmin
    block[4:8] = [1, 2, 3, 4]      # scales of sub-blocks 0-3 (6 bits)
    block[8:12] = [1, 1, 1, 1]     # mins of sub-blocks 0-3
    block[12:16] = 0x25            # sub-blocks 4-7: scale 5 (low nibble), min 2 (high nibble)
    low = np.arange(128) % 16
    block[16:] = low | ((15 - low) << 4)
    scales, mins = [1, 2, 3, 4, 5, 5, 5, 5], [1, 1, 1, 1, 2, 2, 2, 2]
    want = np.concatenate([
        scales[j] * (low[32 * (j // 2):32 * (j // 2) + 32] if j % 2 == 0
                     else 15 - low[32 * (j // 2):32 * (j // 2) + 32]) - 0.5 * mins[j]
        for j in range(8)])
    got = dequantize_tensor(block[None, :], Q.Q4_K).numpy()
    np.testing.assert_array_equal(got, want[None, :].astype(np.float32))


def test_missing_dequantizer_is_named(monkeypatch):
    from inference.loaders import gguf_loader

    def missing(data, qtype):
        raise NotImplementedError

    monkeypatch.setattr(gguf_loader, "dequantize", missing)
    with pytest.raises(WeightError, match="Q6_K.*newer gguf"):
        dequantize_tensor(np.zeros((1, 210), np.uint8), Q.Q6_K)


def kquant_llama():
    """A 2-layer Llama 256 wide (so K-quant blocks fit a row), weights from crafted blocks."""
    hf = crafted_block_llama(intermediate_size=256)
    rng = np.random.default_rng(47)
    raw: dict[str, tuple[np.ndarray, Q]] = {}

    def put(gguf_name: str, param: torch.Tensor, qtype: Q) -> None:
        data = stored(rng, qtype, *param.shape)
        raw[gguf_name] = (data, qtype)
        with torch.no_grad():
            param.copy_(torch.from_numpy(dequantize(data, qtype)))

    put("token_embd.weight", hf.model.embed_tokens.weight, Q.Q5_1)
    put("output.weight", hf.lm_head.weight, Q.Q5_0)
    for i, layer in enumerate(hf.model.layers):
        parts = [("attn_v", layer.self_attn.v_proj), ("attn_output", layer.self_attn.o_proj),
                 ("ffn_gate", layer.mlp.gate_proj), ("ffn_up", layer.mlp.up_proj),
                 ("ffn_down", layer.mlp.down_proj)]
        for k, (name, module) in enumerate(parts):
            put(f"blk.{i}.{name}.weight", module.weight, K_TYPES[(k + i) % len(K_TYPES)])
    return hf, raw


def test_kquant_model_runs_like_its_dequantised_weights(tmp_path):
    hf, raw = kquant_llama()
    path = tmp_path / "kq.gguf"
    write_tiny_gguf(path, hf, Q.F32, raw=raw)
    types = {t.name: t.tensor_type for t in GGUFReader(str(path)).tensors}
    assert types["blk.1.ffn_down.weight"] == Q.Q2_K and types["output.weight"] == Q.Q5_0
    loaded = load_model(path, use_cache=False)
    want = hf_logits(hf, IDS)
    assert want.std() > 0.1  # the crafted weights carry signal through the forward
    torch.testing.assert_close(our_logits(loaded, IDS), want, atol=1e-4, rtol=1e-4)


def rope_gguf(tmp_path, factors: np.ndarray):
    hf = make_hf_llama("tied_mha")
    path = tmp_path / "rope.gguf"
    write_tiny_gguf(path, hf, Q.F32, raw={"rope_freqs.weight": (factors, Q.F32)})
    return hf, path


def test_rope_factors_divide_the_frequencies(tmp_path):
    """Non-unit factors apply (tests/inference/model/test_archs_vs_hf.py checks Llama 3's
    against transformers); unit ones change nothing."""
    factors = np.linspace(1, 8, 8, dtype=np.float32)
    hf, path = rope_gguf(tmp_path, factors)
    loaded = load_model(path, use_cache=False)
    assert loaded.config.rope_scaling == {"rope_type": "freq_factors",
                                          "factors": factors.tolist()}
    want = hf_logits(hf, IDS)
    assert (our_logits(loaded, IDS) - want).abs().max() > 1e-3 * want.abs().max()


def test_unit_rope_factors_load(tmp_path):
    hf, path = rope_gguf(tmp_path, np.ones(8, np.float32))
    loaded = load_model(path, use_cache=False)
    torch.testing.assert_close(our_logits(loaded, IDS), hf_logits(hf, IDS), atol=1e-4, rtol=0)
