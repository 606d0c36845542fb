"""A small byte-level BPE tokenizer covering every byte (test helper)."""

from __future__ import annotations

from functools import lru_cache

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers

from inference.tokenizer import Tokenizer

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _byte_alphabet() -> list[str]:
    # GPT-2's printable stand-ins for the 256 byte values.
    return pre_tokenizers.ByteLevel.alphabet()


@lru_cache(maxsize=1)
def byte_tokenizer() -> Tokenizer:
    alphabet = sorted(_byte_alphabet())
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "w"), ("o", "r"),
              ("Ġw", "or"), ("Ġwor", "ld"), ("l", "d")]
    vocab = {t: i + len(SPECIALS) for i, t in enumerate(alphabet)}
    for i, s in enumerate(SPECIALS):
        vocab[s] = i
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    backend = HFTokenizer(models.BPE(vocab, merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(SPECIALS)
    return Tokenizer(backend, bos_token="<|im_start|>", eos_token="<|endoftext|>")
