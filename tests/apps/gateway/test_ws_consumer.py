"""WebSocket chat consumer against a scripted engine: auth, turns, history, tier changes,
backpressure. The live, real-engine version (prefix-cache reuse) is in test_live_websocket.py."""

from __future__ import annotations

import asyncio

import pytest
from channels.testing import WebsocketCommunicator

from apps.gateway import engine_client
from apps.gateway.consumers import ChatConsumer
from tests.apps.gateway.fakes import FakeEngine

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def key(contracted):
    return contracted()[2]


@pytest.fixture
def fake():
    fake = FakeEngine()
    old = engine_client.set_engine_client(fake)
    yield fake
    engine_client.set_engine_client(old)


def _socket(key: str | None = None, app=None, **kwargs) -> WebsocketCommunicator:
    protocols = ["laser.v1"] + ([f"key.{key}"] if key else [])
    return WebsocketCommunicator(app or ChatConsumer.as_asgi(), "/ws/chat/",
                                 subprotocols=protocols, **kwargs)


async def _until(ws: WebsocketCommunicator, kind: str) -> list[dict]:
    seen = []
    while True:
        message = await ws.receive_json_from(timeout=5)
        seen.append(message)
        if message["type"] in (kind, "error"):
            return seen


async def test_subprotocol_auth_echoes_only_laser_v1_and_serves_turns(fake, key):
    ws = _socket(key)
    connected, subprotocol = await ws.connect()
    assert connected and subprotocol == "laser.v1"
    assert (await ws.receive_json_from())["type"] == "ready"
    await ws.send_json_to({"type": "chat", "session_id": "s1", "content": "hi",
                           "params": {"max_tokens": 5}})
    messages = await _until(ws, "done")
    assert "".join(m["text"] for m in messages if m["type"] == "delta") == "Hello world!"
    done = messages[-1]
    assert done["type"] == "done" and done["usage"]["completion_tokens"] == 3
    assert done["tbt"]["max_s"] is not None and done["ttft_s"] >= 0
    await ws.send_json_to({"type": "chat", "session_id": "s1", "content": "again"})
    await _until(ws, "done")
    second = fake.requests[1]
    assert [m["content"] for m in second.messages] == ["hi", "Hello world!", "again"]
    assert second.session_id.endswith(":s1") and second.sampling.max_tokens != 5
    await ws.disconnect()


async def test_first_message_auth(fake, key):
    ws = _socket()
    await ws.connect()
    await ws.send_json_to({"type": "auth", "api_key": key})
    assert (await ws.receive_json_from())["type"] == "ready"
    await ws.send_json_to({"type": "ping"})
    assert (await ws.receive_json_from())["type"] == "pong"
    await ws.disconnect()


@pytest.mark.parametrize("first", [{"type": "chat", "content": "hi"},
                                   {"type": "auth", "api_key": "lsr_wrong.key"}])
async def test_unauthenticated_sockets_are_closed_4401(fake, first):
    ws = _socket()
    await ws.connect()
    await ws.send_json_to(first)
    output = await ws.receive_output(timeout=5)
    while output["type"] != "websocket.close":
        output = await ws.receive_output(timeout=5)
    assert output["code"] == 4401


async def test_auth_timeout_closes_4401(fake, settings):
    settings.LASER_WS_AUTH_TIMEOUT = 0.05
    ws = _socket()
    await ws.connect()
    output = await ws.receive_output(timeout=5)
    assert output == {"type": "websocket.close", "code": 4401}


async def test_tier_change_and_errors_are_messages(key):
    old = engine_client.set_engine_client(FakeEngine(demote_at=1))
    try:
        ws = _socket(key)
        await ws.connect()
        await ws.receive_json_from()
        await ws.send_json_to({"type": "chat", "session_id": "a", "content": "x"})
        messages = await _until(ws, "done")
        change = next(m for m in messages if m["type"] == "tier_changed")
        assert (change["from"], change["to"], change["reason"]) == ("hot", "warm",
                                                                    "hot pressure")
        assert messages[-1]["tier"] == "warm"
        await ws.send_json_to({"type": "chat", "session_id": "a", "content": "x",
                               "params": {"temperature": 9}})
        error = (await _until(ws, "done"))[-1]
        assert error["type"] == "error" and error["error"]["param"] == "temperature"
        await ws.disconnect()
    finally:
        engine_client.set_engine_client(old)


class _StuckReader(ChatConsumer):
    """A client that stopped reading: every send blocks forever."""

    async def send_json(self, content, close=False):
        await asyncio.Event().wait()


async def test_slow_reader_is_closed_4008_and_request_aborted(key, settings):
    settings.LASER_WS_SEND_QUEUE = 4
    slow = FakeEngine(words=["w"] * 200, delay=0.002)
    old = engine_client.set_engine_client(slow)
    try:
        ws = _socket(key, app=_StuckReader.as_asgi())
        await ws.connect()
        await ws.send_json_to({"type": "chat", "session_id": "s", "content": "x"})
        output = await ws.receive_output(timeout=5)
        assert output == {"type": "websocket.close", "code": 4008}
        for _ in range(100):
            if slow.aborted:
                break
            await asyncio.sleep(0.01)
        assert slow.aborted == [slow.requests[0].request_id]
    finally:
        engine_client.set_engine_client(old)


async def test_foreign_origin_is_rejected(fake, key):
    from laser_platform.asgi import application

    ws = _socket(key, app=application, headers=[(b"origin", b"https://evil.example"),
                                                (b"host", b"127.0.0.1")])
    connected, _ = await ws.connect()
    assert not connected
