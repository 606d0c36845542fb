"""The tokenizer rebuilt from the SmolLM2 GGUF agrees with transformers' GGUF tokenizer."""

from __future__ import annotations

import pytest

from inference.loaders import default_model_path
from inference.loaders.gguf_loader import read_metadata
from inference.tokenizer import Tokenizer

pytestmark = pytest.mark.slow

TEXTS = [
    "Hello, world! How are you today?",
    "héllo wörld — ünïcödé ✓ 日本語のテキスト Ελληνικά",
    "def f(x):\n    return x**2  # square\n\tif a != b: pass\n",
    "emoji 🤖👍🏽 🇫🇷 family 👨‍👩‍👧 end",
    "  leading spaces,\n\n\ttabs and trailing  ",
    "<|im_start|>user\nHi there<|im_end|>\n",
    "numbers 12345 and 3.14159, year 2026",
]


@pytest.fixture(scope="module")
def ours():
    from gguf import GGUFReader

    return Tokenizer.from_gguf_metadata(read_metadata(GGUFReader(str(default_model_path()))))


@pytest.fixture(scope="module")
def reference():
    from transformers import AutoTokenizer

    path = default_model_path()
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


@pytest.mark.parametrize("text", TEXTS)
def test_same_ids_and_text_as_transformers(ours, reference, text):
    ids = ours.encode(text, add_special_tokens=False)
    assert ids == reference.encode(text, add_special_tokens=False)
    assert ours.decode(ids, skip_special_tokens=False) == text
    assert ours.decode(ids) == reference.decode(ids, skip_special_tokens=True)


def test_special_tokens_and_digits(ours):
    assert ours.encode("<|im_start|><|im_end|>", add_special_tokens=False) == [1, 2]
    assert ours.bos_token == "<|im_start|>" and ours.eos_token == "<|im_end|>"
    # smollm pre-tokenizer: each digit is its own piece (as in SmolLM2's tokenizer.json)
    assert [ours.decode([i]) for i in ours.encode("2026", add_special_tokens=False)] == list("2026")
