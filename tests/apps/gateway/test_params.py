"""OpenAI bodies -> EngineRequest: every accepted field lands, every bad one is a 400 naming it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from apps.core.errors import APIError
from apps.gateway.params import parse_chat_request, parse_completion_request
from inference.request import ContractTargets, Tier

MODEL = "smollm2-135m-instruct"
TENANT = SimpleNamespace(pk=7)


def contract(tier: str = "hot") -> SimpleNamespace:
    return SimpleNamespace(tier=tier, targets=ContractTargets(ttft_p99_s=0.3))


def chat(**body):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **body}
    return parse_chat_request(body, tenant=TENANT, contract=contract())


def completion(**body):
    body = {"model": MODEL, "prompt": "Once upon", **body}
    return parse_completion_request(body, tenant=TENANT, contract=contract("warm"))


def test_chat_fields_reach_the_engine_request():
    parsed = chat(max_completion_tokens=9, temperature=0.5, top_p=0.9, n=2, stop="\n", seed=4,
                  presence_penalty=0.1, frequency_penalty=-0.2, logprobs=True, top_logprobs=3,
                  user="u1", stream=True, stream_options={"include_usage": True},
                  service_tier="priority", some_unknown_field={"ignored": 1})
    req, s = parsed.engine_request, parsed.engine_request.sampling
    assert (s.max_tokens, s.temperature, s.top_p, s.n, s.stop, s.seed) == (9, 0.5, 0.9, 2,
                                                                           ("\n",), 4)
    assert (s.presence_penalty, s.frequency_penalty, s.logprobs, s.top_logprobs) == (
        0.1, -0.2, True, 3)
    assert req.messages == [{"role": "user", "content": "hi"}]
    assert req.tier is Tier.HOT and req.tenant_id == "7" and req.cache_salt == "7"
    assert req.targets.ttft_p99_s == 0.3
    assert parsed.stream and parsed.include_usage and parsed.user == "u1"
    assert parsed.request_id.startswith("chatcmpl-")


def test_text_parts_and_developer_role_are_flattened():
    parsed = chat(messages=[{"role": "developer", "content": "be brief"},
                            {"role": "user", "content": [{"type": "text", "text": "a"},
                                                         {"type": "text", "text": "b"}]}])
    assert parsed.engine_request.messages == [{"role": "system", "content": "be brief"},
                                              {"role": "user", "content": "ab"}]


def test_max_tokens_left_open_uses_the_default(settings):
    settings.LASER_DEFAULT_MAX_TOKENS = 33
    parsed = chat()
    assert parsed.engine_request.sampling.max_tokens == 33 and not parsed.max_tokens_given


def test_completion_prompt_forms_and_logprobs():
    parsed = completion(prompt=["one prompt"], logprobs=2, max_tokens=5)
    assert parsed.engine_request.prompt == "one prompt"
    assert parsed.logprobs and parsed.top_logprobs == 2
    assert parsed.engine_request.tier is Tier.WARM
    ids = completion(prompt=[1, 2, 3]).engine_request
    assert ids.prompt_token_ids == [1, 2, 3] and ids.prompt is None


@pytest.mark.parametrize("body, param", [
    ({"temperature": 3}, "temperature"),
    ({"temperature": "hot"}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"n": 0}, "n"),
    ({"n": 99}, "n"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_completion_tokens": -1}, "max_completion_tokens"),
    ({"max_tokens": "10"}, "max_tokens"),
    ({"stop": 5}, "stop"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"seed": 1.5}, "seed"),
    ({"presence_penalty": 2.5}, "presence_penalty"),
    ({"frequency_penalty": -3}, "frequency_penalty"),
    ({"logprobs": "yes"}, "logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"stream": "true"}, "stream"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"stream": True, "stream_options": {"include_usage": 1}}, "include_usage"),
    ({"user": 5}, "user"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages[0].content[0].type"),
    ({"model": None}, "model"),
    ({"model": 3}, "model"),
])
def test_bad_chat_values_are_400_naming_the_param(body, param):
    with pytest.raises(APIError) as info:
        chat(**body)
    assert info.value.status == 400 and info.value.param == param, info.value


@pytest.mark.parametrize("body, param", [
    ({"functions": [{"name": "f"}]}, "functions"),
    ({"function_call": "auto"}, "function_call"),
    ({"logit_bias": {"50256": -100}}, "logit_bias"),
    ({"audio": {"voice": "alloy"}}, "audio"),
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"prediction": {"type": "content", "content": "x"}}, "prediction"),
    ({"store": True}, "store"),
    ({"reasoning_effort": "low"}, "reasoning_effort"),
])
def test_unsupported_chat_features_are_refused(body, param):
    with pytest.raises(APIError) as info:
        chat(**body)
    assert (info.value.status, info.value.param, info.value.code) == (
        400, param, "unsupported_parameter")


def test_neutral_values_of_unsupported_features_pass():
    chat(tools=[], response_format={"type": "text"}, modalities=["text"], logit_bias={},
         store=False, tool_choice="none")


@pytest.mark.parametrize("body, param", [
    ({"prompt": None}, "prompt"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": {"x": 1}}, "prompt"),
    ({"logprobs": 6}, "logprobs"),
    ({"logprobs": True}, "logprobs"),
    ({"echo": True}, "echo"),
    ({"suffix": "end"}, "suffix"),
    ({"best_of": 3}, "best_of"),
])
def test_bad_completion_values_are_400(body, param):
    with pytest.raises(APIError) as info:
        completion(**body)
    assert info.value.status == 400 and info.value.param == param, info.value


def test_unknown_model_is_404_model_not_found():
    with pytest.raises(APIError) as info:
        chat(model="gpt-4o")
    assert (info.value.status, info.value.code, info.value.param) == (
        404, "model_not_found", "model")


def test_non_object_body_is_refused():
    with pytest.raises(APIError) as info:
        parse_chat_request([1, 2], tenant=TENANT, contract=contract())
    assert info.value.status == 400
