"""A fault of ours on each gateway door (REST, SSE, ``/ws/chat/``) is a 500 whose message names
the request id, logged once with its traceback and that id (issue 41: a lone surrogate's
``UnicodeEncodeError`` in the tokeniser was answered 500 with nothing logged but Django's one
line)."""

from __future__ import annotations

import json
import logging
import re

import pytest
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient

from apps.gateway import engine_client
from apps.gateway.consumers import ChatConsumer
from tests.apps.core.fault_log import BUG, assert_fault_logged
from tests.apps.gateway.fakes import FakeEngine

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]
MODEL = "smollm2-135m-instruct"
RID = re.compile(r"request ID (\S+?)\.?\)?\.?$")


@pytest.fixture
def installed():
    """``installed(fake)`` makes ``fake`` the process's engine client for this test."""
    olds = []

    def install(fake: FakeEngine) -> FakeEngine:
        olds.append(engine_client.set_engine_client(fake))
        return fake

    yield install
    if olds:
        engine_client.set_engine_client(olds[0])


@pytest.fixture(autouse=True)
def _errors_captured(caplog):
    caplog.set_level(logging.ERROR, logger="laser.errors")


def _told(error: dict) -> str:
    assert error["type"] == "server_error", error
    return RID.search(error["message"]).group(1)


def _post(path: str, body: dict, key: str):
    return AsyncClient(raise_request_exception=False).post(
        path, json.dumps(body), content_type="application/json",
        headers={"Authorization": f"Bearer {key}"})


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/completions", {"prompt": "hi", "stream": True}),
])
async def test_rest_a_fault_in_the_serving_path_is_a_logged_500(installed, key, caplog, path,
                                                                body):
    installed(FakeEngine(fail_before=RuntimeError(BUG)))
    response = await _post(path, {"model": MODEL, **body}, key)
    assert response.status_code == 500
    rid = _told(response.json()["error"])
    assert response["X-Request-Id"] == rid
    assert_fault_logged(caplog, rid)


async def test_sse_a_fault_after_the_first_chunk_is_logged_with_the_streams_id(installed, key,
                                                                              caplog):
    installed(FakeEngine(fail_at=1))  # EngineError("worker died") after one delta
    response = await _post("/v1/chat/completions", {
        "model": MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}]}, key)
    raw = b"".join([part async for part in response.streaming_content]).decode()
    frames = [json.loads(b[6:]) for b in raw.split("\n\n") if b.startswith("data: {")]
    assert response.status_code == 200 and "error" in frames[-1]
    rid = _told(frames[-1]["error"])
    assert rid == response["X-Request-Id"]  # the stream's id, in its header and its error
    assert_fault_logged(caplog, rid, cause="worker died")


async def test_ws_chat_a_fault_in_a_turn_is_logged_and_the_socket_stays(installed, key, caplog):
    installed(FakeEngine(fail_before=RuntimeError(BUG)))
    ws = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat/",
                               subprotocols=["laser.v1", f"key.{key}"])
    await ws.connect()
    assert (await ws.receive_json_from())["type"] == "ready"
    await ws.send_json_to({"type": "chat", "session_id": "s", "content": "hi"})
    error = await ws.receive_json_from(timeout=5)
    assert (error["type"], error["session_id"]) == ("error", "s")
    assert_fault_logged(caplog, _told(error["error"]))
    await ws.send_json_to({"type": "ping"})
    assert (await ws.receive_json_from(timeout=5))["type"] == "pong"
    await ws.disconnect()


async def test_ws_chat_a_fault_handling_a_message_is_logged_then_1011(installed, key, caplog,
                                                                      monkeypatch):
    installed(FakeEngine())

    async def broken(self, content, **kwargs):
        raise RuntimeError(BUG)

    ws = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat/",
                               subprotocols=["laser.v1", f"key.{key}"])
    await ws.connect()
    assert (await ws.receive_json_from())["type"] == "ready"
    monkeypatch.setattr(ChatConsumer, "receive_json", broken)
    await ws.send_json_to({"type": "ping"})
    error = await ws.receive_json_from(timeout=5)
    assert_fault_logged(caplog, _told(error["error"]))
    assert (await ws.receive_output(timeout=5))["code"] == 1011
    await ws.disconnect()  # the server closed: this delivers it, and gives the slot back


@pytest.mark.parametrize("stage", ["connect", "a frame"])
async def test_ws_chat_a_fault_in_connect_or_a_frame_is_logged_then_1011(installed, key, caplog,
                                                                         monkeypatch, stage):
    """A fault that escapes ``connect`` (the key lookup) or a frame's decoding (outside the
    handler's own net) is logged with its traceback and the id the client is told."""
    from apps.gateway import consumers

    installed(FakeEngine())

    def broken(*args, **kwargs):
        raise RuntimeError(BUG)

    if stage == "connect":
        monkeypatch.setattr(consumers, "aapi_key_resolve", broken)
    ws = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat/",
                               subprotocols=["laser.v1", f"key.{key}"])
    assert (await ws.connect())[0]
    if stage == "a frame":
        assert (await ws.receive_json_from())["type"] == "ready"
        monkeypatch.setattr(consumers, "decode_frame", broken)
        await ws.send_json_to({"type": "ping"})
    error = await ws.receive_json_from(timeout=5)
    assert_fault_logged(caplog, _told(error["error"]))
    assert (await ws.receive_output(timeout=5))["code"] == 1011
    await ws.disconnect()
