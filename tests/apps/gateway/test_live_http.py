"""Raw HTTP (httpx) against a live server with the real engine (tiny model): bad input is a 4xx
in the OpenAI error shape, never a 500; a client that goes away frees its KV blocks; tenants
share neither cached prefixes nor rate limits."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.apps.gateway.live import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]
MODEL = "smollm2-135m-instruct"
CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "hello world"}]


def _chat(**extra) -> bytes:
    return json.dumps({"model": MODEL, "messages": HI, **extra}).encode()


JSON = "application/json"
# (what, method, content type, body, expected status, expected param); "{key}" = a valid key.
BAD = [
    ("malformed JSON", "POST", JSON, b'{"model": ', 400, None),
    ("a JSON array", "POST", JSON, b"[1, 2]", 400, None),
    ("a JSON string", "POST", JSON, b'"hi"', 400, None),
    ("not UTF-8", "POST", JSON, b'\xff\xfe{"a": 1}', 400, None),
    ("text/plain", "POST", "text/plain", _chat(), 415, None),
    ("no content type", "POST", None, _chat(), 415, None),
    ("form encoded", "POST", "application/x-www-form-urlencoded", b"model=x", 415, None),
    ("GET", "GET", None, b"", 405, None),
    ("oversize body", "POST", JSON, _chat(user="x" * (1024 * 1024 + 1)), 413, None),
    ("temperature < 0", "POST", JSON, _chat(temperature=-1), 400, "temperature"),
    ("temperature a string", "POST", JSON, _chat(temperature="hot"), 400, "temperature"),
    ("top_p 0", "POST", JSON, _chat(top_p=0), 400, "top_p"),
    ("n 0", "POST", JSON, _chat(n=0), 400, "n"),
    ("n a float", "POST", JSON, _chat(n=1.5), 400, "n"),
    ("max_tokens < 0", "POST", JSON, _chat(max_tokens=-5), 400, "max_tokens"),
    ("max_tokens past the context", "POST", JSON, _chat(max_tokens=10**7), 400, "max_tokens"),
    ("max_completion_tokens a string", "POST", JSON, _chat(max_completion_tokens="x"), 400,
     "max_completion_tokens"),
    ("presence_penalty 9", "POST", JSON, _chat(presence_penalty=9), 400, "presence_penalty"),
    ("seed a string", "POST", JSON, _chat(seed="x"), 400, "seed"),
    ("five stop strings", "POST", JSON, _chat(stop=["a", "b", "c", "d", "e"]), 400, "stop"),
    ("an empty stop string", "POST", JSON, _chat(stop=[""]), 400, "stop"),
    ("stop a number", "POST", JSON, _chat(stop=5), 400, "stop"),
    ("logprobs a string", "POST", JSON, _chat(logprobs="yes"), 400, "logprobs"),
    ("stream a string", "POST", JSON, _chat(stream="yes"), 400, "stream"),
    ("stream_options without stream", "POST", JSON,
     _chat(stream_options={"include_usage": True}), 400, "stream_options"),
    ("unknown service_tier", "POST", JSON, _chat(service_tier="gold"), 400, "service_tier"),
    ("response_format xml", "POST", JSON, _chat(response_format={"type": "xml"}), 400,
     "response_format.type"),
    ("an uncompilable schema", "POST", JSON, _chat(response_format={
        "type": "json_schema", "json_schema": {"name": "x", "strict": True,
                                               "schema": {"not": {}}}}), 400, "response_format"),
    ("no messages", "POST", JSON, json.dumps({"model": MODEL}).encode(), 400, "messages"),
    ("a tool message without its call", "POST", JSON,
     _chat(messages=[{"role": "tool", "content": "x"}]), 400, "messages[0].tool_call_id"),
    ("no model", "POST", JSON, json.dumps({"messages": HI}).encode(), 400, "model"),
    ("an unknown model", "POST", JSON, _chat(model="gpt-4o"), 404, "model"),
    # issue 41: the tokeniser raised UnicodeEncodeError (500), json.loads RecursionError (500)
    ("a lone surrogate", "POST", JSON, _chat(messages=[{"role": "user", "content": "\ud800"}]),
     400, "messages[0].content"),
    ("JSON nested 1,000 deep", "POST", JSON,
     b'{"model": "m", "messages": ' + b"[" * 1000 + b"]" * 1000 + b"}", 400, None),
]


def test_bad_input_is_a_4xx_in_the_openai_shape(laser_server, tiny_engine, contracted):
    key = contracted()[2]
    wrong = []
    with httpx.Client(base_url=laser_server.url, timeout=30) as client:
        cases = [(what, method, ctype, body, status, param, f"Bearer {key}")
                 for what, method, ctype, body, status, param in BAD]
        cases += [("a wrong key", "POST", JSON, _chat(), 401, None, "Bearer sk-wrong"),
                  ("no key", "POST", JSON, _chat(), 401, None, "")]
        for what, method, ctype, body, status, param, auth in cases:
            headers = {"Authorization": auth} if auth else {}
            if ctype:
                headers["Content-Type"] = ctype
            response = client.request(method, CHAT, content=body, headers=headers)
            error = response.json().get("error", {})
            if (response.status_code, set(error), error.get("param")) != (
                    status, {"message", "type", "param", "code"}, param):
                wrong.append((what, response.status_code, response.text[:200]))
    assert wrong == []


def _stats(engine):
    return engine.stats_now()


def test_disconnect_mid_stream_frees_kv_blocks(laser_server, tiny_engine, contracted):
    key = contracted()[2]
    body = _chat(max_tokens=3000, temperature=0, stream=True)
    with httpx.Client(base_url=laser_server.url, timeout=30) as client:
        with client.stream("POST", CHAT, content=body, headers={
                "Authorization": f"Bearer {key}", "Content-Type": JSON}) as response:
            lines = response.iter_lines()  # kept open: dropping it would hang up already
            data = [line for line in (next(lines) for _ in range(6)) if line]
            assert len(data) == 3 and _stats(tiny_engine).used_blocks > 0
    # Closing a response that was not read to its end closes the connection.
    assert wait_until(lambda: _stats(tiny_engine).used_blocks == 0, timeout=1.0)
    record = _only_record()
    assert record.outcome == "cancelled" and 3 <= record.completion_tokens < 3000


def test_disconnect_before_a_whole_response_frees_kv_blocks(laser_server, tiny_engine,
                                                           contracted):
    key = contracted()[2]
    with httpx.Client(base_url=laser_server.url, timeout=httpx.Timeout(30, read=0.5)) as client:
        with pytest.raises(httpx.ReadTimeout):
            client.post(CHAT, content=_chat(max_tokens=3000, temperature=0),
                        headers={"Authorization": f"Bearer {key}", "Content-Type": JSON})
    assert wait_until(lambda: _stats(tiny_engine).used_blocks == 0, timeout=1.0)
    record = _only_record()
    assert record.outcome == "cancelled" and record.completion_tokens < 3000


def _only_record():
    from apps.slo.models import RequestRecord
    from apps.slo.services import flush_reports

    flush_reports()
    [record] = RequestRecord.objects.all()
    return record


SYSTEM = ("You are a careful assistant. Answer in one short sentence, and never repeat the "
          "question. ") * 4


def test_tenants_share_neither_cached_prefixes_nor_rate_limits(laser_server, tiny_engine,
                                                              contracted):
    from apps.slo.models import RequestRecord
    from apps.slo.services import flush_reports

    tenant_a, _, key_a = contracted()
    tenant_b, _, key_b = contracted()
    _, _, key_limited = contracted(requests_per_min=1)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}]

    def cached(key: str) -> int:
        response = httpx.post(f"{laser_server.url}{CHAT}", timeout=30, json={
            "model": MODEL, "messages": messages, "max_tokens": 2},
            headers={"Authorization": f"Bearer {key}"})
        assert response.status_code == 200, response.text
        return response.json()["usage"]["prompt_tokens_details"]["cached_tokens"]

    first_a, second_a, first_b, second_b = cached(key_a), cached(key_a), cached(key_b), \
        cached(key_b)
    assert first_a == 0 and second_a >= 16  # at least one whole block reused
    assert first_b == 0 and second_b == second_a  # B's own cache works, A's never served B

    limited = [httpx.post(f"{laser_server.url}{CHAT}", timeout=30, content=_chat(max_tokens=1),
                          headers={"Authorization": f"Bearer {key_limited}",
                                   "Content-Type": JSON}).status_code for _ in range(3)]
    # rpm 1: the second is excess under the burst ceiling (2 x), the third over it
    assert limited == [200, 200, 429] and cached(key_a) == second_a  # A is not limited by it
    flush_reports()
    tenants = [r.tenant_id for r in RequestRecord.objects.order_by("arrival")[:4]]
    assert tenants == [tenant_a.pk, tenant_a.pk, tenant_b.pk, tenant_b.pk]


def test_a_stream_settles_after_the_client_hangs_up_whatever_redis_does(
        laser_server, tiny_engine, contracted, monkeypatch, caplog):
    """SDKs hang up right after ``[DONE]`` and Django then cancels the view: the settlement
    still books the record and gives the slots back while the reservation's Redis call hangs
    and then fails (a restarted Redis: redis-py's reconnect back-off)."""
    import asyncio

    import openai
    import redis

    from apps.gateway import admission
    from apps.gateway.slots import slots
    from tests.faults.test_engine_restart import _records

    async def hanging_then_failing(self, actual_tokens):
        await asyncio.sleep(2)
        raise redis.ConnectionError("Connection reset by peer")

    monkeypatch.setattr(admission.Admission, "asettle", hanging_then_failing)
    client = openai.OpenAI(base_url=f"{laser_server.url}/v1", max_retries=0, timeout=60,
                           api_key=contracted()[2])
    chunks = list(client.chat.completions.create(model=MODEL, messages=HI, max_tokens=5,
                                                 temperature=0, stream=True))
    assert chunks[-1].choices[0].finish_reason in ("length", "stop")
    assert wait_until(lambda: _records() == [("ok", "")], timeout=10), _records()
    assert wait_until(lambda: not slots._requests, timeout=10), slots._requests
    assert "could not settle token reservation" in caplog.text
    assert "Connection reset by peer" in caplog.text  # with its traceback
