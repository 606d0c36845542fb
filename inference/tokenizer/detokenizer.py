"""Incremental detokenisation with stop strings, per sequence."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .tokenizer import Tokenizer

_REPLACEMENT = "\ufffd"


class Detokenizer:
    """Turns a stream of token ids into releasable text.

    Text is released only once it is complete UTF-8 (a token ending inside a multi-byte
    character is held until the character completes) and once it cannot be the start of a stop
    string. When a stop string appears (possibly spread over several tokens) the text before it
    is released, the stop string and everything after it are dropped, and `stopped` names it.
    Tokens in `stop_token_ids` end the stream too (`stopped_token` names the id); their text is
    never emitted.

    Decoding works on a small window (vLLM-style prefix/read offsets), so each push costs
    O(window), not O(sequence).
    """

    def __init__(self, tokenizer: Tokenizer, stop: Sequence[str] = (), *,
                 stop_token_ids: Iterable[int] = (), skip_special_tokens: bool = True) -> None:
        self._tok = tokenizer
        self._stops = tuple(s for s in stop if s)
        self._stop_ids = frozenset(stop_token_ids)
        self._skip = skip_special_tokens
        self._ids: list[int] = []
        self._prefix = 0    # window start: decode(ids[prefix:read]) is text already accounted
        self._read = 0      # ids before this were turned into text
        self._held = ""     # decoded text not yet released (may start a stop string)
        self.stopped: str | None = None
        self.stopped_token: int | None = None

    @property
    def done(self) -> bool:
        return self.stopped is not None or self.stopped_token is not None

    @property
    def token_ids(self) -> list[int]:
        return self._ids

    def push(self, token_id: int) -> str:
        """Add one generated token; return the text that became releasable (maybe "")."""
        if self.done:
            return ""
        if token_id in self._stop_ids:
            out = self.finish()  # the text so far is final; it may still hold a stop string
            if self.stopped is None:
                self.stopped_token = token_id
            return out
        self._ids.append(token_id)
        prefix_text = self._decode(self._prefix, self._read)
        full_text = self._decode(self._prefix, len(self._ids))
        if len(full_text) <= len(prefix_text) or full_text.endswith(_REPLACEMENT):
            return ""  # mid-character (or a skipped special token): wait for more bytes
        self._held += full_text[len(prefix_text):]
        self._prefix, self._read = self._read, len(self._ids)
        return self._release()

    def finish(self) -> str:
        """Flush at the end of the stream: held text and any trailing incomplete bytes."""
        if self.done:
            return ""
        tail = self._decode(self._prefix, len(self._ids))[len(self._decode(self._prefix,
                                                                            self._read)):]
        self._held += tail
        self._prefix = self._read = len(self._ids)
        out = self._release()
        if self.done:
            return out
        out, self._held = out + self._held, ""
        return out

    def _decode(self, start: int, end: int) -> str:
        if start >= end:
            return ""
        return self._tok.decode(self._ids[start:end], skip_special_tokens=self._skip)

    def _release(self) -> str:
        held = self._held
        hit = min(((held.find(s), s) for s in self._stops if s in held), default=None)
        if hit is not None:
            idx, stop = hit
            self.stopped, self._held = stop, ""
            return held[:idx]
        keep = _longest_stop_prefix_suffix(held, self._stops)
        self._held = held[len(held) - keep:] if keep else ""
        return held[:len(held) - keep]


def _longest_stop_prefix_suffix(text: str, stops: Sequence[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of some stop string."""
    best = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:n]):
                best = n
                break
    return best
