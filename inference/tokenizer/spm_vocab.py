"""Rebuild a `tokenizers.Tokenizer` from a SentencePiece GGUF vocabulary
(``tokenizer.ggml.model = llama``: Llama 2, Mistral, Phi-3, Gemma).

llama.cpp tokenizes these as SentencePiece's BPE does: the text's spaces become ``▁`` (and one
``▁`` goes in front when ``add_space_prefix``), the characters are merged pairwise, always the
adjacent pair whose merged piece has the highest score, and a character no piece covers falls
back to its UTF-8 bytes as ``<0xXX>`` tokens. A `tokenizers` BPE model does the same when its
merges are ranked by the merged piece's score, so the merges are derived from the vocabulary
(every split of a piece into two pieces) rather than written by hand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

SPACE = "\u2581"  # ▁, SentencePiece's visible space
# llama.cpp token types (gguf.TokenType)
_NORMAL, _CONTROL, _USER_DEFINED, _BYTE = 1, 3, 4, 6


def spm_merges(tokens: Sequence[str], scores: Sequence[float],
               types: Sequence[int]) -> list[tuple[str, str]]:
    """Every (left, right) pair of vocabulary pieces that concatenates to a normal piece,
    best merged piece first (highest score, then lowest id, as llama.cpp's queue orders)."""
    vocab = {tok: i for i, tok in enumerate(tokens)}
    ranked: list[tuple[float, int, str, str]] = []
    for i, piece in enumerate(tokens):
        if types and types[i] != _NORMAL:
            continue
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                ranked.append((-scores[i], i, left, right))
    ranked.sort()
    return [(left, right) for _, _, left, right in ranked]


def spm_tokenizer_from_gguf(meta: Mapping[str, Any]) -> Tokenizer:
    """SentencePiece BPE with byte fallback from `tokenizer.ggml.{tokens,scores,token_type}`
    and `add_space_prefix` (default true, as llama.cpp assumes for `llama` vocabularies).

    Control tokens become special added tokens, user-defined ones plain added tokens (both
    kept whole); BOS/EOS are added by `gguf_vocab.add_bos_eos`.
    """
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    scores: list[float] = list(meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens))
    types: list[int] = list(meta.get("tokenizer.ggml.token_type") or [])
    vocab = {tok: i for i, tok in enumerate(tokens)}
    unk_id = meta.get("tokenizer.ggml.unknown_token_id")
    unk = tokens[unk_id] if unk_id is not None else None
    tok = Tokenizer(models.BPE(vocab=vocab, merges=spm_merges(tokens, scores, types),
                               unk_token=unk, fuse_unk=True, byte_fallback=True))
    prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    steps = [normalizers.Prepend(SPACE)] if prefix else []
    tok.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", SPACE)])
    undo = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    tok.decoder = decoders.Sequence([*undo, decoders.Strip(" ", 1, 0)] if prefix else undo)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == _CONTROL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t, ty in zip(tokens, types) if ty == _USER_DEFINED])
    return tok


__all__ = ["SPACE", "spm_merges", "spm_tokenizer_from_gguf"]
