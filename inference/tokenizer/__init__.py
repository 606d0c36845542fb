"""Tokenizer (from GGUF metadata or `tokenizer.json`), chat templates, incremental detokenizer."""

from __future__ import annotations

from .chat_template import CHATML, ChatTemplate, ChatTemplateError
from .detokenizer import Detokenizer
from .gguf_vocab import UnsupportedTokenizer, tokenizer_from_gguf
from .tokenizer import Tokenizer

__all__ = ["CHATML", "ChatTemplate", "ChatTemplateError", "Detokenizer", "Tokenizer",
           "UnsupportedTokenizer", "tokenizer_from_gguf"]
