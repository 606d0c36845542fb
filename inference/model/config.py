"""Model configuration: shapes and numerics of one checkpoint of a supported family
(``inference.model.arch``: Llama 2/3, Mistral, Qwen 2/3, Gemma 2/3, Phi-3)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .arch import ArchSpec, arch_of_hf_type, arch_spec

ROPE_TYPES = ("default", "linear", "llama3", "freq_factors")
# Hugging Face activation names -> the MLP gate's activation (``ArchSpec.activation``)
_HF_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh",
                   "gelu_tanh": "gelu_tanh"}


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Shape and numerics of a decoder of family ``architecture`` (``arch.ARCHITECTURES``).

    `eos_token_ids` holds every id that ends generation (config, generation config and, for chat
    models, the end-of-turn token); `bos_token_id` may be None. ``rope_scaling`` is a Hugging
    Face ``rope_scaling`` dict (``rope_type`` in ``ROPE_TYPES``; ``freq_factors``: llama.cpp's
    ``rope_freqs`` divisors under ``factors``). Per checkpoint besides: attention and final
    logit soft-caps (``tanh(x / cap) * cap``; None: off), the sliding window and the layers
    that use it (``sliding_layers``), the rotary base of those layers (``rope_local_theta``;
    None: ``rope_theta``) and the attention scale (``query_scale``; None: ``head_dim ** -0.5``).
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    max_position: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    architecture: str = "llama"
    attn_softcap: float | None = None
    final_softcap: float | None = None
    sliding_window: int | None = None
    sliding_layers: tuple[int, ...] = ()
    rope_local_theta: float | None = None
    query_scale: float | None = None

    def __post_init__(self) -> None:
        positive = ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                    "num_kv_heads", "head_dim", "max_position")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"ModelConfig.{name} must be positive, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                             f"({self.num_kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        if self.rms_norm_eps <= 0 or self.rope_theta <= 0:
            raise ValueError("rms_norm_eps and rope_theta must be positive")
        arch_spec(self.architecture)  # UnsupportedArchitecture naming it
        kind = (self.rope_scaling or {}).get("rope_type", "default")
        if kind not in ROPE_TYPES:
            raise ValueError(f"rope scaling type {kind!r} is not supported; supported: "
                             f"{ROPE_TYPES}")
        if self.sliding_layers and not self.sliding_window:
            raise ValueError("sliding_layers given without a sliding_window")
        if any(not 0 <= i < self.num_layers for i in self.sliding_layers):
            raise ValueError(f"sliding_layers {self.sliding_layers} outside the layers")
        for tid in (*self.eos_token_ids, self.bos_token_id):
            if tid is not None and not 0 <= tid < self.vocab_size:
                raise ValueError(f"special token id {tid} outside the vocabulary")

    @property
    def spec(self) -> ArchSpec:
        """The family's fixed details (``inference.model.arch``)."""
        return arch_spec(self.architecture)

    @property
    def attn_scale(self) -> float:
        return self.query_scale if self.query_scale is not None else self.head_dim ** -0.5

    def layer_window(self, layer: int) -> int | None:
        """The sliding window of layer ``layer`` (None: it attends to the whole context, also
        where the window spans every position the model takes)."""
        window = self.sliding_window if layer in self.sliding_layers else None
        return window if window and window < self.max_position else None

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any],
                       generation_config: dict[str, Any] | None = None) -> ModelConfig:
        """Build from a Hugging Face `config.json` dict (and optional `generation_config.json`);
        ``UnsupportedArchitecture`` names a ``model_type`` of no supported family."""
        spec = arch_of_hf_type(cfg.get("model_type", "llama"))
        _check_hf_numerics(cfg, spec)
        heads = cfg["num_attention_heads"]
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
        eos: list[int] = []
        for source in (cfg, generation_config or {}):
            value = source.get("eos_token_id")
            for tid in value if isinstance(value, list) else [value]:
                if tid is not None and tid not in eos:
                    eos.append(int(tid))
        global_rope, local_rope = _rope_parameters(cfg)
        layers = cfg["num_hidden_layers"]
        sliding = _sliding_layers(cfg, spec, layers)
        scalar = cfg.get("query_pre_attn_scalar")
        return cls(
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=head_dim,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-5),
            rope_theta=_rope_theta(cfg, global_rope),
            rope_scaling=_rope_scaling(global_rope),
            max_position=cfg.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=spec.qkv_bias or bool(cfg.get("attention_bias", False)),
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=tuple(eos),
            architecture=spec.name,
            attn_softcap=cfg.get("attn_logit_softcapping"),
            final_softcap=cfg.get("final_logit_softcapping"),
            sliding_window=cfg.get("sliding_window") if sliding else None,
            sliding_layers=sliding,
            rope_local_theta=_local_theta(cfg, local_rope) if sliding else None,
            query_scale=None if scalar is None else float(scalar) ** -0.5,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (used by the weight cache)."""
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        data = dict(data)
        data["eos_token_ids"] = tuple(data.get("eos_token_ids", ()))
        data["sliding_layers"] = tuple(data.get("sliding_layers", ()))
        return cls(**data)


def _check_hf_numerics(cfg: dict[str, Any], spec: ArchSpec) -> None:
    """Refuse what the family's forward would get wrong: another MLP activation, a partial
    rotary embedding."""
    act = cfg.get("hidden_activation") or cfg.get("hidden_act") or spec.activation
    if _HF_ACTIVATIONS.get(act) != spec.activation:
        raise ValueError(f"{spec.name} with MLP activation {act!r} is not supported "
                         f"(expected {spec.activation})")
    params = cfg.get("rope_parameters") or {}
    partial = cfg.get("partial_rotary_factor") or params.get("partial_rotary_factor") or 1.0
    if float(partial) != 1.0:
        raise ValueError(f"{spec.name} with partial_rotary_factor {partial} is not supported")


def _rope_parameters(cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(global, local) rope parameter dicts: transformers 5 nests them per layer type (Gemma
    3), older configs keep ``rope_scaling`` beside ``rope_theta``."""
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if "full_attention" in params:
        return params["full_attention"] or {}, params.get("sliding_attention") or {}
    return params, {}


def _rope_theta(cfg: dict[str, Any], params: dict[str, Any]) -> float:
    # transformers 5 moved theta into `rope_parameters`; older configs keep `rope_theta`.
    return float(cfg.get("rope_theta") or params.get("rope_theta") or 10000.0)


def _local_theta(cfg: dict[str, Any], params: dict[str, Any]) -> float | None:
    value = cfg.get("rope_local_base_freq") or params.get("rope_theta")
    return None if value is None else float(value)


def _rope_scaling(scaling: dict[str, Any]) -> dict[str, Any] | None:
    if not scaling:
        return None
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    if kind == "default":
        return None
    rest = {k: v for k, v in scaling.items() if k not in ("rope_theta", "type")}
    return {**rest, "rope_type": kind}


def _sliding_layers(cfg: dict[str, Any], spec: ArchSpec, layers: int) -> tuple[int, ...]:
    """Layers with the sliding window: ``layer_types`` where given, else every layer (Mistral,
    Phi-3) or the family's pattern (``ArchSpec.sliding_every``) when a window is set."""
    if not cfg.get("sliding_window") or cfg.get("use_sliding_window") is False:
        return ()
    types = cfg.get("layer_types")
    if types:
        return tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    every = cfg.get("sliding_window_pattern") or spec.sliding_every
    return tuple(i for i in range(layers) if not every or (i + 1) % every)
