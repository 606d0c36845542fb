"""GGUF vocabularies rebuilt here tokenize llama.cpp's own test vectors
(``models/ggml-vocab-*.gguf`` with ``.inp``/``.out``, made from each model's reference
tokenizer) to the same ids.

The vocabularies live in the llama.cpp tree ``shared/peers/llama-server.sh`` fetches (0.7-8 MB
each, not committed): the tests skip where it is absent. The committed stand-in is
``tests/oracles/`` (a SentencePiece vocabulary cut from llama-spm's, with llama.cpp's ids).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from inference.loaders.gguf_loader import read_metadata
from inference.tokenizer import Tokenizer
from inference.tokenizer.gguf_vocab import UnsupportedTokenizer
from tests.oracles import llama_cpp

MODELS = llama_cpp.tree() / "models"
SEPARATOR = "\n__ggml_vocab_test__\n"
# SentencePiece vocabularies build in seconds; the big byte-level BPE ones (128-152 k merges)
# take 5-40 s each on a busy machine.
FAST = ["llama-spm", "phi-3"]
SLOW = ["llama-bpe", "qwen2", "gpt-2", "refact", "starcoder"]


@lru_cache(maxsize=2)
def tokenizer(name: str) -> Tokenizer:
    from gguf import GGUFReader

    path = MODELS / f"ggml-vocab-{name}.gguf"
    if not path.is_file():
        pytest.skip(f"{path} is absent (run shared/peers/llama-server.sh)")
    return Tokenizer.from_gguf_metadata(read_metadata(GGUFReader(str(path))))


def vectors(name: str) -> list[tuple[str, list[int]]]:
    base = MODELS / f"ggml-vocab-{name}.gguf"
    texts = Path(f"{base}.inp").read_text(encoding="utf-8").split(SEPARATOR)
    ids = Path(f"{base}.out").read_text(encoding="utf-8").split("\n")
    return [(t, [int(i) for i in line.split()]) for t, line in zip(texts, ids)]


def check(name: str) -> None:
    tok = tokenizer(name)
    cases = vectors(name)
    assert len(cases) > 40
    wrong = [(text, tok.encode(text, add_special_tokens=False), ids) for text, ids in cases
             if tok.encode(text, add_special_tokens=False) != ids]
    assert not wrong, wrong[:3]


@pytest.mark.parametrize("name", FAST)
def test_llama_cpp_vectors(name):
    check(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_llama_cpp_vectors_big_bpe(name):
    check(name)


def test_sentencepiece_conventions():
    tok = tokenizer("llama-spm")
    ids = tok.encode("Hello world", add_special_tokens=True)
    assert ids[0] == tok.bos_token_id == 1 and tok.eos_token == "</s>"
    assert [tok.id_to_token(i) for i in ids[1:]] == ["\u2581Hello", "\u2581world"]
    # a character no piece covers falls back to its UTF-8 bytes, and decodes back whole
    emoji = tok.encode("🦙", add_special_tokens=False)
    assert [tok.id_to_token(i) for i in emoji[-4:]] == ["<0xF0>", "<0x9F>", "<0xA6>", "<0x99>"]
    for text in ("🦙 llama", "  two spaces", "tab\tnew\nline", "ünïcödé 日本"):
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_unknown_tokenizer_kind_is_named():
    from inference.tokenizer import tokenizer_from_gguf

    with pytest.raises(UnsupportedTokenizer, match="'bert'"):
        tokenizer_from_gguf({"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": ["a"]})
