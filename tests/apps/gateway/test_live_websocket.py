"""``/ws/chat/`` through a live server with the ``websockets`` client and the real engine (tiny
model): subprotocol auth, turns that reuse their session's cached prefix, a hang-up that frees
the KV blocks, origin and auth refusals. Consumer details are in ``test_ws_consumer.py``."""

from __future__ import annotations

import json

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.apps.gateway.live import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def _socket(server, key: str | None, origin: str | None = None):
    protocols = ["laser.v1"] + ([f"key.{key}"] if key else [])
    return connect(f"{server.ws_url}/ws/chat/", subprotocols=protocols,
                   origin=origin or server.url, open_timeout=10)


def _until(ws, kind: str) -> list[dict]:
    seen = []
    while True:
        seen.append(json.loads(ws.recv(timeout=30)))
        if seen[-1]["type"] in (kind, "error"):
            return seen


def test_turns_stream_and_reuse_the_sessions_prefix(laser_server, tiny_engine, contracted):
    key = contracted()[2]
    params = {"max_tokens": 8, "temperature": 0}
    with _socket(laser_server, key) as ws:
        assert ws.subprotocol == "laser.v1"
        assert json.loads(ws.recv(timeout=10))["type"] == "ready"
        ws.send(json.dumps({"type": "chat", "session_id": "s1", "content": "hello world",
                            "params": params}))
        first = _until(ws, "done")
        ws.send(json.dumps({"type": "chat", "session_id": "s1", "content": "and again",
                            "params": params}))
        second = _until(ws, "done")
    text = "".join(m["text"] for m in first if m["type"] == "delta")
    rest = httpx.post(f"{laser_server.url}/v1/chat/completions", timeout=30, json={
        "model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "hello world"}],
        **params}, headers={"Authorization": f"Bearer {key}"}).json()
    assert text == rest["choices"][0]["message"]["content"]  # one engine, one greedy answer
    done1, done2 = first[-1], second[-1]
    assert (done1["type"], done1["finish_reason"], done1["tier"]) == ("done", "length", "hot")
    assert done1["usage"]["completion_tokens"] == 8 and done1["ttft_s"] > 0
    assert done2["usage"]["cached_tokens"] >= 16  # turn 1's prompt blocks served again
    assert done2["usage"]["prompt_tokens"] > done1["usage"]["prompt_tokens"] + 8


def test_hanging_up_mid_turn_frees_kv_blocks(laser_server, tiny_engine, contracted):
    key = contracted()[2]
    with _socket(laser_server, key) as ws:
        json.loads(ws.recv(timeout=10))
        ws.send(json.dumps({"type": "chat", "session_id": "s", "content": "hello world",
                            "params": {"max_tokens": 3000, "temperature": 0}}))
        deltas = [json.loads(ws.recv(timeout=30)) for _ in range(3)]
        assert {m["type"] for m in deltas} == {"delta"}
        assert tiny_engine.stats_now().used_blocks > 0
    assert wait_until(lambda: tiny_engine.stats_now().used_blocks == 0, timeout=1.0)


def test_foreign_origin_and_missing_key_are_refused(laser_server, tiny_engine, contracted):
    key = contracted()[2]
    with pytest.raises(InvalidStatus) as refused:
        _socket(laser_server, key, origin="https://evil.example")
    assert refused.value.response.status_code == 403
    with _socket(laser_server, None) as ws:
        ws.send(json.dumps({"type": "chat", "content": "hi"}))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd.code == 4401
