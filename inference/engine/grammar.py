"""Constrained decoding: a request's ``Constraint`` compiled by llguidance into token masks.

llguidance (docs/engine.md, "Constrained decoding") compiles JSON schemas and its Lark
dialect; its tokenizer is built here from the model's own vocabulary bytes (byte-level BPE
pieces mapped back to bytes, control tokens marked special), never from ``transformers``.

A compiled grammar is kept per (constraint, vocabulary) and copied for each sequence, so a
schema seen before costs a copy, not a compile. ``GrammarMasks`` holds each constrained
sequence's matcher: ``begin`` fills the next step's bitmask on a worker thread (llguidance
drops the GIL) while the forward runs, ``allowed`` waits for it and unpacks it to one bool
row per sampling row, ``consume`` advances the matchers with the sampled tokens.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import llguidance as llg
import llguidance.torch as llgt
import torch

from inference.errors import InvalidParameter
from inference.request import Constraint

CACHE_SIZE = 256
MAX_PARALLEL_CALLS = 8
# One shape for JSON: no free whitespace, so a small model cannot pad an answer past its
# max_tokens with blanks; separators as the OpenAI API writes them.
JSON_OPTIONS: Any = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
CALL_OPEN, CALL_CLOSE = "<tool_call>\n", "\n</tool_call>"


def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-in for each byte, reversed: byte-level BPE pieces -> bytes."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


class _Vocabulary:
    """What ``llguidance.LLTokenizer`` reads: every token's bytes, the special ones marked
    with a leading 0xFF as llguidance expects, and an encoder."""

    def __init__(self, tokenizer, vocab_size: int, eos_ids: Sequence[int]) -> None:
        decode = _byte_decoder()
        special = set(tokenizer.special_ids)
        self.tokens: list[bytes] = []
        for i in range(vocab_size):
            piece = tokenizer.id_to_token(i)
            if piece is None:
                self.tokens.append(b"")
            elif i in special:
                self.tokens.append(b"\xff" + piece.encode())
            elif all(c in decode for c in piece):
                self.tokens.append(bytes(decode[c] for c in piece))
            else:  # an added plain token: its text as written
                self.tokens.append(piece.encode())
        self.special_token_ids = sorted(i for i in special if i < vocab_size)
        self.eos_token_id = eos_ids[0]
        self.bos_token_id = tokenizer.bos_token_id
        self._encode = tokenizer.encode
        self.is_tokenizer_wrapper = True  # how llguidance recognises a wrapper

    def __call__(self, text: str | bytes) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return self._encode(text, add_special_tokens=False)


def build_tokenizer(tokenizer, vocab_size: int, eos_ids: Iterable[int]) -> llg.LLTokenizer:
    """llguidance's tokenizer over the model's vocabulary; ``eos_ids`` end a finished
    grammar (every end-of-turn id the engine stops on)."""
    eos = sorted(i for i in eos_ids if i < vocab_size)
    if not eos:
        raise ValueError("constrained decoding needs an end-of-sequence token")
    vocab = _Vocabulary(tokenizer, vocab_size, eos)
    return llg.LLTokenizer(vocab, n_vocab=vocab_size, eos_token=eos)  # type: ignore[arg-type]


def grammar_text(constraint: Constraint) -> str:
    """The llguidance grammar for ``constraint``: JSON schema, any JSON object, or tool calls
    (each ``<tool_call>`` block one JSON object naming a function and its arguments)."""
    if constraint.kind == "json_object":
        return llg.LLMatcher.grammar_from_json_schema({"type": "object"}, overrides=JSON_OPTIONS)
    if constraint.kind == "json_schema":
        options: Any = {**JSON_OPTIONS, "lenient": not constraint.strict}
        return llg.LLMatcher.grammar_from_json_schema(constraint.schema, defaults=options)
    if constraint.kind == "tool_calls":
        return llg.LLMatcher.grammar_from_lark(_calls_lark(constraint))
    raise InvalidParameter(constraint.param, f"unknown constraint kind {constraint.kind!r}")


def _calls_lark(constraint: Constraint) -> str:
    tools = json.loads(constraint.schema)
    schema = {"anyOf": [{
        "type": "object",
        "properties": {"name": {"const": t["name"]},
                       "arguments": t.get("parameters") or {"type": "object"}},
        "required": ["name", "arguments"], "additionalProperties": False,
    } for t in tools]}
    more = f'("\\n" call){{0,{MAX_PARALLEL_CALLS - 1}}}' if constraint.parallel else ""
    options = json.dumps({**JSON_OPTIONS, "lenient": True})
    return (f"start: call {more}\n"
            f"call: {json.dumps(CALL_OPEN)} obj {json.dumps(CALL_CLOSE)}\n"
            f'obj: %json {{ "x-guidance": {options}, '
            f"{json.dumps(schema)[1:]}\n")


class GrammarCompiler:
    """Compiles constraints for one vocabulary and keeps the last ``CACHE_SIZE`` compiled.

    Thread-safe: the gateway compiles on executor threads (``LLMEngine.encode``), the engine
    thread only copies what is cached."""

    def __init__(self, tokenizer, vocab_size: int, eos_ids: Iterable[int]) -> None:
        self._source = (tokenizer, vocab_size, tuple(eos_ids))
        self._tokenizer: llg.LLTokenizer | None = None
        self._cache: OrderedDict[Constraint, llg.LLMatcher] = OrderedDict()
        self._lock = threading.Lock()
        self.compiles = 0

    @property
    def tokenizer(self) -> llg.LLTokenizer:
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = build_tokenizer(*self._source)
            return self._tokenizer

    @property
    def vocab_size(self) -> int:
        return self._source[1]

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return tuple(sorted(i for i in self._source[2] if i < self._source[1]))

    def compile(self, constraint: Constraint) -> llg.LLMatcher:
        """The compiled grammar (a matcher at its start); raises ``InvalidParameter`` naming
        ``constraint.param`` when llguidance cannot compile it."""
        with self._lock:
            hit = self._cache.get(constraint)
            if hit is not None:
                self._cache.move_to_end(constraint)
                return hit
        tokenizer = self.tokenizer
        try:
            grammar = grammar_text(constraint)
        except ValueError as exc:
            raise InvalidParameter(constraint.param, f"'{constraint.param}' does not compile: "
                                   f"{exc}") from exc
        matcher = llg.LLMatcher(tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise InvalidParameter(constraint.param, f"'{constraint.param}' does not compile: "
                                   f"{matcher.get_error()}")
        with self._lock:
            self.compiles += 1
            self._cache[constraint] = matcher
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return matcher

    def matcher(self, constraint: Constraint) -> llg.LLMatcher:
        """A fresh matcher for one sequence (a copy of the compiled grammar)."""
        template = self.compile(constraint)
        with self._lock:
            return template.deep_copy()


class GrammarMasks:
    """The constrained sequences of one engine and their next-token masks."""

    def __init__(self, compiler: GrammarCompiler) -> None:
        self.compiler = compiler
        self._matchers: dict[str, llg.LLMatcher] = {}
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="grammar-mask")
        self._executor: llg.LLExecutor | None = None
        self._cut: set[str] = set()  # ended on an end token their grammar did not accept

    def matcher(self, seq_id: str, constraint: Constraint) -> tuple[str, llg.LLMatcher]:
        """A sequence's fresh matcher, for ``add`` (built outside the engine's lock)."""
        return seq_id, self.compiler.matcher(constraint)

    def add(self, matchers: Iterable[tuple[str, llg.LLMatcher]]) -> None:
        self._matchers.update(matchers)

    def remove(self, seq_ids: Iterable[str]) -> None:
        for seq_id in seq_ids:
            self._matchers.pop(seq_id, None)
            self._cut.discard(seq_id)

    def cut_short(self, seq_id: str) -> bool:
        """Whether the sequence ended before its grammar was complete (a dead end: no token
        of the vocabulary could continue it, so only the end token was left)."""
        return seq_id in self._cut

    def __bool__(self) -> bool:
        return bool(self._matchers)

    def begin(self, seq_ids: Sequence[str]) -> Callable[[], torch.Tensor | None] | None:
        """Start filling the bitmask of a step's sampling rows ``seq_ids`` on the worker
        thread; returns what waits for it as ``[N, vocab]`` bool (all True on unconstrained
        rows), or None when no row is constrained."""
        rows = [(m, i) for i, s in enumerate(seq_ids) if (m := self._matchers.get(s))]
        if not rows:
            return None
        pending = self._pool.submit(self._fill, rows, len(seq_ids))
        return lambda: self._allowed(pending.result())

    def _allowed(self, bitmask: torch.Tensor) -> torch.Tensor:
        allowed = unpack(bitmask, self.compiler.vocab_size)
        # a matcher in error allows nothing: let it end (the sequence stops on EOS)
        empty = ~allowed.any(dim=1)
        if bool(empty.any()):
            allowed[empty.nonzero()[:, :1], list(self.compiler.eos_ids)] = True
        return allowed

    def _fill(self, rows: list[tuple[llg.LLMatcher, int]], n: int) -> torch.Tensor:
        bitmask = torch.full(llgt.get_bitmask_shape(n, self.compiler.vocab_size), -1,
                             dtype=torch.int32)
        if self._executor is None:
            self._executor = llg.LLExecutor()
        llgt.fill_next_token_bitmask_par(self._executor, rows, bitmask)
        return bitmask

    def consume(self, seq_ids: Sequence[str], token_ids: Sequence[int]) -> None:
        """Advance the constrained rows' matchers by their sampled tokens."""
        eos = self.compiler.eos_ids
        for seq_id, token in zip(seq_ids, token_ids):
            m = self._matchers.get(seq_id)
            if m is None:
                continue
            if token in eos and not m.is_accepting():
                self._cut.add(seq_id)
            elif not m.is_stopped():
                m.consume_token(token)


def grammar_masks(loaded) -> GrammarMasks | None:
    """The masks for a loaded model (None without a tokenizer): its end ids end a grammar."""
    if loaded.tokenizer is None:
        return None
    eos = frozenset(loaded.config.eos_token_ids) | frozenset(
        getattr(loaded, "stop_token_ids", ()))
    return GrammarMasks(GrammarCompiler(loaded.tokenizer, loaded.config.vocab_size, eos))


_BITS = torch.arange(32, dtype=torch.int32)


def unpack(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """``[N, ceil(V/32)]`` int32 bitmask (bit j of word w = token 32w + j) -> ``[N, V]`` bool."""
    bits = (bitmask.unsqueeze(-1) >> _BITS) & 1  # [N, W, 32]
    return bits.view(bitmask.shape[0], -1)[:, :vocab].bool()


__all__ = ["GrammarCompiler", "GrammarMasks", "build_tokenizer", "grammar_masks",
           "grammar_text", "unpack"]
