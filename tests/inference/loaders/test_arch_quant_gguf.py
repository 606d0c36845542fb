"""Quantized GGUFs of every architecture load to the logits of their dequantised weights, in
float32 and on the quantized matmul. One block type per family, in turn: the types gguf-py
can write (its K-quant quantisers are not implemented; the K-quant files are llama-quantize's,
tests/inference/loaders/test_gguf_kquants.py crafts their blocks)."""

from __future__ import annotations

import copy

import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize

import kernels
from inference.loaders import load_model
from tests.inference.model.test_archs_vs_hf import REL_TOL, laser_logits, rel_diff
from tests.inference.model.tiny_gguf import stored_type, write_arch_gguf
from tests.inference.model.tiny_models import ARCHS, PROBE, shared_tiny

TYPES = (Q.Q4_0, Q.Q5_0, Q.Q8_0, Q.Q5_1, Q.Q4_1)
CASES = [(arch, TYPES[i % len(TYPES)]) for i, arch in enumerate(sorted(ARCHS))]


def dequantised_copy(hf, qtype: Q):
    """``hf`` with each matrix replaced by what the GGUF holds of it."""
    out = copy.deepcopy(hf)
    with torch.no_grad():
        for _, p in out.named_parameters():
            kind = stored_type(qtype, tuple(p.shape))
            if kind not in (Q.F32, Q.F16):
                values = dequantize(quantize(p.detach().numpy(), kind), kind)
                p.copy_(torch.from_numpy(values.reshape(p.shape)))
    return out


@pytest.mark.parametrize("arch,qtype", CASES, ids=[f"{a}-{q.name}" for a, q in CASES])
def test_quantized_gguf_matches_its_dequantised_weights(arch, qtype, tmp_path):
    hf = shared_tiny(arch)
    path = tmp_path / f"{arch}.gguf"
    write_arch_gguf(path, hf, arch, qtype)
    with torch.no_grad():
        want = dequantised_copy(hf, qtype)(torch.tensor([PROBE[:30]])).logits[0]
    loaded = load_model(path, use_cache=False)
    assert rel_diff(laser_logits(loaded.model), want) <= REL_TOL
    loaded.model.pack_linears(kernels.QUANT)
    if loaded.model.quantized:  # the blocks as stored, activations quantised too
        assert rel_diff(laser_logits(loaded.model), want) <= 0.05
