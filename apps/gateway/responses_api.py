"""``/v1/responses`` as a chat request on the one serving path, and its answer as a Response.

``chat_body`` turns a Responses body (``input`` text or items, ``instructions``,
``max_output_tokens``, function ``tools``, ``text.format``...) into the chat body ``serve``
parses, so a response is admitted, constrained, metered and recorded like any chat request;
``response_object`` and ``EventWriter`` turn the chat answer back into the Responses shapes.
A refusal names the Responses parameter (``max_output_tokens``, ``input[0]``, ``text.format``).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from apps.core.errors import APIError, BadRequestError
from apps.gateway import constraints, tool_calls
from apps.gateway.collect import Completion
from apps.gateway.responses import openai_tier

PASSED = ("model", "temperature", "top_p", "stream", "service_tier", "parallel_tool_calls",
          "user")
REFUSED = ("reasoning", "background", "include", "prompt", "conversation")
# chat parameter -> the Responses parameter it came from (error messages name the latter)
RENAMES = (("max_tokens", "max_output_tokens"), ("messages", "input"),
           ("response_format", "text.format"))


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def bad(param: str, message: str, code: str = "invalid_value") -> BadRequestError:
    return BadRequestError(message, param=param, code=code)


def renamed(exc: APIError) -> APIError:
    """``exc`` naming the Responses parameter instead of the chat one it was checked as."""
    for chat, ours in RENAMES:
        if exc.param is not None and exc.param.startswith(chat):
            exc.param = ours + exc.param[len(chat):]
            exc.message = exc.message.replace(chat, ours)
            break
    return exc


def chat_body(body: dict, history: list[dict]) -> tuple[dict, list[dict]]:
    """The chat body for a Responses ``body``, and the conversation to store with its answer
    (without the instructions, which a later response does not inherit); ``history``: the
    stored conversation of ``previous_response_id`` (empty without one)."""
    for name in REFUSED:
        if body.get(name) is not None:
            raise bad(name, f"'{name}' is not supported by this server.", "unsupported_parameter")
    if body.get("store") is not None and not isinstance(body["store"], bool):
        raise bad("store", "'store' must be a boolean.", "invalid_type")
    if body.get("truncation") not in (None, "disabled"):
        raise bad("truncation", "only 'truncation': 'disabled' is supported.",
                  "unsupported_parameter")
    chat = {name: body[name] for name in PASSED if name in body}
    conversation = [*history, *input_messages(body.get("input"))]
    chat["messages"] = [*_instructions(body.get("instructions")), *conversation]
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise bad("tools", "'tools' must be an array.", "invalid_type")
        chat["tools"] = [{"type": "function",
                          "function": constraints.function_tool(t, f"tools[{i}]")}
                         for i, t in enumerate(tools)]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    if body.get("text") is not None:
        chat["response_format"] = _text_format(body["text"])
    return chat, conversation


def _instructions(value: Any) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, str):
        raise bad("instructions", "'instructions' must be a string.", "invalid_type")
    return [{"role": "system", "content": value}]


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function" and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def _text_format(text: Any) -> Any:
    if not isinstance(text, dict):
        raise bad("text", "'text' must be an object.", "invalid_type")
    fmt = text.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": {
            k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}}
    return fmt


def input_messages(value: Any) -> list[dict]:
    """``input`` (text, or message / function_call / function_call_output items) as chat
    messages; consecutive calls join one assistant message."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise bad("input", "'input' must be a string or a non-empty array of items.",
                  "invalid_type")
    out: list[dict] = []
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad(where, f"'{where}' must be an object.", "invalid_type")
        kind = item.get("type", "message")
        if kind == "message":
            out.append({"role": item.get("role"), "content": _content(item.get("content"),
                                                                       where)})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments")}}
            if out and out[-1]["role"] == "assistant" and out[-1].get("tool_calls"):
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            out.append({"role": "tool", "tool_call_id": item.get("call_id"),
                        "content": output if isinstance(output, str) else str(output)})
        else:
            raise bad(f"{where}.type", f"input item type '{kind}' is not supported.",
                      "unsupported_parameter")
    return out


def _content(content: Any, where: str) -> Any:
    """Input/output text parts as chat text parts (the chat parser checks the rest)."""
    if not isinstance(content, list):
        return content
    parts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("input_text", "output_text", "text"):
            raise bad(f"{where}.content[{j}].type", f"content part type '{kind}' is not "
                      "supported: this model reads text only.", "unsupported_parameter")
        parts.append({"type": "text", "text": part.get("text")})
    return parts


# ---- the answer ------------------------------------------------------------------------


def output_items(text: str, reads_calls: bool) -> tuple[list[dict], list[dict]]:
    """The Responses ``output`` items of an answer's text, and its assistant chat message(s)
    for the stored conversation."""
    parsed = tool_calls.parse(text) if reads_calls else None
    if parsed is None or not parsed.calls:
        return [message_item(new_id("msg"), text)], [{"role": "assistant", "content": text}]
    items = [message_item(new_id("msg"), parsed.content.strip())] \
        if parsed.content.strip() else []
    items += [call_item(new_id("fc"), c.id, c.name, c.arguments) for c in parsed.calls]
    return items, [{"role": "assistant", "content": parsed.content.strip(),
                    "tool_calls": [c.openai() for c in parsed.calls]}]


def message_item(item_id: str, text: str, status: str = "completed") -> dict:
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def call_item(item_id: str, call_id: str, name: str, arguments: str,
              status: str = "completed") -> dict:
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}


def response_object(response_id: str, body: dict, chat: dict, *, output: list[dict],
                    result: Completion | None, status: str = "completed") -> dict:
    """A Response (``object: "response"``) echoing the request's settings."""
    finish = result.choices[0].finish_reason if result is not None else None
    if status == "completed" and finish == "length":
        status = "incomplete"
    return {
        "id": response_id, "object": "response", "created_at": int(time.time()),
        "status": status, "model": body.get("model"), "output": output,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete"
        else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "previous_response_id": body.get("previous_response_id"),
        "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
        "temperature": body.get("temperature"), "top_p": body.get("top_p"),
        "tools": body.get("tools") or [], "tool_choice": body.get("tool_choice") or "auto",
        "text": body.get("text") or {"format": {"type": "text"}},
        "store": body.get("store") is not False, "metadata": body.get("metadata") or {},
        "truncation": "disabled",
        "service_tier": openai_tier(result.tier_served) if result is not None else None,
        "usage": None if result is None else {
            "input_tokens": result.prompt_tokens, "output_tokens": result.completion_tokens,
            "total_tokens": result.total_tokens,
            "input_tokens_details": {"cached_tokens": result.cached_tokens},
            "output_tokens_details": {"reasoning_tokens": 0}},
    }
