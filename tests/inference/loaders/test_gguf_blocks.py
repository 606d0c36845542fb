"""The bundled GGUF's quantized blocks, kept as stored for the quantized matmul."""

from __future__ import annotations

import pytest
import torch

from inference.loaders import load_model
from kernels._cpu import quant

pytestmark = pytest.mark.skipif(quant.library() is None, reason="the C kernels do not build here")


@pytest.fixture(scope="module")
def loaded():
    return load_model()


def test_every_projection_and_the_head_keep_their_blocks(loaded) -> None:
    blocks = loaded.model.quant_blocks
    layers = loaded.config.num_layers
    assert len(blocks) == 4 * layers + 1
    assert blocks["embed_tokens"][0] == quant.Q8_0
    assert {blocks[f"layers.{i}.down_weight"][0] for i in range(layers)} == {quant.Q4_1}


@pytest.mark.parametrize("name", ["attn.qkv_weight", "attn.o_weight", "gate_up_weight",
                                  "down_weight"])
def test_the_blocks_are_the_weights_before_dequantisation(loaded, name) -> None:
    """Fused and with q/k rows back in HF order, the raw rows dequantise to exactly the
    float32 weights the model holds."""
    model = loaded.model
    for i in (0, len(model.layers) - 1):
        fmt, raw = model.quant_blocks[f"layers.{i}.{name}"]
        weight = model.get_parameter(f"layers.{i}.{name}")
        assert torch.equal(quant.dequantize(raw, fmt, *weight.shape), weight)


def test_a_second_load_reads_the_blocks_from_the_cache(tmp_path) -> None:
    first = load_model(cache_dir=tmp_path)
    second = load_model(cache_dir=tmp_path)
    assert not first.from_cache and second.from_cache
    a, b = first.model.quant_blocks, second.model.quant_blocks
    assert a.keys() == b.keys()
    assert all(a[k][0] == b[k][0] and torch.equal(a[k][1], b[k][1]) for k in a)
