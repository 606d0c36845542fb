"""Rebuild a `tokenizers.Tokenizer` from llama.cpp GGUF tokenizer metadata: byte-level BPE
(`gpt2`) here, SentencePiece (`llama`) in `spm_vocab`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from .spm_vocab import spm_tokenizer_from_gguf

# llama.cpp token types (gguf.TokenType)
_CONTROL, _USER_DEFINED = 3, 4

# GPT-2's split, which ByteLevel(use_regex=True) applies by itself.
_GPT2 = None
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# `tokenizer.ggml.pre` -> (split digits one by one first?, split regex or None for GPT-2's).
# Llama 3's pre-tokenizers also take a piece whole when the vocabulary has it ("ignore_merges",
# as its tokenizer.json and llama.cpp do) and add BOS unless the file says otherwise: `_LLAMA3_PRE`.
# llama.cpp treats smollm like starcoder: every digit its own piece, then GPT-2's regex, which is
# also what SmolLM2's own tokenizer.json does (Digits(individual) + ByteLevel).
_PRE_TOKENIZERS: dict[str, tuple[bool, str | None]] = {
    "default": (False, _GPT2), "gpt-2": (False, _GPT2), "gpt2": (False, _GPT2),
    "smollm": (True, _GPT2), "starcoder": (True, _GPT2), "refact": (True, _GPT2),
    "llama-bpe": (False, _LLAMA3), "llama3": (False, _LLAMA3), "llama-v3": (False, _LLAMA3),
    "smaug-bpe": (False, _LLAMA3), "qwen2": (False, _QWEN2),
}
_LLAMA3_PRE = frozenset({"llama-bpe", "llama3", "llama-v3"})


class UnsupportedTokenizer(ValueError):
    """The GGUF describes a tokenizer this loader cannot rebuild."""


def _pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    if pre not in _PRE_TOKENIZERS:
        raise UnsupportedTokenizer(f"tokenizer.ggml.pre = {pre!r} is not supported; known: "
                                   f"{sorted(_PRE_TOKENIZERS)}")
    digits, split = _PRE_TOKENIZERS[pre]
    steps: list[pre_tokenizers.PreTokenizer] = []
    if digits:
        steps.append(pre_tokenizers.Digits(individual_digits=True))
    if split is None:
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    else:
        steps += [pre_tokenizers.Split(Regex(split), behavior="isolated"),
                  pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    return pre_tokenizers.Sequence(steps)


def tokenizer_from_gguf(meta: Mapping[str, Any]) -> Tokenizer:
    """The GGUF's tokenizer: byte-level BPE (`gpt2`) or SentencePiece (`llama`), with BOS/EOS
    added where the file says `tokenizer.ggml.add_bos_token` / `add_eos_token`."""
    kind = meta.get("tokenizer.ggml.model")
    if kind == "gpt2":
        tok = bpe_tokenizer_from_gguf(meta)
        add_bos = meta.get("tokenizer.ggml.pre") in _LLAMA3_PRE
    elif kind == "llama":
        tok, add_bos = spm_tokenizer_from_gguf(meta), True  # llama.cpp's default for SPM
    else:
        raise UnsupportedTokenizer(f"tokenizer.ggml.model = {kind!r} is not supported; "
                                   "known: 'gpt2' (byte-level BPE), 'llama' (SentencePiece)")
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", add_bos))
    add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", False))
    tokens = meta["tokenizer.ggml.tokens"]
    ends = [(key, tokens[meta[f"tokenizer.ggml.{key}_token_id"]]) for key, on in
            (("bos", add_bos), ("eos", add_eos))
            if on and meta.get(f"tokenizer.ggml.{key}_token_id") is not None]
    if ends:
        named = dict(ends)
        head, tail = named.get("bos", ""), named.get("eos", "")
        single = " ".join(x for x in (head, "$A", tail) if x)
        pair = " ".join(x for x in (single, head, "$B", tail) if x)
        tok.post_processor = processors.TemplateProcessing(
            single=single, pair=pair, special_tokens=[(t, tok.token_to_id(t)) for t in
                                                      dict.fromkeys(named.values())])
    return tok


def bpe_tokenizer_from_gguf(meta: Mapping[str, Any]) -> Tokenizer:
    """Byte-level BPE from `tokenizer.ggml.{tokens,merges,token_type,pre}`.

    Control tokens become special added tokens (kept whole, skippable on decode); user-defined
    tokens become plain added tokens.
    """
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    pre = meta.get("tokenizer.ggml.pre", "default")
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False,
                               ignore_merges=pre in _LLAMA3_PRE))
    tok.pre_tokenizer = _pre_tokenizer(pre)
    tok.decoder = decoders.ByteLevel()
    types = list(meta.get("tokenizer.ggml.token_type") or [])
    special = [AddedToken(t, special=True, normalized=False)
               for t, ty in zip(tokens, types) if ty == _CONTROL]
    plain = [AddedToken(t, special=False, normalized=False)
             for t, ty in zip(tokens, types) if ty == _USER_DEFINED]
    tok.add_special_tokens(special)
    tok.add_tokens(plain)
    return tok
