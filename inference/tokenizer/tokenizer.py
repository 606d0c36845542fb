"""Tokenizer: a `tokenizers.Tokenizer` plus the special tokens generation needs."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as _HFTokenizer

from .gguf_vocab import tokenizer_from_gguf

# End-of-turn markers of common chat formats: generation stops on them even when the checkpoint
# only names a different EOS (ChatML's <|im_end|>, Llama 3's <|eot_id|>, ...).
_END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>")


class Tokenizer:
    """Encode/decode text and know the BOS/EOS tokens.

    Attributes:
        bos_token / eos_token: strings (or None) for chat templates.
        bos_token_id: id or None.
        eos_token_ids: every id that ends generation (EOS + end-of-turn tokens in the vocab).
    """

    def __init__(self, backend: _HFTokenizer, *, bos_token: str | None, eos_token: str | None,
                 extra_eos_ids: Iterable[int] = ()) -> None:
        self.backend = backend
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.bos_token_id = backend.token_to_id(bos_token) if bos_token else None
        eos = [backend.token_to_id(t) for t in (eos_token, *_END_OF_TURN) if t]
        self.eos_token_ids = frozenset(i for i in (*eos, *extra_eos_ids) if i is not None)
        self._special_ids = frozenset(
            i for i, tok in backend.get_added_tokens_decoder().items() if tok.special)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    @property
    def special_ids(self) -> frozenset[int]:
        return self._special_ids

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Text -> ids. Special tokens written in the text (`<|im_start|>`) stay whole.

        `add_special_tokens` lets the post-processor prepend BOS where the model wants it; pass
        False for text a chat template already rendered (it writes BOS itself).
        """
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend.id_to_token(token_id)

    # --- construction / persistence -------------------------------------------------------

    @classmethod
    def from_gguf_metadata(cls, meta: Mapping[str, Any]) -> Tokenizer:
        tokens = meta["tokenizer.ggml.tokens"]

        def name(key: str) -> str | None:
            i = meta.get(key)
            return tokens[i] if i is not None else None

        return cls(tokenizer_from_gguf(meta), bos_token=name("tokenizer.ggml.bos_token_id"),
                   eos_token=name("tokenizer.ggml.eos_token_id"))

    @classmethod
    def from_hf_dir(cls, directory: str | Path,
                    extra_eos_ids: Iterable[int] = ()) -> Tokenizer:
        """`tokenizer.json` + the BOS/EOS names in `tokenizer_config.json`."""
        directory = Path(directory)
        backend = _HFTokenizer.from_file(str(directory / "tokenizer.json"))
        cfg_path = directory / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.is_file() else {}
        return cls(backend, bos_token=_token_name(cfg.get("bos_token")),
                   eos_token=_token_name(cfg.get("eos_token")), extra_eos_ids=extra_eos_ids)

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend.to_str(), "bos_token": self.bos_token,
                "eos_token": self.eos_token, "eos_token_ids": sorted(self.eos_token_ids)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Tokenizer:
        return cls(_HFTokenizer.from_str(data["backend"]), bos_token=data["bos_token"],
                   eos_token=data["eos_token"], extra_eos_ids=data.get("eos_token_ids", ()))


def _token_name(value: Any) -> str | None:
    # tokenizer_config.json writes special tokens either as strings or as AddedToken dicts.
    if isinstance(value, dict):
        return value.get("content")
    return value
