"""Structured outputs and tool calls through the official ``openai`` SDK against a live server
and the bundled SmolLM2 (its answers are constrained in the engine, never post-validated):
``chat.completions.parse`` with pydantic models, ``tool_choice`` required / named / auto,
streamed calls, a two-turn tool loop, and the refusals."""

from __future__ import annotations

import asyncio
import json
from enum import Enum

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(900)]
MODEL = "smollm2-135m-instruct"
ASK = [{"role": "user", "content": "Invent a person and describe them."}]
WEATHER = [{"role": "user", "content": "What is the weather like in Paris today?"}]


class Colour(str, Enum):
    red = "red"
    green = "green"
    blue = "blue"


class Address(BaseModel):
    city: str = Field(max_length=8)
    zip: int = Field(ge=10000, le=99999)


class Person(BaseModel):
    name: str = Field(max_length=10)
    age: int = Field(ge=0, le=120)
    height: float = Field(ge=0.5, le=2.5)
    colour: Colour
    tags: list[Colour] = Field(max_length=2)
    nick: str | None = Field(max_length=6)
    address: Address


WEATHER_PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20},
                   "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": False,
}
TIME_PARAMS = {
    "type": "object", "properties": {"zone": {"type": "string", "maxLength": 10}},
    "required": ["zone"], "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description":
                                      "The current weather in a city.",
                                      "parameters": WEATHER_PARAMS}},
    {"type": "function", "function": {"name": "get_time", "description":
                                      "The time in a time zone.", "parameters": TIME_PARAMS}},
]
PARAMS = {"get_weather": WEATHER_PARAMS, "get_time": TIME_PARAMS}


@pytest.fixture
def key(contracted) -> str:
    return contracted(default_tier="warm")[2]


def _client(server, key: str, cls=openai.OpenAI):
    return cls(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=600)


def _valid_call(call) -> bool:
    jsonschema.validate(json.loads(call.function.arguments), PARAMS[call.function.name])
    return call.id.startswith("call_") and call.type == "function"


def test_parse_with_a_pydantic_model_validates_50_of_50_at_temperature_1(
        laser_server, smollm2_engine, key):
    client = _client(laser_server, key, openai.AsyncOpenAI)

    async def one(seed: int):
        return await client.chat.completions.parse(
            model=MODEL, messages=ASK, response_format=Person, temperature=1.0, seed=seed,
            max_tokens=200)

    async def all_of_them():
        return await asyncio.gather(*(one(i) for i in range(50)), return_exceptions=True)

    answers = asyncio.run(all_of_them())
    failed = [a for a in answers if isinstance(a, Exception)]
    assert not failed, failed[:3]
    assert {a.choices[0].finish_reason for a in answers} == {"stop"}
    people = [a.choices[0].message.parsed for a in answers]
    assert all(isinstance(p, Person) for p in people)
    assert len({p.model_dump_json() for p in people}) > 10  # sampled, not one fixed answer


def test_tool_choice_required_gives_50_valid_calls(laser_server, smollm2_engine, key):
    client = _client(laser_server, key, openai.AsyncOpenAI)

    async def one(seed: int):
        return await client.chat.completions.create(
            model=MODEL, messages=WEATHER, tools=TOOLS, tool_choice="required",
            parallel_tool_calls=False, temperature=1.0, seed=seed, max_tokens=80)

    async def all_of_them():
        return await asyncio.gather(*(one(i) for i in range(50)))

    answers = asyncio.run(all_of_them())
    assert {a.choices[0].finish_reason for a in answers} == {"tool_calls"}
    calls = [c for a in answers for c in a.choices[0].message.tool_calls]
    assert len(calls) == 50 and all(_valid_call(c) for c in calls)


def test_a_streamed_named_call_reassembles_to_the_whole_answer(
        laser_server, smollm2_engine, key):
    client = _client(laser_server, key)
    args = {"model": MODEL, "messages": WEATHER, "tools": TOOLS, "temperature": 0,
            "max_tokens": 60,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    whole = client.chat.completions.create(**args)
    (call,) = whole.choices[0].message.tool_calls
    assert whole.choices[0].finish_reason == "tool_calls" and _valid_call(call)
    assert call.function.name == "get_weather"

    chunks = list(client.chat.completions.create(**args, stream=True))
    pieces = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert pieces[0].id.startswith("call_") and pieces[0].function.name == "get_weather"
    assert {p.index for p in pieces} == {0} and len(pieces) > 2  # arguments in pieces
    assert "".join(p.function.arguments or "" for p in pieces) == call.function.arguments
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    with client.chat.completions.stream(**args) as stream:  # the SDK's own accumulation
        final = stream.get_final_completion()
    (again,) = final.choices[0].message.tool_calls
    assert again.function.arguments == call.function.arguments


def test_a_two_turn_tool_loop(laser_server, smollm2_engine, key):
    client = _client(laser_server, key)
    first = client.chat.completions.create(model=MODEL, messages=WEATHER, tools=TOOLS,
                                           tool_choice="required", temperature=0,
                                           max_tokens=60, parallel_tool_calls=False)
    message = first.choices[0].message
    (call,) = message.tool_calls
    result = {"temperature": 21, "sky": "sunny"}
    history = [*WEATHER, message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}]
    args = {"model": MODEL, "tools": TOOLS, "temperature": 0, "max_tokens": 40}
    second = client.chat.completions.create(messages=history, tool_choice="auto", **args)
    answer = second.choices[0]
    assert answer.message.tool_calls is None and answer.message.content
    assert answer.finish_reason in ("stop", "length")
    # the call and its result reached the prompt
    alone = client.chat.completions.create(messages=WEATHER, **{**args, "max_tokens": 1})
    assert second.usage.prompt_tokens > alone.usage.prompt_tokens + 20


def test_json_object_and_refusals(laser_server, smollm2_engine, key):
    client = _client(laser_server, key)
    answer = client.chat.completions.create(
        model=MODEL, response_format={"type": "json_object"}, temperature=0, max_tokens=120,
        messages=[{"role": "user", "content": "Reply in JSON with keys name and age."}])
    assert answer.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(answer.choices[0].message.content), dict)

    with pytest.raises(openai.BadRequestError) as bad_schema:
        client.chat.completions.create(
            model=MODEL, messages=ASK, max_tokens=20, response_format={
                "type": "json_schema", "json_schema": {
                    "name": "x", "strict": True,
                    "schema": {"type": "object", "not": {"required": ["a"]}}}})
    assert bad_schema.value.param == "response_format"
    assert "does not compile" in bad_schema.value.message

    with pytest.raises(openai.LengthFinishReasonError):  # cut short: never parsed as valid
        client.chat.completions.parse(model=MODEL, messages=ASK, response_format=Person,
                                      max_tokens=5)

    from apps.slo.models import RequestRecord
    from apps.slo.services import flush_reports

    flush_reports()
    kinds = [r.constraint for r in RequestRecord.objects.order_by("arrival")]
    assert kinds == ["json_object", "json_schema", "json_schema"]  # the SLO record says so


def test_a_websocket_turn_calls_tools_like_rest(laser_server, smollm2_engine, key):
    from websockets.sync.client import connect

    params = {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False,
              "temperature": 0, "max_tokens": 60}
    with connect(f"{laser_server.ws_url}/ws/chat/", subprotocols=["laser.v1", f"key.{key}"],
                 origin=laser_server.url, open_timeout=10) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "ready"
        ws.send(json.dumps({"type": "chat", "session_id": "s", "params": params,
                            "content": WEATHER[0]["content"]}))
        while (message := json.loads(ws.recv(timeout=120)))["type"] not in ("done", "error"):
            pass
    assert message["type"] == "done" and message["finish_reason"] == "tool_calls"
    (call,) = message["tool_calls"]
    rest = _client(laser_server, key).chat.completions.create(model=MODEL, messages=WEATHER,
                                                              **params)
    assert call["function"] == rest.choices[0].message.tool_calls[0].function.model_dump()
