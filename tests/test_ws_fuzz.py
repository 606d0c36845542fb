"""Hostile frames against both chat sockets (issue 18), through uvicorn with the real engine
(tiny model): ``/ws/chat/`` (API key) and ``/ws/app/chat/`` (session cookie).

Binary and empty frames, malformed JSON, JSON nested 5,000 deep, wrong types in every field,
oversize messages, floods, and a seeded stream of random messages. Every frame gets an ``error``
message (never a ``server_error``) or the socket closes with a documented code (1009 too big,
4008 slow reader); never an abnormal close (no close frame: 1006), never 1011, and nothing
logged as a crash or a task destroyed while pending."""

from __future__ import annotations

import gc
import json
import logging
import random
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests import test_openapi_fuzz

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True),
              pytest.mark.timeout(300)]

server = test_openapi_fuzz.server  # the project's ASGI app in uvicorn on a free port
tiny_engine = test_openapi_fuzz.tiny_engine  # AsyncEngine over a 2-layer random model

MAX_MESSAGE = 64 * 1024
DOCUMENTED_CLOSES = {1009, 4008}
DEEP = '{"type": "chat", "session_id": "d", "messages": ' + "[" * 5000 + "]" * 5000 + "}"
CHAT = {"type": "chat", "session_id": "s", "content": "hi", "params": {"max_tokens": 2}}
WEB_CHAT = {"type": "chat", "content": "hi", "max_tokens": 2}
# Frames that must each be answered with an ``error`` message, the socket staying open.
BAD_FRAMES: list[str | bytes] = [
    b"\x00\xff binary", b"", "", "not json", "{", "[" * 60_000, DEEP, "NaN",
    '{"type": "chat", "content": Infinity}', json.dumps([1, 2]), json.dumps("chat"),
    json.dumps(None), json.dumps(7), json.dumps({"type": 5}), json.dumps({"type": ["chat"]}),
    json.dumps({"type": {"a": 1}}), json.dumps({"no": "type"}),
    # issue 41: a lone surrogate reached the tokeniser (server_error)
    '{"type": "chat", "content": "\\ud800"}',
    '{"type": "chat", "messages": [{"role": "user", "content": "a\\udfff"}]}',
]
GATEWAY_BAD = [
    {**CHAT, "params": "x"}, {**CHAT, "params": {"max_tokens": "x"}},
    {**CHAT, "params": {"max_tokens": -1}}, {**CHAT, "params": {"temperature": 1e308}},
    {**CHAT, "params": {"max_tokens": 10**30}}, {**CHAT, "params": {"stop": {"a": 1}}},
    {**CHAT, "content": 5}, {**CHAT, "content": None}, {**CHAT, "content": ["a"]},
    {"type": "chat", "session_id": "s", "messages": "hi"},
    {"type": "chat", "session_id": "s", "messages": [1, 2]},
    {"type": "chat", "session_id": "s", "messages": [{"role": 5, "content": [1]}]},
    {"type": "chat", "session_id": "s", "messages": [{"role": "user", "content": {"a": 1}}]},
    {"type": "chat", "session_id": "s", "messages": json.loads("[" * 40 + "]" * 40)},
    {"type": "chat", "session_id": "s", "messages": []},
    {**CHAT, "session_id": {"a": 1}}, {**CHAT, "session_id": "s" * 129},  # issue 41
]
WEB_BAD = [
    {**WEB_CHAT, "content": 5}, {**WEB_CHAT, "content": ["hi"]}, {**WEB_CHAT, "content": ""},
    {**WEB_CHAT, "tier": ["hot"]}, {**WEB_CHAT, "tier": "platinum"},
    {**WEB_CHAT, "max_tokens": -1}, {**WEB_CHAT, "max_tokens": "x"},
    {**WEB_CHAT, "max_tokens": 1e300}, {**WEB_CHAT, "max_tokens": [1]},
    {**WEB_CHAT, "content": "a\x00b"},  # issue 41: conversations are stored
]
# Frames that need no answer (a cancel of nothing) but must not break the socket.
QUIET = [{"type": "cancel", "session_id": [1]}, {"type": "cancel", "session_id": {"a": 1}},
         {"type": "cancel"}, {"type": "stop"}, {"type": "stop", "extra": [1, {"x": None}]}]


@pytest.fixture
def world(tenant_factory, api_key_factory, user_factory, settings) -> dict[str, Any]:
    from django.test import Client

    from apps.gateway import ratelimit
    from apps.slo.services import contract_create, flush_reports

    settings.LASER_SLO_AUTOFLUSH = False
    settings.LASER_RATELIMIT_REDIS_URL = ""
    settings.LASER_WS_MAX_MESSAGE_BYTES = MAX_MESSAGE
    ratelimit.get_limiter.cache_clear()
    tenant = tenant_factory()
    for tier in ("hot", "warm", "cold"):
        contract_create(tenant=tenant, tier=tier)
    browser = Client()
    browser.force_login(user_factory(tenant=tenant))
    yield {"key": api_key_factory(tenant=tenant, default_tier="hot")[1],
           "cookie": f"sessionid={browser.cookies['sessionid'].value}"}
    flush_reports()  # while the test database exists


@pytest.fixture
def crashes(caplog: Any) -> Any:
    """Records of crashes: uvicorn's "Exception in ASGI application", asyncio's "Task was
    destroyed but it is pending", the consumers' 1011 path. uvicorn's loggers do not propagate,
    so the capture handler is put on them too."""
    uvicorn_logger = logging.getLogger("uvicorn")
    uvicorn_logger.addHandler(caplog.handler)
    caplog.set_level(logging.WARNING)
    yield caplog
    gc.collect()  # a pending task that lost its last reference is reported when collected
    uvicorn_logger.removeHandler(caplog.handler)
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR
           or "destroyed but it is pending" in r.getMessage()]
    assert not bad, "\n".join(f"{r.name}: {r.getMessage()}" for r in bad)


def _open(server: Any, world: dict[str, Any], which: str) -> Any:
    if which == "gateway":
        ws = connect(f"{server.ws_url}/ws/chat/", origin=server.url, open_timeout=10,
                     subprotocols=["laser.v1", f"key.{world['key']}"], max_size=None)
    else:
        ws = connect(f"{server.ws_url}/ws/app/chat/", origin=server.url, open_timeout=10,
                     additional_headers={"Cookie": world["cookie"]}, max_size=None)
    assert json.loads(ws.recv(timeout=10))["type"] == "ready"
    return ws


def _until_pong(ws: Any) -> list[dict]:
    """Send a ping and read to its pong: what the frames before it were answered with."""
    ws.send(json.dumps({"type": "ping"}))
    seen = []
    while True:
        seen.append(json.loads(ws.recv(timeout=60)))
        if seen[-1]["type"] == "pong":
            return seen[:-1]


def _until_answer(ws: Any) -> list[dict]:
    seen = [json.loads(ws.recv(timeout=60))]
    while seen[-1]["type"] not in ("error", "done"):
        seen.append(json.loads(ws.recv(timeout=60)))
    return seen


def _assert_client_errors(messages: list[dict]) -> None:
    for message in messages:
        if message["type"] == "error":
            assert set(message["error"]) == {"message", "type", "param", "code"}, message
            assert message["error"]["type"] == "invalid_request_error", message


def _closed_code(ws: Any) -> int | None:
    """The close code the server sent (None: the connection ended without a close frame)."""
    try:
        while True:
            ws.recv(timeout=30)
    except ConnectionClosed as closed:
        return None if closed.rcvd is None else closed.rcvd.code


@pytest.mark.parametrize("which", ["gateway", "web"])
def test_every_bad_frame_gets_an_error_and_the_socket_stays_open(tiny_engine, server, world,
                                                                  crashes, which):
    typed = GATEWAY_BAD if which == "gateway" else WEB_BAD
    with _open(server, world, which) as ws:
        for frame in [*BAD_FRAMES, *(json.dumps(m) for m in typed)]:
            ws.send(frame)
            answers = _until_answer(ws)  # a turn refused at its start answers asynchronously
            assert answers[-1]["type"] == "error", (frame[:80], answers)
            _assert_client_errors(answers)
            assert _until_pong(ws) == []  # and nothing else
        for frame in QUIET:
            ws.send(json.dumps(frame))
            _assert_client_errors(_until_pong(ws))


@pytest.mark.parametrize("which", ["gateway", "web"])
def test_a_message_over_the_size_limit_closes_with_1009(tiny_engine, server, world, crashes,
                                                        which):
    for frame in ["x" * (MAX_MESSAGE + 1), b"\x00" * (MAX_MESSAGE + 1),
                  json.dumps({"type": "chat", "content": "é" * MAX_MESSAGE})]:  # 2 bytes each
        with _open(server, world, which) as ws:
            ws.send(frame)
            last = json.loads(ws.recv(timeout=30))
            assert (last["type"], last["error"]["code"]) == ("error", "request_too_large")
            assert _closed_code(ws) == 1009


@pytest.mark.parametrize("which", ["gateway", "web"])
def test_a_flood_is_answered_or_closed_with_4008_never_dropped(tiny_engine, server, world,
                                                               crashes, settings, which):
    settings.LASER_WS_SEND_QUEUE = 8
    with _open(server, world, which) as ws:
        for _ in range(3000):  # sent without reading a thing
            ws.send(json.dumps({"type": "ping"}))
        pongs, code = 0, None
        try:
            while pongs < 3000:
                message = json.loads(ws.recv(timeout=30))
                pongs += message["type"] == "pong"
        except ConnectionClosed as closed:
            code = None if closed.rcvd is None else closed.rcvd.code
        assert pongs == 3000 or code == 4008, (pongs, code)


@pytest.mark.parametrize("which", ["gateway", "web"])
def test_a_flood_of_turns_gets_one_answer_each(tiny_engine, server, world, crashes, which):
    chat = CHAT if which == "gateway" else WEB_CHAT  # one session: most find a turn running
    with _open(server, world, which) as ws:
        for _ in range(100):
            ws.send(json.dumps(chat))
        answers = _until_pong(ws)
        while sum(m["type"] in ("done", "error") for m in answers) < 100:
            answers.append(json.loads(ws.recv(timeout=60)))
        kinds = {m["type"] for m in answers}
        assert kinds <= {"delta", "done", "error", "tier_changed", "saved"}, kinds  # saved: web
        _assert_client_errors(answers)
        assert _until_pong(ws) == []  # nothing more came, and the socket still serves


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.choice(["str", "int", "float", "bool", "null", "list", "dict"] if depth < 4
                      else ["str", "int", "null"])
    if kind == "list":
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == "dict":
        return {rng.choice(["role", "content", "x", "type"]): _random_value(rng, depth + 1)
                for _ in range(rng.randint(0, 3))}
    return {"str": lambda: rng.choice(["", "hi", "user", "chat", "\u2028", "\x00"]),
            "int": lambda: rng.choice([0, -1, 1, 2**63, 10**30]),
            "float": lambda: rng.choice([0.5, -1e308, 1e-320]), "bool": lambda: True,
            "null": lambda: None}[kind]()


def _random_message(rng: random.Random, which: str) -> dict:
    keys = (["session_id", "messages", "content", "params"] if which == "gateway"
            else ["content", "tier", "max_tokens"])
    message: dict[str, Any] = {"type": rng.choice(["chat", "cancel", "stop", "reset", "auth",
                                                   "ping", "chat", "chat"])}
    for key in rng.sample(keys, rng.randint(0, len(keys))):
        message[key] = _random_value(rng)
    if message["type"] == "chat" and rng.random() < 0.3:
        message.update(CHAT if which == "gateway" else WEB_CHAT)  # now and then a real turn
    return message


@pytest.mark.parametrize("which", ["gateway", "web"])
def test_random_messages_never_break_the_socket(tiny_engine, server, world, crashes, which):
    rng = random.Random(18)
    with _open(server, world, which) as ws:
        for _ in range(4):
            for _ in range(50):
                ws.send(json.dumps(_random_message(rng, which)))
            _assert_client_errors(_until_pong(ws))
