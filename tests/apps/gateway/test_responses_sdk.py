"""``/v1/responses`` through the official ``openai`` SDK against a live server: text, streamed
and not, ``previous_response_id`` over stored responses (per tenant), the refusals and
``/v1/embeddings`` in the OpenAI error shape on the tiny model; function tools and
``text.format`` on the bundled SmolLM2 (the tiny model's 97 tokens cannot spell JSON)."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]
MODEL = "smollm2-135m-instruct"
PARAMS = {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}},
          "required": ["unit"], "additionalProperties": False}
TOOL = {"type": "function", "name": "get_weather", "description": "Weather now.",
        "parameters": PARAMS}


def _client(server, contracted):
    key = contracted(default_tier="warm")[2]
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0,
                         timeout=120)


@pytest.fixture
def client(laser_server, tiny_engine, contracted):
    return _client(laser_server, contracted)


@pytest.fixture
def smol(laser_server, smollm2_engine, contracted):
    return _client(laser_server, contracted)


def test_text_streamed_and_not(client):
    args = {"model": MODEL, "input": "hello world", "max_output_tokens": 6, "temperature": 0,
            "instructions": "Be brief."}
    whole = client.responses.create(**args)
    assert whole.object == "response" and whole.id.startswith("resp_")
    assert whole.status == "incomplete" and whole.incomplete_details.reason == \
        "max_output_tokens"
    assert whole.usage.output_tokens == 6 and whole.output_text
    assert whole.service_tier == "default"

    events = list(client.responses.create(**args, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.incomplete"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == \
        whole.output_text == events[-1].response.output_text
    assert [e.sequence_number for e in events] == list(range(1, len(events) + 1))


@pytest.mark.slow
def test_a_function_call_streamed_and_not(smol):
    client = smol
    args = {"model": MODEL, "input": "weather?", "tools": [TOOL], "tool_choice": "required",
            "temperature": 0, "max_output_tokens": 40, "parallel_tool_calls": False}
    whole = client.responses.create(**args)
    (call,) = whole.output
    assert (call.type, call.name, whole.status) == ("function_call", "get_weather", "completed")
    jsonschema.validate(json.loads(call.arguments), PARAMS)

    events = list(client.responses.create(**args, stream=True))
    pieces = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert "".join(pieces) == call.arguments
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done[0].arguments == call.arguments and events[-1].type == "response.completed"


@pytest.mark.slow
def test_text_format_json_schema(smol):
    answer = smol.responses.create(
        model=MODEL, input="a colour", max_output_tokens=40, temperature=1.0,
        text={"format": {"type": "json_schema", "name": "c", "strict": True, "schema": PARAMS}})
    assert answer.status == "completed"
    jsonschema.validate(json.loads(answer.output_text), PARAMS)


def test_previous_response_id_is_kept_per_tenant(client, laser_server, contracted):
    first = client.responses.create(model=MODEL, input="hello world", max_output_tokens=4,
                                    temperature=0)
    second = client.responses.create(model=MODEL, input="and more", max_output_tokens=4,
                                     temperature=0, previous_response_id=first.id)
    alone = client.responses.create(model=MODEL, input="and more", max_output_tokens=4,
                                    temperature=0, store=False)
    # the earlier turn (its input and its answer) is in the prompt
    assert second.usage.input_tokens >= alone.usage.input_tokens + \
        first.usage.input_tokens - 10 + first.usage.output_tokens
    assert client.responses.retrieve(first.id).output_text == first.output_text
    with pytest.raises(openai.NotFoundError) as unstored:
        client.responses.create(model=MODEL, input="x", previous_response_id=alone.id)
    assert unstored.value.param == "previous_response_id"

    other = openai.OpenAI(base_url=f"{laser_server.url}/v1", api_key=contracted()[2],
                          max_retries=0)
    with pytest.raises(openai.NotFoundError):
        other.responses.create(model=MODEL, input="x", previous_response_id=first.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(first.id)


def test_refusals_name_the_responses_parameter(client):
    cases = [({"max_output_tokens": 0}, "max_output_tokens"),
             ({"reasoning": {"effort": "low"}}, "reasoning"),
             ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
             ({"input": [{"type": "image"}]}, "input[0].type"),
             ({"text": {"format": {"type": "json_schema", "name": "x", "strict": True,
                                   "schema": {"not": {}}}}}, "text.format")]
    for extra, param in cases:
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(**{"model": MODEL, "input": "hi", **extra})
        assert info.value.param == param, (extra, info.value.param)
    with pytest.raises(openai.NotFoundError) as embeddings:
        client.embeddings.create(model=MODEL, input="hi")
    assert embeddings.value.code == "unsupported_endpoint"
    assert embeddings.value.body["message"].startswith("Embeddings are not served")


def test_a_nul_in_a_stored_input_is_a_400_naming_it(client):
    # the request is stored (store defaults to true) and PostgreSQL's jsonb refuses U+0000:
    # schemathesis found it as a 500 (DataError) on PostgreSQL
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="a\x00b", max_output_tokens=4)
    assert info.value.param == "input" and "NUL" in info.value.message
    answer = client.responses.create(model=MODEL, input="ab", max_output_tokens=4)
    assert answer.status in ("completed", "incomplete")


def test_a_stored_answer_is_storable_whatever_the_model_wrote():
    from apps.gateway.responses_views import _storable

    stored = _storable({"content": ["x\x00y", {"k\x00": "\ud800"}], "n": 1})
    assert stored == {"content": ["x\\x00y", {"k\\x00": "\\ud800"}], "n": 1}
