"""LangChain's OpenAI chat model against a live server and the bundled SmolLM2, as an agent
framework uses it: ``with_structured_output`` (the schema is constrained in the engine) and a
``bind_tools`` loop (call -> the tool runs -> its result -> an answer)."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(900)]


class City(BaseModel):
    name: str = Field(max_length=12)
    country: str = Field(max_length=12)
    population: int = Field(ge=0, le=40_000_000)


@tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return json.dumps({"city": city, "temperature": 21, "sky": "sunny"})


@pytest.fixture
def chat(laser_server, smollm2_engine, contracted) -> ChatOpenAI:
    key = contracted(default_tier="warm")[2]
    return ChatOpenAI(model="smollm2-135m-instruct", base_url=f"{laser_server.url}/v1",
                      api_key=key, temperature=0, max_tokens=120, max_retries=0, timeout=600)


def test_with_structured_output_returns_a_validated_model(chat):
    structured = chat.with_structured_output(City, include_raw=True)
    for prompt in ("Describe the capital of France.", "Name a big city in Japan."):
        answer = structured.invoke(prompt)
        assert answer["parsing_error"] is None
        assert isinstance(answer["parsed"], City)
        assert answer["raw"].response_metadata["finish_reason"] == "stop"


def test_a_bind_tools_agent_loop_calls_the_tool_then_answers(chat):
    history = [HumanMessage("What is the weather like in Paris today?")]
    calling = chat.bind_tools([get_weather], tool_choice="required")
    first = calling.invoke(history)
    (call,) = first.tool_calls
    assert call["name"] == "get_weather" and isinstance(call["args"]["city"], str)
    assert call["id"].startswith("call_")
    history += [first, ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])]

    second = chat.bind_tools([get_weather]).invoke(history)
    assert second.tool_calls == [] and second.content
    assert second.response_metadata["finish_reason"] in ("stop", "length")
    # the call and the tool's result reached the prompt
    assert second.usage_metadata["input_tokens"] > first.usage_metadata["input_tokens"] + 20
