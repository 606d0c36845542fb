"""A tiny Llama whose rows are whole 32-blocks (the GGUF formats' unit), for the quantized
kernels' model tests and the model's characterisation."""

from __future__ import annotations

import torch

from inference.model import LlamaModel, ModelConfig
from kernels._cpu import quant


def block_model(*, blocks: bool, layers: int, seed: int, max_position: int,
                bias: bool = False, hidden: int = 64, intermediate: int = 96) -> LlamaModel:
    """With ``blocks`` its projections and head are Q8_0 values (as a GGUF's dequantised
    weights are), kept as ``quant_blocks`` as the loader keeps a GGUF's."""
    config = ModelConfig(vocab_size=96, hidden_size=hidden, intermediate_size=intermediate,
                         num_layers=layers,
                         num_heads=4, num_kv_heads=2, head_dim=16, max_position=max_position,
                         attention_bias=bias)
    model = LlamaModel(config)
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name else 0.2 * torch.randn_like(p))
            if blocks and p.dim() == 2:
                raw = quant.quantize_q8_0(p.contiguous())
                p.copy_(quant.dequantize(raw, quant.Q8_0, *p.shape))
                model.quant_blocks[name.removesuffix(".weight") if name == "embed_tokens"
                                   else name] = (quant.Q8_0, raw)
    model.init_rotary("cpu")
    return model
