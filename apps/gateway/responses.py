"""OpenAI response objects: chat completions, text completions, their stream chunks, usage.

``service_tier`` in every response and chunk is the tier that *served* (after any demotion),
spelled the way OpenAI's SDKs know it: hot -> ``priority``, warm -> ``default``, cold ->
``flex``. Laser's own tier name travels in the ``X-Laser-Tier`` header and in the ``laser``
extension object (SDKs keep unknown fields; they never break on them).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from apps.gateway import tool_calls
from apps.gateway.collect import ChoiceResult, Completion
from apps.gateway.params import CHAT, ParsedRequest
from inference.request import Delta, Tier, TierChange

OPENAI_TIER = {Tier.HOT: "priority", Tier.WARM: "default", Tier.COLD: "flex"}
FINISH = {"stop": "stop", "length": "length"}
SYSTEM_FINGERPRINT = "laser-v1"

TokenText = Callable[[int], str]


def openai_tier(tier: Tier | str) -> str:
    return OPENAI_TIER[Tier(tier)]


def tier_change_info(change: TierChange) -> dict[str, Any]:
    return {"from": str(change.from_tier), "to": str(change.to_tier), "reason": change.reason,
            "at": change.at}


def usage(result: Completion) -> dict[str, Any]:
    return {
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "total_tokens": result.total_tokens,
        "prompt_tokens_details": {"cached_tokens": result.cached_tokens},
    }


# ---- logprobs ------------------------------------------------------------------------------


def _chat_logprobs(ids, logprobs, tops, text: TokenText, top_n: int) -> dict[str, Any]:
    content = []
    for i, token_id in enumerate(ids):
        token = text(token_id)
        alternatives = sorted((tops[i] if i < len(tops) else {}).items(), key=lambda kv: -kv[1])
        content.append({
            "token": token, "logprob": logprobs[i] if i < len(logprobs) else 0.0,
            "bytes": list(token.encode()),
            "top_logprobs": [{"token": text(t), "logprob": lp, "bytes": list(text(t).encode())}
                             for t, lp in alternatives[:top_n]],
        })
    return {"content": content, "refusal": None}


def _completion_logprobs(ids, logprobs, tops, text: TokenText, top_n: int,
                         offset: int) -> dict[str, Any]:
    tokens = [text(t) for t in ids]
    offsets, at = [], offset
    for token in tokens:
        offsets.append(at)
        at += len(token)
    top = [{text(t): lp for t, lp in sorted(d.items(), key=lambda kv: -kv[1])[:top_n]}
           for d in tops] if top_n else None
    return {"tokens": tokens, "token_logprobs": list(logprobs[:len(ids)]),
            "top_logprobs": top, "text_offset": offsets}


def _logprobs_of(parsed: ParsedRequest, ids, logprobs, tops, text: TokenText,
                 offset: int = 0) -> dict[str, Any] | None:
    if not parsed.logprobs:
        return None
    tops = list(tops or ())
    if parsed.endpoint == CHAT:
        return _chat_logprobs(ids, list(logprobs or ()), tops, text, parsed.top_logprobs)
    return _completion_logprobs(ids, list(logprobs or ()), tops, text, parsed.top_logprobs,
                                offset)


# ---- whole responses -----------------------------------------------------------------------


def _choice(parsed: ParsedRequest, choice: ChoiceResult, text: TokenText) -> dict[str, Any]:
    logprobs = _logprobs_of(parsed, choice.token_ids, choice.logprobs, choice.top_logprobs, text)
    finish = FINISH.get(choice.finish_reason or "", "stop")
    if parsed.endpoint == CHAT:
        message: dict[str, Any] = {"role": "assistant", "content": choice.text,
                                   "refusal": None}
        if reads_calls(parsed):
            calls = tool_calls.parse(choice.text)
            if calls.calls:
                message["content"] = calls.content.strip() or None
                message["tool_calls"] = [c.openai() for c in calls.calls]
                finish = calls_finish(finish)
        return {"index": choice.index, "finish_reason": finish, "logprobs": logprobs,
                "message": message}
    return {"index": choice.index, "finish_reason": finish, "logprobs": logprobs,
            "text": choice.text}


def reads_calls(parsed: ParsedRequest) -> bool:
    """Whether the answer is read for tool calls (``tools`` given, ``tool_choice`` not none)."""
    return parsed.tools is not None and parsed.tools.calls


def calls_finish(finish: str) -> str:
    """A natural end after tool calls is OpenAI's ``tool_calls``; ``length`` stays."""
    return "tool_calls" if finish == "stop" else finish


def completion_body(parsed: ParsedRequest, result: Completion, text: TokenText) -> dict:
    """The non-streamed response for ``parsed`` (``chat.completion`` or ``text_completion``)."""
    return {
        "id": parsed.request_id,
        "object": "chat.completion" if parsed.endpoint == CHAT else "text_completion",
        "created": int(result.arrival),
        "model": parsed.model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "service_tier": openai_tier(result.tier_served),
        "choices": [_choice(parsed, c, text) for c in result.choices],
        "usage": usage(result),
        "laser": {
            "tier": str(result.tier_served), "tier_asked": str(result.tier_asked),
            "tier_changes": [tier_change_info(c) for c in result.tier_changes],
            "ttft_s": result.ttft_s,
        },
    }


# ---- stream chunks -------------------------------------------------------------------------


class ChunkMaker:
    """Builds the stream's chunks; remembers which choices already got their ``role`` delta."""

    def __init__(self, parsed: ParsedRequest, text: TokenText) -> None:
        self.parsed, self.text = parsed, text
        self.created = int(time.time())
        self._started: set[int] = set()
        self._offsets: dict[int, int] = {}
        self._calls: dict[int, tool_calls.CallParser] = {}
        self.object = "chat.completion.chunk" if parsed.endpoint == CHAT else "text_completion"

    def _envelope(self, tier: Tier, choices: list[dict]) -> dict[str, Any]:
        chunk = {"id": self.parsed.request_id, "object": self.object, "created": self.created,
                 "model": self.parsed.model, "system_fingerprint": SYSTEM_FINGERPRINT,
                 "service_tier": openai_tier(tier), "choices": choices}
        if self.parsed.include_usage:
            chunk["usage"] = None
        return chunk

    def delta(self, d: Delta) -> dict[str, Any]:
        """The chunk for one engine delta."""
        finish = FINISH.get(d.finish_reason or "") if d.finish_reason else None
        if self.parsed.endpoint == CHAT:
            body: dict[str, Any] = {"content": d.text}
            if reads_calls(self.parsed):
                finish = self._calls_delta(d, body, finish)
            if d.index not in self._started:
                self._started.add(d.index)
                body["role"] = "assistant"
            choice = {"index": d.index, "delta": body, "finish_reason": finish,
                      "logprobs": _logprobs_of(self.parsed, d.token_ids, d.logprobs,
                                               d.top_logprobs, self.text)}
        else:
            offset = self._offsets.get(d.index, 0)
            self._offsets[d.index] = offset + len(d.text)
            choice = {"index": d.index, "text": d.text, "finish_reason": finish,
                      "logprobs": _logprobs_of(self.parsed, d.token_ids, d.logprobs,
                                               d.top_logprobs, self.text, offset)}
        chunk = self._envelope(Tier(d.tier), [choice])
        if d.tier_change is not None:
            chunk["laser"] = {"tier": str(d.tier), "tier_change": tier_change_info(d.tier_change)}
        return chunk

    def _calls_delta(self, d: Delta, body: dict[str, Any], finish: str | None) -> str | None:
        """Content and ``tool_calls`` entries of one delta, parsed as the text comes."""
        parser = self._calls.setdefault(d.index, tool_calls.CallParser())
        events = parser.feed(d.text)
        if d.finish_reason is not None:
            end = parser.finish()
            events.content += end.content
            events.arguments += end.arguments
        body["content"] = events.content or (None if parser.calls else "")
        entries = events.stream_entries()
        if entries:
            body["tool_calls"] = entries
        return calls_finish(finish) if finish is not None and parser.calls else finish

    def usage_chunk(self, result: Completion) -> dict[str, Any]:
        """The last chunk when ``stream_options.include_usage``: no choices, just usage."""
        chunk = self._envelope(result.tier_served, [])
        chunk["usage"] = usage(result)
        return chunk
