"""Model configuration for the Llama family (SmolLM2, Llama 2/3, Mistral)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_SUPPORTED_ARCHITECTURES = ("llama", "mistral")


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Shape and numerics of a Llama-family decoder.

    `eos_token_ids` holds every id that ends generation (config, generation config and, for chat
    models, the end-of-turn token); `bos_token_id` may be None.
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
        if self.architecture not in _SUPPORTED_ARCHITECTURES:
            raise ValueError(f"unsupported architecture {self.architecture!r}; "
                             f"supported: {_SUPPORTED_ARCHITECTURES}")
        for tid in (*self.eos_token_ids, self.bos_token_id):
            if tid is not None and not 0 <= tid < self.vocab_size:
                raise ValueError(f"special token id {tid} outside the vocabulary")

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any],
                       generation_config: dict[str, Any] | None = None) -> ModelConfig:
        """Build from a Hugging Face `config.json` dict (and optional `generation_config.json`)."""
        model_type = cfg.get("model_type", "llama")
        heads = cfg["num_attention_heads"]
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
        eos: list[int] = []
        for source in (cfg, generation_config or {}):
            value = source.get("eos_token_id")
            for tid in value if isinstance(value, list) else [value]:
                if tid is not None and tid not in eos:
                    eos.append(int(tid))
        return cls(
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=head_dim,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-5),
            rope_theta=_rope_theta(cfg),
            rope_scaling=_rope_scaling(cfg),
            max_position=cfg.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=bool(cfg.get("attention_bias", False)),
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=tuple(eos),
            architecture=model_type if model_type in _SUPPORTED_ARCHITECTURES else "llama",
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (used by the weight cache)."""
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        data = dict(data)
        data["eos_token_ids"] = tuple(data.get("eos_token_ids", ()))
        return cls(**data)


def _rope_theta(cfg: dict[str, Any]) -> float:
    # transformers 5 moved theta into `rope_parameters`; older configs keep `rope_theta`.
    params = cfg.get("rope_parameters") or {}
    return float(cfg.get("rope_theta") or params.get("rope_theta") or 10000.0)


def _rope_scaling(cfg: dict[str, Any]) -> dict[str, Any] | None:
    scaling = cfg.get("rope_scaling") or cfg.get("rope_parameters") or None
    if not scaling:
        return None
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    if kind == "default":
        return None
    rest = {k: v for k, v in scaling.items() if k not in ("rope_theta", "type")}
    return {**rest, "rope_type": kind}
