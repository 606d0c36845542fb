"""The published OpenAPI 3.1 schema, served at ``/v1/openapi.json``.

drf-spectacular describes the DRF views (annotated in ``openapi_drf.py``); this module is the
single source of truth for the plain async views it cannot see, ``/v1/chat/completions`` and
``/v1/completions`` (JSON or, with ``"stream": true``, Server-Sent Events), and for the shapes
every operation shares (the OpenAI error body). ``tests/test_openapi.py`` checks the request
schemas against ``apps.gateway.params``: every field the parser reads is documented, bodies the
schema allows are bodies the parser accepts, and a wrong type is refused naming the field.

Only the API is published (``/v1/…`` and ``/api/…``); pages, the admin, ``/metrics`` are not.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.views import SpectacularJSONAPIView

from apps.core.tiers import TIERS
from apps.gateway.params import MAX_COMPLETION_LOGPROBS
from apps.gateway.params import SERVICE_TIERS as _TIERS
from inference.request import (
    MAX_N,
    MAX_STOP_LENGTH,
    MAX_STOP_STRINGS,
    MAX_TOP_LOGPROBS,
    SEED_RANGE,
)
from laser_platform import (
    openapi_drf,  # the DRF views' annotations register on import
    openapi_responses,
)
from laser_platform import openapi_tools as tools
from laser_platform.openapi_shapes import error_responses, nullable, ref

MAX_INT = 2**31 - 1
SERVICE_TIERS = sorted(_TIERS)


def _number(low: float, high: float, **extra: Any) -> dict[str, Any]:
    return nullable({"type": "number", "minimum": low, "maximum": high, **extra})


def _integer(low: int, high: int) -> dict[str, Any]:
    return nullable({"type": "integer", "minimum": low, "maximum": high})


ERROR = {
    "type": "object",
    "description": "Every 4xx and 5xx answer: OpenAI's error object.",
    "required": ["error"],
    "properties": {"error": {
        "type": "object",
        "required": ["message", "type", "param", "code"],
        "properties": {
            "message": {"type": "string"},
            "type": {"type": "string", "examples": ["invalid_request_error", "server_error"]},
            "param": {"type": ["string", "null"], "description": "the offending parameter"},
            "code": {"type": ["string", "null"]},
        },
    }},
}

_STOP_STRING = {"type": "string", "minLength": 1, "maxLength": MAX_STOP_LENGTH}
# Sampling and output fields both endpoints read (apps.gateway.params._build / _sampling).
_COMMON_FIELDS: dict[str, Any] = {
    "stream": nullable({"type": "boolean"}),
    "stream_options": nullable({
        "type": "object", "description": "only with `stream: true`",
        "properties": {"include_usage": nullable({"type": "boolean"})}}),
    "max_tokens": _integer(1, MAX_INT),
    "temperature": _number(0, 2),
    "top_p": _number(0, 1, exclusiveMinimum=0),
    "n": _integer(1, MAX_N),
    "seed": _integer(*SEED_RANGE),
    "presence_penalty": _number(-2, 2),
    "frequency_penalty": _number(-2, 2),
    "stop": {"anyOf": [_STOP_STRING, {"type": "array", "items": _STOP_STRING,
                                      "maxItems": MAX_STOP_STRINGS}, {"type": "null"}]},
    "user": nullable({"type": "string"}),
    "service_tier": nullable({"type": "string", "enum": SERVICE_TIERS,
                              "description": "OpenAI's names, or Laser's tiers hot/warm/cold"}),
    "logit_bias": nullable({"type": "object", "maxProperties": 0,
                            "description": "not supported: only empty"}),
}
# OpenAI features Laser refuses (400 unsupported_parameter) unless given their neutral value
# (apps.gateway.features).
_CHAT_NEUTRAL: dict[str, Any] = {
    "functions": nullable({"type": "array", "maxItems": 0}),
    "function_call": nullable({"const": "none"}),
    "modalities": nullable({"type": "array", "items": {"const": "text"}, "minItems": 1,
                            "maxItems": 1}),
    "store": nullable({"const": False}),
    **{name: {"type": "null"} for name in ("audio", "prediction", "web_search_options",
                                            "reasoning_effort", "verbosity")},
}
_COMPLETION_NEUTRAL: dict[str, Any] = {
    "echo": nullable({"const": False}),
    "suffix": {"type": "null"},
    "best_of": nullable({"const": 1, "description": "also accepted: equal to `n`"}),
}


def _only_with(field: str, needs: str) -> dict[str, Any]:
    """``field`` (non-null) is allowed only when ``needs`` is true."""
    return {"if": {"required": [field], "properties": {field: {"not": {"type": "null"}}}},
            "then": {"required": [needs], "properties": {needs: {"const": True}}}}


_TEXT_PART = {"type": "object", "required": ["type", "text"],
              "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}
MESSAGE = tools.messages(
    {"anyOf": [{"type": "string"}, {"type": "array", "items": _TEXT_PART}]})
_TOKEN_IDS = {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}}
PROMPT = {"anyOf": [
    {"type": "string", "minLength": 1}, _TOKEN_IDS,
    {"type": "array", "minItems": 1, "maxItems": 1,
     "items": {"anyOf": [{"type": "string", "minLength": 1}, _TOKEN_IDS]},
     "description": "a batch of exactly one prompt"},
]}


def chat_request(model: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["model", "messages"],
        "properties": {
            "model": {"type": "string", "enum": [model]},
            "messages": {"type": "array", "minItems": 1, "items": ref("ChatMessage")},
            "max_completion_tokens": _integer(1, MAX_INT),
            "logprobs": nullable({"type": "boolean"}),
            "top_logprobs": _integer(0, MAX_TOP_LOGPROBS),
            "response_format": tools.RESPONSE_FORMAT, "tools": tools.TOOLS,
            "tool_choice": tools.TOOL_CHOICE, "parallel_tool_calls": tools.PARALLEL_TOOL_CALLS,
            **_COMMON_FIELDS, **_CHAT_NEUTRAL,
        },
        "allOf": [_only_with("stream_options", "stream"), _only_with("top_logprobs", "logprobs"),
                  tools.tool_choice_needs_tools()],
    }


def completion_request(model: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["model", "prompt"],
        "properties": {
            "model": {"type": "string", "enum": [model]},
            "prompt": PROMPT,
            "logprobs": _integer(0, MAX_COMPLETION_LOGPROBS),
            **_COMMON_FIELDS, **_COMPLETION_NEUTRAL,
        },
        "allOf": [_only_with("stream_options", "stream")],
    }


_USAGE = {"type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
          "properties": {k: {"type": "integer", "minimum": 0}
                         for k in ("prompt_tokens", "completion_tokens", "total_tokens")}}
_FINISH = {"enum": ["stop", "length", "tool_calls"]}


def _completion_object(kind: str, choice: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["id", "object", "created", "model", "choices", "usage"],
        "properties": {
            "id": {"type": "string"}, "object": {"const": kind},
            "created": {"type": "integer"}, "model": {"type": "string"},
            "system_fingerprint": {"type": "string"},
            "service_tier": {"enum": ["priority", "default", "flex"],
                             "description": "the tier that served (hot, warm, cold)"},
            "choices": {"type": "array", "items": choice},
            "usage": _USAGE,
            "laser": {"type": "object", "description": "tier served/asked, tier changes, TTFT"},
        },
    }


CHAT_COMPLETION = _completion_object("chat.completion", {
    "type": "object", "required": ["index", "message", "finish_reason"],
    "properties": {"index": {"type": "integer"}, "finish_reason": _FINISH,
                   "logprobs": {"type": ["object", "null"]},
                   "message": tools.ANSWER_MESSAGE}})
TEXT_COMPLETION = _completion_object("text_completion", {
    "type": "object", "required": ["index", "text", "finish_reason"],
    "properties": {"index": {"type": "integer"}, "finish_reason": _FINISH,
                   "logprobs": {"type": ["object", "null"]}, "text": {"type": "string"}}})
SSE = {
    "type": "object",
    "description": "One Server-Sent Event: `data:` is a chunk's JSON (`chat.completion.chunk` "
                   "or `text_completion`), an error object if the request fails mid-stream, "
                   "and finally the text `[DONE]`.",
    "required": ["data"],
    "properties": {"data": {"type": "string"}, "event": {"type": "string"}},
}


_COMPLETION_ERRORS = (400, 401, 404, 405, 413, 415, 429, 500, 503)


def _completions_path(name: str, summary: str, body: str, answer: str) -> dict[str, Any]:
    headers = {"X-Request-Id": {"schema": {"type": "string"}},
               "X-Laser-Tier": {"schema": {"enum": [tier.value for tier in TIERS]}}}
    return {"post": {
        "operationId": name, "summary": summary, "tags": ["inference"],
        "security": [{"bearer": []}, {"apiKey": []}],
        "requestBody": {"required": True,
                        "content": {"application/json": {"schema": ref(body)}}},
        "responses": {
            "200": {"description": "JSON, or an SSE stream when `stream` is true",
                    "headers": headers,
                    "content": {"application/json": {"schema": ref(answer)},
                                "text/event-stream": {"schema": SSE}}},
            **error_responses(*_COMPLETION_ERRORS),
        },
    }}


def plain_paths() -> dict[str, Any]:
    return {
        "/v1/chat/completions": _completions_path(
            "chat_completions_create", "Create a chat completion", "ChatCompletionRequest",
            "ChatCompletion"),
        "/v1/completions": _completions_path(
            "completions_create", "Create a text completion", "CompletionRequest",
            "TextCompletion"),
        **openapi_responses.paths(),
    }


def components() -> dict[str, Any]:
    model = settings.LASER_SERVED_MODEL_ID
    return {"Error": ERROR, "ChatMessage": MESSAGE, "ChatCompletionRequest": chat_request(model),
            "CompletionRequest": completion_request(model), "ChatCompletion": CHAT_COMPLETION,
            "TextCompletion": TEXT_COMPLETION, "Response": openapi_responses.RESPONSE,
            "ResponseRequest": openapi_responses.response_request(model, SERVICE_TIERS,
                                                                  MAX_INT)}


# --- drf-spectacular hooks (SPECTACULAR_SETTINGS) -------------------------------------------


def only_the_api(endpoints: list[tuple], **kwargs: Any) -> list[tuple]:
    """Preprocessing hook: publish ``/v1/`` and ``/api/`` operations, not this schema view."""
    return [e for e in endpoints if e[0].startswith(("/v1/", "/api/"))
            and e[0] != "/v1/openapi.json"]


# How a response's ids feed the next request (OpenAPI links; schemathesis follows them):
# file -> its content, a batch on it -> that batch's retrieve and cancel.
LINKS = {
    "files_create": {
        "RetrieveFile": {"operationId": "files_retrieve",
                         "parameters": {"file_id": "$response.body#/id"}},
        "FileContent": {"operationId": "files_content",
                        "parameters": {"file_id": "$response.body#/id"}},
        "CreateBatch": {"operationId": "batches_create",
                        "requestBody": {"input_file_id": "$response.body#/id"}},
    },
    "batches_create": {
        "RetrieveBatch": {"operationId": "batches_retrieve",
                          "parameters": {"batch_id": "$response.body#/id"}},
        "CancelBatch": {"operationId": "batches_cancel",
                        "parameters": {"batch_id": "$response.body#/id"}},
    },
}


def add_plain_views(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Postprocessing hook: the plain async views, the shared components, the key schemes,
    the links between operations."""
    result["paths"] = {**result.get("paths", {}), **plain_paths()}
    for operations in result["paths"].values():
        for operation in operations.values():
            links = LINKS.get(operation.get("operationId"))
            if links:
                operation["responses"]["200"]["links"] = links
    parts = result.setdefault("components", {})
    parts.setdefault("schemas", {}).update({**components(), **openapi_drf.SCHEMAS})
    parts.setdefault("securitySchemes", {}).update({
        "bearer": {"type": "http", "scheme": "bearer", "description": "Laser API key"},
        "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
    })
    return result


class OpenApiView(SpectacularJSONAPIView):
    """``GET /v1/openapi.json``: public, like OpenAI's own published spec."""

