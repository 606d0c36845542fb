"""Map Hugging Face weight names (every supported family) onto the fused layout `LlamaModel`
uses."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from inference.model.config import ModelConfig


class WeightError(ValueError):
    """A checkpoint is missing a tensor or has one of the wrong shape."""


def _layer_norm_names(config: ModelConfig) -> dict[str, str]:
    """A layer's norms: `LlamaModel` name -> HF name (after `model.layers.N.`)."""
    names = {"input_norm": "input_layernorm"}
    if config.spec.sandwich_norms:
        names.update(post_attn_norm="pre_feedforward_layernorm",
                     attn_out_norm="post_attention_layernorm",
                     mlp_out_norm="post_feedforward_layernorm")
    else:
        names["post_attn_norm"] = "post_attention_layernorm"
    if config.spec.qk_norm:
        names.update({"attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm"})
    return names


def _fused(hf: Mapping[str, object], fused: str, parts: list[str]) -> list[str]:
    """HF names of one fused projection: the checkpoint's own fused tensor (Phi-3's `qkv_proj`,
    `gate_up_proj`) where it has one, else its parts in order."""
    return [fused] if fused in hf else parts


def _projection_names(hf: Mapping[str, object], i: int) -> dict[str, list[str]]:
    """A layer's projections: `LlamaModel` name -> the HF names concatenated into it."""
    p, att = f"model.layers.{i}.", f"model.layers.{i}.self_attn."
    return {
        "attn.qkv_weight": _fused(hf, att + "qkv_proj.weight",
                                  [att + f"{n}_proj.weight" for n in "qkv"]),
        "attn.o_weight": [att + "o_proj.weight"],
        "gate_up_weight": _fused(hf, p + "mlp.gate_up_proj.weight",
                                 [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"]),
        "down_weight": [p + "mlp.down_proj.weight"],
    }


def fuse_hf_state_dict(hf: Mapping[str, torch.Tensor], config: ModelConfig,
                       dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """HF names (`model.layers.0.self_attn.q_proj.weight`, ...) -> `LlamaModel` state dict.

    Q/K/V are concatenated into one weight and gate/up into another (Phi-3 stores them so), so
    the forward does one matmul for each. Norm weights get the family's offset
    (`ArchSpec.norm_offset`: Gemma's `1 + w`) once, here. Tensors are cast to `dtype`;
    `lm_head` is dropped when embeddings are tied.
    """

    def get(name: str) -> torch.Tensor:
        if name not in hf:
            raise WeightError(f"checkpoint has no tensor {name!r}")
        return hf[name].to(dtype)

    def norm(name: str) -> torch.Tensor:
        return get(name) + offset if offset else get(name)

    offset = config.spec.norm_offset
    out = {"embed_tokens": get("model.embed_tokens.weight"), "norm": norm("model.norm.weight")}
    if not config.tie_word_embeddings:
        out["lm_head"] = get("lm_head.weight")
    for i in range(config.num_layers):
        p, o = f"model.layers.{i}.", f"layers.{i}."
        for ours, theirs in _layer_norm_names(config).items():
            out[o + ours] = norm(p + theirs + ".weight")
        for ours, names in _projection_names(hf, i).items():
            out[o + ours] = torch.cat([get(n) for n in names], dim=0)
        if config.attention_bias:
            out[o + "attn.qkv_bias"] = torch.cat(
                [get(p + f"self_attn.{n}_proj.bias") for n in "qkv"], dim=0)
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
        for ours, names in _projection_names(blocks, i).items():
            put(f"layers.{i}.{ours}", names)
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
