"""A GGUF of Q5_0/Q5_1/K-quant tensors: the quantized matmul multiplies their blocks as stored
(no Q8_0 requantisation), and the model runs close to its dequantised weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize

import kernels
from inference.loaders import load_model
from inference.loaders.gguf_loader import unpermute_rotary
from kernels._cpu import quant
from tests.inference.loaders.gguf_writer import crafted_block_llama, write_tiny_gguf
from tests.inference.loaders.test_gguf_kquants import stored
from tests.inference.loaders.test_gguf_roundtrip import IDS, hf_logits, our_logits

pytestmark = pytest.mark.skipif(not quant.supported(),
                                reason="no vector path for the quantized matmul here")

# per layer: the type of (q, k, v), o, (gate, up), down; the head's
LAYER_TYPES = [(Q.Q4_K, Q.Q6_K, Q.Q4_K, Q.Q6_K), (Q.Q5_K, Q.Q5_0, Q.Q5_1, Q.Q4_K)]
HEAD_TYPE = Q.Q6_K


def native_llama():
    """A 2-layer Llama 256 wide whose projections are crafted blocks of LAYER_TYPES."""
    hf = crafted_block_llama(intermediate_size=512)
    rng = np.random.default_rng(47)
    raw: dict[str, tuple[np.ndarray, Q]] = {}

    def put(gguf_name: str, param: torch.Tensor, qtype: Q, heads: int = 0) -> None:
        data = stored(rng, qtype, *param.shape)
        raw[gguf_name] = (data, qtype)
        values = torch.from_numpy(dequantize(data, qtype))
        with torch.no_grad():  # the GGUF holds q/k rows permuted as llama.cpp's converter does
            param.copy_(unpermute_rotary(values, heads) if heads else values)

    put("output.weight", hf.lm_head.weight, HEAD_TYPE)
    for i, (layer, (qkv, o, gate_up, down)) in enumerate(zip(hf.model.layers, LAYER_TYPES)):
        attn, mlp = layer.self_attn, layer.mlp
        put(f"blk.{i}.attn_q.weight", attn.q_proj.weight, qkv, heads=4)
        put(f"blk.{i}.attn_k.weight", attn.k_proj.weight, qkv, heads=2)
        put(f"blk.{i}.attn_v.weight", attn.v_proj.weight, qkv)
        put(f"blk.{i}.attn_output.weight", attn.o_proj.weight, o)
        put(f"blk.{i}.ffn_gate.weight", mlp.gate_proj.weight, gate_up)
        put(f"blk.{i}.ffn_up.weight", mlp.up_proj.weight, gate_up)
        put(f"blk.{i}.ffn_down.weight", mlp.down_proj.weight, down)
    return hf, raw


def test_block_types_pack_as_stored_and_run_close_to_their_values(tmp_path, monkeypatch):
    from kernels import backends

    monkeypatch.setattr(backends, "SCREEN_TOP", 97)  # every logit rescored from the screen
    hf, raw = native_llama()
    path = tmp_path / "native.gguf"
    write_tiny_gguf(path, hf, Q.F32, raw=raw)
    loaded = load_model(path, use_cache=False)
    want = hf_logits(hf, IDS)
    torch.testing.assert_close(our_logits(loaded, IDS), want, atol=1e-4, rtol=1e-4)
    model = loaded.model
    assert model.pack_linears(kernels.QUANT) and model.quantized
    for layer, types in zip(model.layers, LAYER_TYPES):
        assert tuple(p.fmt for p in layer.backend.decode) == tuple(int(t) for t in types)
    assert model.packing.head_screen.fmt == int(HEAD_TYPE)
    got = our_logits(loaded, IDS)
    # the activations quantised per block of 32 in two parts (a prompt step's)
    assert (got - want).abs().max() <= 1e-4 * want.abs().max()
