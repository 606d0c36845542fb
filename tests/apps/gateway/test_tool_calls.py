"""Tool calls and response formats at the gateway: the parameters -> the engine's
``Constraint`` (or a 400 naming the field), the Hermes prompt for a template without tools,
and the incremental call parser (a stream cut anywhere gives the whole answer's calls)."""

from __future__ import annotations

import json
import random

import pytest

from apps.core.errors import APIError
from apps.gateway.tool_calls import CallParser, parse
from inference.tokenizer import CHATML, ChatTemplate
from tests.apps.gateway.test_params import chat

FN = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}
OTHER = {"type": "function", "function": {"name": "get_time"}}


def test_response_formats_become_constraints():
    assert chat(response_format={"type": "text"}).engine_request.constraint is None
    assert chat(response_format={"type": "json_object"}).engine_request.constraint.kind == \
        "json_object"
    a = chat(response_format={"type": "json_schema", "json_schema": {
        "name": "p", "strict": True, "schema": {"type": "object", "properties": {"b": {}}}}})
    b = chat(response_format={"type": "json_schema", "json_schema": {
        "name": "p", "strict": True, "schema": {"properties": {"b": {}}, "type": "object"}}})
    assert a.engine_request.constraint == b.engine_request.constraint  # one cache key
    assert a.engine_request.constraint.strict


@pytest.mark.parametrize("body, param", [
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"response_format": "json"}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
     "response_format.json_schema.name"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": []}}},
     "response_format.json_schema.schema"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]},
     "tools[0].function.name"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [FN], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice"),
    ({"tools": [FN], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]},
     "messages[0].tool_calls"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": 3}}]}]},
     "messages[0].tool_calls[0]"),
])
def test_bad_tool_and_format_values_are_400_naming_the_param(body, param):
    with pytest.raises(APIError) as info:
        chat(**body)
    assert (info.value.status, info.value.param) == (400, param), info.value


def test_tool_choices():
    auto = chat(tools=[FN, OTHER])
    assert auto.tools.choice == "auto" and auto.engine_request.constraint is None
    assert [t["name"] for t in auto.engine_request.tools] == ["get_weather", "get_time"]
    none = chat(tools=[FN], tool_choice="none")
    assert none.engine_request.tools is None and not none.tools.calls
    required = chat(tools=[FN, OTHER], tool_choice="required", parallel_tool_calls=False)
    c = required.engine_request.constraint
    assert (c.kind, c.parallel, c.param) == ("tool_calls", False, "tools")
    assert [t["name"] for t in json.loads(c.schema)] == ["get_weather", "get_time"]
    named = chat(tools=[FN, OTHER], tool_choice={"type": "function",
                                                 "function": {"name": "get_time"}})
    assert [t["name"] for t in json.loads(named.engine_request.constraint.schema)] == \
        ["get_time"]
    # a tool call beats a response format: the call grammar is what the answer must match
    both = chat(tools=[FN], tool_choice="required", response_format={"type": "json_object"})
    assert both.engine_request.constraint.kind == "tool_calls"


def test_a_template_without_tools_gets_the_hermes_convention():
    template = ChatTemplate(CHATML)
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    parsed = chat(messages=[{"role": "user", "content": "weather?"},
                            {"role": "assistant", "content": None, "tool_calls": [call]},
                            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
                  tools=[FN])
    text = template.render(parsed.engine_request.messages, tools=parsed.engine_request.tools)
    assert text.startswith("<|im_start|>system\nYou can call functions.")
    assert '"name": "get_weather"' in text.split("<tools>\n")[1].split("</tools>")[0]
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n' \
           '</tool_call><|im_end|>' in text
    assert "<|im_start|>tool\n<tool_response>\nsunny\n</tool_response><|im_end|>" in text


ANSWERS = [
    '<tool_call>\n{"name": "a", "arguments": {"s": "x}\\"{", "n": [1, {"b": 2}]}}\n'
    '</tool_call>\n<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>',
    "Plain text with a < sign and <tool but no call.",
    'Let me look.\n<tool_call>\n{"arguments": {"x": 1}, "name": "g"}\n</tool_call>',
    '<tool_call>\n{"name": "a", "arguments": {"s": "cut sh',
    "<tool_call>\nnot json\n</tool_call>",
]


@pytest.mark.parametrize("text", ANSWERS)
def test_a_stream_cut_anywhere_parses_as_the_whole_answer(text):
    whole = parse(text)
    rng = random.Random(text)
    for _ in range(30):
        parser, content, calls = CallParser(), "", {}
        at = 0
        while at < len(text):
            step = rng.randint(1, 6)
            events = parser.feed(text[at:at + step])
            at += step
            content += events.content
            for entry in events.stream_entries():
                call = calls.setdefault(entry["index"], ["", ""])
                call[0] += entry["function"].get("name", "")
                call[1] += entry["function"]["arguments"]
        end = parser.finish()
        content += end.content
        for index, piece in end.arguments:
            calls[index][1] += piece
        assert content == whole.content
        assert [calls[i] for i in sorted(calls)] == [[c.name, c.arguments] for c in whole.calls]


def test_parsed_calls():
    first = parse(ANSWERS[0])
    assert [(c.name, json.loads(c.arguments)) for c in first.calls] == [
        ("a", {"s": 'x}"{', "n": [1, {"b": 2}]}), ("b", {})]
    assert first.content == "" and len({c.id for c in first.calls}) == 2
    assert parse(ANSWERS[1]).calls == [] and parse(ANSWERS[1]).content == ANSWERS[1]
    assert [c.name for c in parse(ANSWERS[2]).calls] == ["g"]
    assert parse(ANSWERS[4]).calls == [] and parse(ANSWERS[4]).content == ANSWERS[4]
