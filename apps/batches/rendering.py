"""A batch line's response body and error, exactly as the live endpoint renders them: the
gateway's ``completion_body`` and its one error mapping (through ``apps.gateway.serving``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from apps.core.errors import APIError
from apps.gateway.serving import Completion, ParsedRequest, api_error, completion_body

if TYPE_CHECKING:
    from inference.engine.client import EngineClient


def response_body(parsed: ParsedRequest, completion: Completion, client: EngineClient) -> dict:
    """The ``chat.completion`` / ``text_completion`` object the live endpoint would answer."""
    return completion_body(parsed, completion, client.token_text)


def error_for(exc: BaseException, body: dict) -> APIError:
    """The API error the live endpoint answers for ``exc`` (4xx for the client's mistakes)."""
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None \
        else "max_tokens"
    return api_error(exc, max_tokens_param=key)
