"""A batch line's engine call and response body, exactly as the live endpoint does them: the
gateway's parser builds the request, the gateway's ``completion_body`` renders the answer, and
a prompt that leaves less room than the default length gets that room (when the line did not
ask for a length), as ``apps.gateway.pipeline`` does."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from apps.gateway.collect import Completion
from apps.gateway.errors import api_error
from apps.gateway.params import ParsedRequest
from apps.gateway.responses import completion_body
from inference.errors import PromptTooLong
from laser_platform.errors import APIError

if TYPE_CHECKING:
    from inference.engine.client import EngineClient


async def run_parsed(parsed: ParsedRequest, client: EngineClient) -> Completion:
    """Run ``parsed`` to its end on ``client``; engine errors propagate unchanged."""
    from apps.gateway.engine import complete

    request = parsed.engine_request
    try:
        return await complete(request, client)
    except PromptTooLong as exc:
        room = exc.max_model_len - exc.prompt_tokens
        if parsed.max_tokens_given or exc.param != "max_tokens" or room < 1:
            raise
        request.sampling = dataclasses.replace(request.sampling, max_tokens=room)
        return await complete(request, client)


def response_body(parsed: ParsedRequest, completion: Completion, client: EngineClient) -> dict:
    """The ``chat.completion`` / ``text_completion`` object the live endpoint would answer."""
    return completion_body(parsed, completion, client.token_text)


def error_for(exc: BaseException, body: dict) -> APIError:
    """The API error the live endpoint answers for ``exc`` (4xx for the client's mistakes)."""
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None \
        else "max_tokens"
    return api_error(exc, max_tokens_param=key)
