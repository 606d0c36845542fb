"""The model contract the runtime relies on.

- `ModelConfig`: frozen shape/numerics config (`from_hf_config`); `arch.ArchSpec`: what each
  supported family (`arch.ARCHITECTURES`: Llama, Mistral, Qwen 2/3, Gemma 2/3, Phi-3) changes
  in the one decoder, as data.
- `AttentionMetadata`: slot mapping, block tables, query starts, sequence lengths of one step.
- `LlamaModel`: `forward(input_ids, positions, kv_caches, meta) -> hidden`, plus `embed`,
  `layers[i](positions, hidden, residual, kv_cache, meta)`, `norm_out`, `compute_logits`,
  `kv_cache_shape`, `kv_bytes_per_block` for layer-level scheduling.
- `load_model(source=None, device=..., dtype=...) -> LoadedModel` (default: bundled SmolLM2 GGUF).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .arch import ARCHITECTURES, ArchSpec, UnsupportedArchitecture
from .config import ModelConfig
from .llama import DecoderLayer, LlamaModel
from .metadata import AttentionMetadata

if TYPE_CHECKING:
    from inference.loaders import LoadedModel


def load_model(source: str | None = None, **kwargs: Any) -> LoadedModel:
    """See `inference.loaders.load_model` (imported lazily: the loaders import this package)."""
    from inference.loaders import load_model as _load

    return _load(source, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "LoadedModel":
        from inference.loaders import LoadedModel

        return LoadedModel
    raise AttributeError(name)


__all__ = ["ARCHITECTURES", "ArchSpec", "AttentionMetadata", "DecoderLayer", "LlamaModel",
           "LoadedModel", "ModelConfig", "UnsupportedArchitecture", "load_model"]
