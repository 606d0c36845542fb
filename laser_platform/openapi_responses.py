"""``/v1/responses`` (create, retrieve) and ``/v1/embeddings`` in the published schema
(``apps.gateway.responses_api`` and ``responses_views`` serve them)."""

from __future__ import annotations

from typing import Any

from laser_platform.openapi_shapes import error_responses, nullable, ref
from laser_platform.openapi_tools import FUNCTION, JSON_SCHEMA, NAME, PARALLEL_TOOL_CALLS

_TEXT = {"type": "string"}
_PARTS = {"type": "array", "items": {
    "type": "object", "required": ["type", "text"],
    "properties": {"type": {"enum": ["input_text", "output_text"]}, "text": _TEXT}}}
INPUT_ITEM = {"anyOf": [
    {"type": "object", "required": ["role", "content"], "properties": {
        "type": {"const": "message"}, "role": {"enum": ["system", "developer", "user",
                                                         "assistant"]},
        "content": {"anyOf": [_TEXT, _PARTS]}}},
    {"type": "object", "required": ["type", "call_id", "name", "arguments"], "properties": {
        "type": {"const": "function_call"}, "call_id": _TEXT, "name": _TEXT,
        "arguments": _TEXT}},
    {"type": "object", "required": ["type", "call_id", "output"], "properties": {
        "type": {"const": "function_call_output"}, "call_id": _TEXT, "output": _TEXT}},
]}
_FORMAT = {"anyOf": [
    {"type": "object", "required": ["type"], "properties": {
        "type": {"enum": ["text", "json_object"]}}},
    {"type": "object", "required": ["type", "name"], "properties": {
        "type": {"const": "json_schema"}, "name": NAME, "schema": JSON_SCHEMA,
        "strict": nullable({"type": "boolean"})}},
]}


def response_request(model: str, tiers: list[str], max_tokens: int) -> dict[str, Any]:
    return {
        "type": "object", "required": ["model", "input"],
        "properties": {
            "model": {"type": "string", "enum": [model]},
            "input": {"anyOf": [{"type": "string", "minLength": 1},
                                {"type": "array", "minItems": 1, "items": INPUT_ITEM}]},
            "instructions": nullable(_TEXT),
            "max_output_tokens": nullable({"type": "integer", "minimum": 1,
                                           "maximum": max_tokens}),
            "temperature": nullable({"type": "number", "minimum": 0, "maximum": 2}),
            "top_p": nullable({"type": "number", "exclusiveMinimum": 0, "maximum": 1}),
            "stream": nullable({"type": "boolean"}),
            "service_tier": nullable({"type": "string", "enum": tiers}),
            "tools": nullable({"type": "array", "items": {
                **FUNCTION, "required": ["type", "name"],
                "properties": {**FUNCTION["properties"], "type": {"const": "function"}}}}),
            "tool_choice": nullable({"anyOf": [
                {"enum": ["none", "auto", "required"]},
                {"type": "object", "required": ["type", "name"], "description":
                 "a function named in `tools`",
                 "properties": {"type": {"const": "function"}, "name": _TEXT}}]}),
            "parallel_tool_calls": PARALLEL_TOOL_CALLS,
            "text": nullable({"type": "object", "properties": {"format": nullable(_FORMAT)}}),
            "previous_response_id": nullable({**_TEXT, "description":
                                              "a stored response of the same tenant"}),
            "store": nullable({"type": "boolean", "description": "default true"}),
            "metadata": nullable({"type": "object"}),
            "user": nullable(_TEXT),
            "truncation": nullable({"const": "disabled"}),
        },
    }


RESPONSE = {
    "type": "object", "required": ["id", "object", "created_at", "status", "output"],
    "properties": {
        "id": _TEXT, "object": {"const": "response"}, "created_at": {"type": "integer"},
        "status": {"enum": ["completed", "incomplete", "in_progress"]},
        "output": {"type": "array", "items": {"type": "object", "required": ["type", "id"]}},
        "usage": nullable({"type": "object"}),
        "service_tier": nullable({"enum": ["priority", "default", "flex"]}),
    },
}
SSE = {"type": "object", "description": "`event:` the event's type, `data:` its JSON: "
       "response.created, response.output_text.delta, response.function_call_arguments.delta, "
       "..., response.completed (or response.incomplete; an `error` event on failure)",
       "properties": {"data": _TEXT, "event": _TEXT}}
_AUTH = {"security": [{"bearer": []}, {"apiKey": []}], "tags": ["inference"]}


def paths() -> dict[str, Any]:
    return {
        "/v1/responses": {"post": {
            **_AUTH, "operationId": "responses_create", "summary": "Create a response",
            "requestBody": {"required": True, "content": {
                "application/json": {"schema": ref("ResponseRequest")}}},
            "responses": {
                "200": {"description": "JSON, or an SSE stream when `stream` is true",
                        "content": {"application/json": {"schema": ref("Response")},
                                    "text/event-stream": {"schema": SSE}}},
                **error_responses(400, 401, 404, 405, 413, 415, 429, 500, 503)}}},
        "/v1/responses/{response_id}": {"get": {
            **_AUTH, "operationId": "responses_retrieve", "summary": "Retrieve a response",
            "parameters": [{"name": "response_id", "in": "path", "required": True,
                            "schema": _TEXT}],
            "responses": {
                "200": {"description": "the stored response (its tenant's only)",
                        "content": {"application/json": {"schema": ref("Response")}}},
                **error_responses(401, 404, 405, 503)}}},
        "/v1/embeddings": {"post": {
            **_AUTH, "operationId": "embeddings_create",
            "summary": "Embeddings: not served (404 unsupported_endpoint)",
            "requestBody": {"content": {"application/json": {"schema": {"type": "object"}}}},
            "responses": {
                "200": {"description": "never: this server serves one chat model"},
                **error_responses(401, 404, 405, 503)}}},
    }
