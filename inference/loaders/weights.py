"""Map Hugging Face Llama weight names onto the fused layout `LlamaModel` uses."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from inference.model.config import ModelConfig


class WeightError(ValueError):
    """A checkpoint is missing a tensor or has one of the wrong shape."""


def fuse_hf_state_dict(hf: Mapping[str, torch.Tensor], config: ModelConfig,
                       dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """HF names (`model.layers.0.self_attn.q_proj.weight`, ...) -> `LlamaModel` state dict.

    Q/K/V are concatenated into one weight and gate/up into another, so the forward does one
    matmul for each. Tensors are cast to `dtype`; `lm_head` is dropped when embeddings are tied.
    """

    def get(name: str) -> torch.Tensor:
        if name not in hf:
            raise WeightError(f"checkpoint has no tensor {name!r}")
        return hf[name].to(dtype)

    out = {"embed_tokens": get("model.embed_tokens.weight"), "norm": get("model.norm.weight")}
    if not config.tie_word_embeddings:
        out["lm_head"] = get("lm_head.weight")
    for i in range(config.num_layers):
        p, o = f"model.layers.{i}.", f"layers.{i}."
        att = p + "self_attn."
        out[o + "input_norm"] = get(p + "input_layernorm.weight")
        out[o + "post_attn_norm"] = get(p + "post_attention_layernorm.weight")
        out[o + "attn.qkv_weight"] = torch.cat(
            [get(att + f"{n}_proj.weight") for n in "qkv"], dim=0)
        if config.attention_bias:
            out[o + "attn.qkv_bias"] = torch.cat(
                [get(att + f"{n}_proj.bias") for n in "qkv"], dim=0)
        out[o + "attn.o_weight"] = get(att + "o_proj.weight")
        out[o + "gate_up_weight"] = torch.cat(
            [get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")], dim=0)
        out[o + "down_weight"] = get(p + "mlp.down_proj.weight")
    return out


def fuse_hf_blocks(blocks: Mapping[str, tuple[int, torch.Tensor]],
                   config: ModelConfig) -> dict[str, tuple[int, torch.Tensor]]:
    """Raw GGUF blocks (HF names -> (GGML type, uint8 rows)) fused as ``fuse_hf_state_dict``
    fuses the weights: q/k/v and gate/up rows concatenated where all parts share one format
    (a fusion of mixed formats is left out: the quantized matmul then quantises the float32
    weight itself). Keys are the ``LlamaModel`` state-dict names."""
    out: dict[str, tuple[int, torch.Tensor]] = {}

    def put(key: str, names: list[str]) -> None:
        parts = [p for n in names if (p := blocks.get(n)) is not None]
        if len(parts) == len(names) and len({p[0] for p in parts}) == 1:
            out[key] = (parts[0][0], torch.cat([p[1] for p in parts], dim=0))

    put("embed_tokens", ["model.embed_tokens.weight"])
    if not config.tie_word_embeddings:
        put("lm_head", ["lm_head.weight"])
    for i in range(config.num_layers):
        p, o = f"model.layers.{i}.", f"layers.{i}."
        put(o + "attn.qkv_weight", [p + f"self_attn.{n}_proj.weight" for n in "qkv"])
        put(o + "attn.o_weight", [p + "self_attn.o_proj.weight"])
        put(o + "gate_up_weight", [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"])
        put(o + "down_weight", [p + "mlp.down_proj.weight"])
    return out


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Shape of every tensor in the fused state dict (to validate before building the model)."""
    from inference.model.llama import LlamaModel

    with torch.device("meta"):
        model = LlamaModel(config)
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def check_shapes(state: Mapping[str, torch.Tensor], config: ModelConfig) -> None:
    """Raise `WeightError` naming the first missing, extra or mis-shaped tensor."""
    want = expected_shapes(config)
    for name, shape in want.items():
        if name not in state:
            raise WeightError(f"missing weight {name!r}")
        if tuple(state[name].shape) != shape:
            raise WeightError(f"weight {name!r} has shape {tuple(state[name].shape)}, "
                              f"expected {shape}")
    extra = set(state) - set(want)
    if extra:
        raise WeightError(f"unexpected weights: {sorted(extra)[:5]}")


def build_model(state: dict[str, torch.Tensor], config: ModelConfig,
                device: torch.device | str = "cpu"):
    """Instantiate `LlamaModel` around `state` without allocating a second copy."""
    from inference.model.llama import LlamaModel

    check_shapes(state, config)
    with torch.device("meta"):
        model = LlamaModel(config)
    state = {k: v.to(device) for k, v in state.items()}
    model.load_state_dict(state, strict=True, assign=True)
    for p in model.parameters():
        p.requires_grad_(False)
    model.init_rotary(device)
    return model.eval()
