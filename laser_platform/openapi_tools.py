"""Schema pieces of structured outputs and tool calling (``apps.gateway.constraints`` and
``apps.gateway.tool_calls`` read them): ``response_format``, ``tools``, ``tool_choice``, the
chat messages that carry calls and results, and the calls in an answer."""

from __future__ import annotations

from typing import Any

from apps.gateway.constraints import MAX_TOOLS
from laser_platform.openapi_shapes import nullable

NAME = {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"}
JSON_SCHEMA = {"type": "object", "description": "a JSON schema, compiled by llguidance; one "
               "it cannot compile is a 400 naming `response_format`"}

RESPONSE_FORMAT = nullable({"anyOf": [
    {"type": "object", "required": ["type"],
     "properties": {"type": {"enum": ["text", "json_object"]}}},
    {"type": "object", "required": ["type", "json_schema"],
     "properties": {"type": {"const": "json_schema"}, "json_schema": {
         "type": "object", "required": ["name"],
         "properties": {"name": NAME, "description": nullable({"type": "string"}),
                        "schema": JSON_SCHEMA,
                        "strict": nullable({"type": "boolean", "description":
                                            "unknown schema keywords refused, not ignored"})}}}},
]})

FUNCTION = {"type": "object", "required": ["name"],
            "properties": {"name": NAME, "description": nullable({"type": "string"}),
                           "parameters": nullable(JSON_SCHEMA)}}
TOOLS = nullable({"type": "array", "maxItems": MAX_TOOLS, "items": {
    "type": "object", "required": ["type", "function"],
    "properties": {"type": {"const": "function"}, "function": FUNCTION}}})
TOOL_CHOICE = nullable({"anyOf": [
    {"enum": ["none", "auto", "required"]},
    {"type": "object", "required": ["type", "function"],
     "description": "a function named in `tools`",
     "properties": {"type": {"const": "function"},
                    "function": {"type": "object", "required": ["name"],
                                 "properties": {"name": {"type": "string"}}}}},
]})
PARALLEL_TOOL_CALLS = nullable({"type": "boolean"})


def tool_choice_needs_tools() -> dict[str, Any]:
    """A ``tool_choice`` other than ``none`` needs ``tools``."""
    return {"if": {"required": ["tool_choice"],
                   "properties": {"tool_choice": {"not": {"enum": [None, "none"]}}}},
            "then": {"required": ["tools"], "properties": {"tools": {"type": "array",
                                                                      "minItems": 1}}}}


CALL = {"type": "object", "required": ["function"],
        "properties": {"id": nullable({"type": "string"}), "type": {"const": "function"},
                       "function": {"type": "object", "required": ["name"],
                                    "properties": {"name": {"type": "string"},
                                                   "arguments": {"type": "string"}}}}}
_NULLS = {name: {"type": "null"} for name in ("function_call", "audio")}


def messages(content: dict[str, Any]) -> dict[str, Any]:
    """A chat message by role: an assistant's may hold only ``tool_calls`` (``content``
    null), a ``tool`` message answers the call ``tool_call_id``."""
    return {"anyOf": [
        {"type": "object", "required": ["role", "content"],
         "properties": {"role": {"enum": ["system", "developer", "user"]}, "content": content,
                        "tool_calls": {"type": "null"}, **_NULLS}},
        {"type": "object", "required": ["role"],
         "properties": {"role": {"const": "assistant"}, "content": nullable(content),
                        "tool_calls": nullable({"type": "array", "items": CALL}), **_NULLS}},
        {"type": "object", "required": ["role", "content", "tool_call_id"],
         "properties": {"role": {"const": "tool"}, "content": content,
                        "tool_call_id": {"type": "string"}, "tool_calls": {"type": "null"},
                        **_NULLS}},
    ]}


ANSWER_MESSAGE = {"type": "object", "required": ["role", "content"],
                  "properties": {"role": {"const": "assistant"},
                                 "content": {"type": ["string", "null"]},
                                 "tool_calls": {"type": "array", "items": CALL}}}
