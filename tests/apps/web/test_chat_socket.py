"""The browser chat socket through the project's ASGI app (origin check, session cookie) against a
scripted engine: who may connect, contracted tiers only, turns with history, stop, new
conversation, demotion, and a record booked to the tenant and user without a key."""

from __future__ import annotations

import pytest
from channels.testing import WebsocketCommunicator

from apps.gateway import engine_client
from tests.apps.gateway.fakes import FakeEngine

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

ORIGIN = (b"origin", b"http://127.0.0.1:8000")


def _socket(cookie: bytes | None = None, origin=ORIGIN) -> WebsocketCommunicator:
    from laser_platform.asgi import application

    headers = [(b"host", b"127.0.0.1:8000"), origin] + ([(b"cookie", cookie)] if cookie else [])
    return WebsocketCommunicator(application, "/ws/app/chat/", headers=headers)


async def _until(ws: WebsocketCommunicator, *kinds: str) -> list[dict]:
    seen = []
    while True:
        seen.append(await ws.receive_json_from(timeout=5))
        if seen[-1]["type"] in (*kinds, "error"):
            return seen


async def test_no_session_or_foreign_origin_is_refused(world_sync):
    connected, code = await _socket().connect()
    assert (connected, code) == (False, 4401)
    foreign = _socket(world_sync.member_cookie, origin=(b"origin", b"https://evil.example"))
    connected, _ = await foreign.connect()
    assert not connected


async def test_staff_without_a_chosen_tenant_is_refused(world_sync):
    connected, code = await _socket(world_sync.staff_cookie).connect()
    assert (connected, code) == (False, 4403)


async def test_a_member_chats_with_history_on_its_tenants_tiers(world_sync, fake):
    ws = _socket(world_sync.member_cookie)
    assert (await ws.connect())[0]
    ready = await ws.receive_json_from()
    assert ready == {"type": "ready", "tenant": "alpha", "tiers": ["hot", "warm", "cold"],
                     "default_tier": "hot"}
    await ws.send_json_to({"type": "chat", "content": "hi", "max_tokens": 5})
    first = await _until(ws, "done")
    assert "".join(m["text"] for m in first if m["type"] == "delta") == "Hello world!"
    assert first[-1]["tier"] == "hot" and first[-1]["ttft_s"] >= 0
    await ws.send_json_to({"type": "chat", "content": "again", "tier": "warm"})
    assert (await _until(ws, "done"))[-1]["tier"] == "warm"
    assert [m["content"] for m in fake.requests[1].messages] == ["hi", "Hello world!", "again"]
    assert str(fake.requests[1].tier) == "warm"
    await ws.send_json_to({"type": "reset"})
    assert (await ws.receive_json_from())["type"] == "reset"
    await ws.send_json_to({"type": "chat", "content": "fresh"})
    await _until(ws, "done")
    assert [m["content"] for m in fake.requests[2].messages] == ["fresh"]
    await ws.disconnect()


async def test_turns_are_booked_to_the_tenant_and_user_without_a_key(world_sync, fake):
    from asgiref.sync import sync_to_async

    from apps.slo.models import RequestRecord
    from apps.slo.services import flush_reports

    ws = _socket(world_sync.member_cookie)
    await ws.connect()
    await ws.receive_json_from()
    await ws.send_json_to({"type": "chat", "content": "hi"})
    await _until(ws, "done")
    await ws.disconnect()
    await sync_to_async(flush_reports)()
    records = await sync_to_async(list)(RequestRecord.objects.values(
        "tenant__slug", "api_key_id", "user_id", "tier_asked", "outcome"))
    assert records == [{"tenant__slug": "alpha", "api_key_id": None,
                        "user_id": world_sync.member.pk, "tier_asked": "hot", "outcome": "ok"}]


async def test_an_uncontracted_tier_and_bad_input_are_clear_errors(world_sync, fake):
    ws = _socket(world_sync.warm_only_cookie)
    await ws.connect()
    ready = await ws.receive_json_from()
    assert (ready["tiers"], ready["default_tier"]) == (["warm"], "warm")
    await ws.send_json_to({"type": "chat", "content": "hi", "tier": "hot"})
    error = await ws.receive_json_from()
    assert error["error"]["code"] == "tier_not_contracted" and error["error"]["param"] == "tier"
    await ws.send_json_to({"type": "chat", "content": "hi", "max_tokens": 0})
    assert (await ws.receive_json_from())["error"]["param"] == "max_tokens"
    await ws.send_json_to({"type": "chat", "content": "  "})
    assert (await ws.receive_json_from())["error"]["param"] == "content"
    await ws.send_to(text_data="not json")
    assert (await ws.receive_json_from())["error"]["code"] == "invalid_json"
    assert fake.requests == []
    await ws.disconnect()


async def test_stop_ends_the_answer_and_a_demotion_is_announced(world_sync):
    slow = FakeEngine(words=("a",) * 50, delay=0.02)
    old = engine_client.set_engine_client(slow)
    try:
        ws = _socket(world_sync.member_cookie)
        await ws.connect()
        await ws.receive_json_from()
        await ws.send_json_to({"type": "chat", "content": "long"})
        assert (await ws.receive_json_from())["type"] == "delta"
        await ws.send_json_to({"type": "stop"})
        assert (await _until(ws, "stopped"))[-1]["type"] == "stopped"
        engine_client.set_engine_client(FakeEngine(demote_at=1))
        await ws.send_json_to({"type": "chat", "content": "again"})
        messages = await _until(ws, "done")
        change = next(m for m in messages if m["type"] == "tier_changed")
        assert (change["from"], change["to"]) == ("hot", "warm")
        assert messages[-1]["tier"] == "warm"
        await ws.disconnect()
    finally:
        engine_client.set_engine_client(old)


async def test_a_member_removed_mid_conversation_is_signed_out(world_sync, fake):
    from asgiref.sync import sync_to_async

    from apps.tenants.models import Membership

    ws = _socket(world_sync.member_cookie)
    await ws.connect()
    await ws.receive_json_from()
    await sync_to_async(Membership.objects.filter(tenant__slug="alpha").delete)()
    await ws.send_json_to({"type": "chat", "content": "hi"})
    error = await ws.receive_json_from()
    assert error["type"] == "error" and error["error"]["code"] == "invalid_session"
    assert (await ws.receive_output(timeout=5)) == {"type": "websocket.close", "code": 4401}
    assert fake.requests == []


async def test_staff_who_chose_a_tenant_do_not_chat_as_its_users(world_sync):
    connected, code = await _socket(world_sync.staff_in_alpha_cookie).connect()
    assert (connected, code) == (False, 4403)


async def test_past_the_open_socket_cap_a_socket_is_refused(world_sync, plan_for):
    from asgiref.sync import sync_to_async

    await sync_to_async(plan_for)(world_sync.alpha, max_sockets_per_key=1)
    first = _socket(world_sync.member_cookie)
    await first.connect()
    assert (await first.receive_json_from())["type"] == "ready"
    second = _socket(world_sync.member_cookie)
    await second.connect()
    refused = await second.receive_json_from()
    assert refused["error"]["code"] == "rate_limit_exceeded"
    assert (await second.receive_output(timeout=5))["code"] == 4429
    await first.disconnect()
    third = _socket(world_sync.member_cookie)
    await third.connect()
    assert (await third.receive_json_from())["type"] == "ready"  # the slot was given back
    await third.disconnect()
