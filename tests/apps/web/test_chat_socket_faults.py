"""A fault of ours in a ``/ws/app/chat/`` turn is an ``error`` naming the request id, logged
once with its traceback and that id; the socket stays usable (issue 41)."""

from __future__ import annotations

import logging
import re

import pytest
from channels.testing import WebsocketCommunicator

from apps.gateway import engine_client
from laser_platform.asgi import application  # imported before caplog: it configures logging
from tests.apps.core.fault_log import BUG, assert_fault_logged
from tests.apps.gateway.fakes import FakeEngine

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


def _socket(cookie: bytes) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, "/ws/app/chat/", headers=[
        (b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000"),
        (b"cookie", cookie)])


@pytest.fixture
def failing():
    old = engine_client.set_engine_client(FakeEngine(fail_before=RuntimeError(BUG)))
    yield
    engine_client.set_engine_client(old)


async def test_a_fault_in_a_turn_is_logged_with_the_id_the_browser_is_told(world_sync, failing,
                                                                          caplog):
    caplog.set_level(logging.ERROR, logger="laser.errors")
    ws = _socket(world_sync.member_cookie)
    assert (await ws.connect())[0]
    assert (await ws.receive_json_from())["type"] == "ready"
    await ws.send_json_to({"type": "chat", "content": "hi"})
    error = (await ws.receive_json_from(timeout=5))["error"]
    assert error["type"] == "server_error"
    assert_fault_logged(caplog, re.search(r"request ID (\S+)\.$", error["message"]).group(1))
    await ws.send_json_to({"type": "ping"})
    assert (await ws.receive_json_from(timeout=5))["type"] == "pong"
    await ws.disconnect()


@pytest.mark.parametrize("frame", ['{"type": "chat", "content": "\\ud800"}',
                                   '{"type": "chat", "content": "a\\u0000b"}',  # stored
                                   '{"type": "chat", "content": ' + "[" * 1000 + "]" * 1000
                                   + "}"])
async def test_bad_text_nul_and_deep_json_are_an_error_message_not_a_500(world_sync, frame):
    ws = _socket(world_sync.member_cookie)
    assert (await ws.connect())[0]
    await ws.receive_json_from()
    await ws.send_to(text_data=frame)
    error = (await ws.receive_json_from(timeout=5))["error"]
    assert error["type"] == "invalid_request_error" and error["code"] in ("invalid_value",
                                                                         "invalid_json")
    await ws.disconnect()


async def test_a_fault_in_connect_is_logged_with_the_id_the_browser_is_told(world_sync, caplog,
                                                                           monkeypatch):
    from apps.web.consumers import WebChatConsumer

    caplog.set_level(logging.ERROR, logger="laser.errors")

    def broken(self, user):
        raise RuntimeError(BUG)

    monkeypatch.setattr(WebChatConsumer, "_setup", broken)
    ws = _socket(world_sync.member_cookie)
    assert (await ws.connect())[0]  # accepted to say why, then closed
    error = (await ws.receive_json_from(timeout=5))["error"]
    assert error["type"] == "server_error"
    assert_fault_logged(caplog, re.search(r"request ID (\S+)\.$", error["message"]).group(1))
    assert (await ws.receive_output(timeout=5))["code"] == 1011
    await ws.disconnect()
