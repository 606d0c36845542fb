"""Read a Hugging Face model directory: config, (sharded) safetensors, generation config."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from inference.model.config import ModelConfig

from .weights import WeightError


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def read_hf_config(directory: str | Path) -> ModelConfig:
    """`config.json` (+ `generation_config.json` eos ids) -> `ModelConfig`; `WeightError`
    names an architecture or setting no supported family has."""
    directory = Path(directory)
    cfg = _read_json(directory / "config.json")
    if not cfg:
        raise WeightError(f"{directory} has no config.json")
    if "text_config" in cfg:  # a multimodal wrapper (Gemma 3 4B+): its language model
        outer = {k: cfg[k] for k in ("eos_token_id", "bos_token_id", "tie_word_embeddings")
                 if k in cfg}
        cfg = {**outer, **cfg["text_config"]}
    try:
        return ModelConfig.from_hf_config(cfg, _read_json(directory / "generation_config.json"))
    except ValueError as exc:
        raise WeightError(f"{directory}: {exc}") from exc


def safetensors_files(directory: str | Path) -> list[Path]:
    """The shards named by `model.safetensors.index.json`, else every `*.safetensors` file."""
    directory = Path(directory)
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(_read_json(index)["weight_map"].values()))
        files = [directory / n for n in names]
    else:
        files = sorted(directory.glob("*.safetensors"))
    missing = [f for f in files if not f.is_file()]
    if not files or missing:
        raise WeightError(f"{directory}: no safetensors weights found (missing: {missing})")
    return files


# a multimodal wrapper's language model (transformers 4 and 5 layouts) -> the text model's
_TEXT_PREFIXES = (("language_model.model.", "model."), ("model.language_model.", "model."),
                  ("language_model.lm_head.", "lm_head."))
_OTHER_TOWERS = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                 "model.multi_modal_projector.")


def text_model_name(name: str) -> str | None:
    """A tensor's name in the text model (a multimodal wrapper's language model renamed, its
    vision tower and projector None: not read)."""
    if name.startswith(_OTHER_TOWERS):
        return None
    for prefix, text in _TEXT_PREFIXES:
        if name.startswith(prefix):
            return text + name[len(prefix):]
    return name


def read_hf_tensors(directory: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of the (text) model, by their HF names (memory-mapped where possible)."""
    tensors: dict[str, torch.Tensor] = {}
    for path in safetensors_files(directory):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                if (text := text_model_name(name)) is not None:
                    tensors[text] = f.get_tensor(name)
    return tensors


def read_chat_template(directory: str | Path) -> str | None:
    """`chat_template.jinja`, else `tokenizer_config.json`'s `chat_template` (the default one
    when it is a list of named templates)."""
    directory = Path(directory)
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = _read_json(directory / "tokenizer_config.json").get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template}
        template = named.get("default") or next(iter(named.values()), None)
    return template
