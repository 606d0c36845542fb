"""The response body of a batch line: the same ``chat.completion`` / ``text_completion`` object
the live endpoint answers for a non-streamed request."""

from __future__ import annotations

import time
from typing import Any

from apps.gateway.collect import Completion

_FINISH = {"stop": "stop", "length": "length"}


def _usage(completion: Completion) -> dict[str, Any]:
    return {
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": completion.completion_tokens,
        "total_tokens": completion.total_tokens,
        "prompt_tokens_details": {"cached_tokens": completion.cached_tokens},
    }


def response_body(completion: Completion, *, endpoint: str, model: str) -> dict[str, Any]:
    """OpenAI's response object for ``completion`` on ``endpoint``."""
    gateway = _gateway_renderer(endpoint)
    if gateway is not None:
        return gateway(completion, model=model)
    created = int(completion.finished_at or time.time())
    if endpoint == "/v1/chat/completions":
        choices = [{"index": c.index, "message": {"role": "assistant", "content": c.text},
                    "logprobs": None, "finish_reason": _FINISH.get(c.finish_reason or "", "stop")}
                   for c in completion.choices]
        obj = "chat.completion"
    else:
        choices = [{"index": c.index, "text": c.text, "logprobs": None,
                    "finish_reason": _FINISH.get(c.finish_reason or "", "stop")}
                   for c in completion.choices]
        obj = "text_completion"
    return {"id": completion.request_id, "object": obj, "created": created, "model": model,
            "choices": choices, "usage": _usage(completion),
            "service_tier": str(completion.tier_served)}


def _gateway_renderer(endpoint: str) -> Any:
    """The gateway's own renderer when it offers one, so batch and live bodies are identical."""
    try:
        from apps.gateway import render  # type: ignore[attr-defined]
    except ImportError:
        return None
    name = "chat_completion_body" if endpoint == "/v1/chat/completions" else "completion_body"
    return getattr(render, name, None)
