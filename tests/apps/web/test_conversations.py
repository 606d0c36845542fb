"""The playground's settings and stored conversations over the browser socket (scripted
engine): the system prompt and sampling reach the engine, bad values are refused by name, a
conversation is stored per user and reopened by its owner only; rename and delete pages."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from tests.apps.web.conftest import logged_in, session_cookie
from tests.apps.web.test_chat_socket import _socket, _until

pytestmark = pytest.mark.django_db(transaction=True)


async def _ready(cookie: bytes):
    ws = _socket(cookie)
    assert (await ws.connect())[0]
    assert (await ws.receive_json_from())["type"] == "ready"
    return ws


@pytest.mark.asyncio
async def test_system_prompt_sampling_and_json_mode_reach_the_engine(world_sync, fake):
    ws = await _ready(world_sync.member_cookie)
    await ws.send_json_to({"type": "chat", "content": "hi", "system": "Answer in French.",
                           "temperature": 0, "top_p": 0.5, "max_tokens": 7})
    seen = await _until(ws, "done")
    assert [m["type"] for m in seen][-2:] == ["saved", "done"]
    sent = fake.requests[0]
    assert sent.messages == [{"role": "system", "content": "Answer in French."},
                             {"role": "user", "content": "hi"}]
    assert (sent.sampling.temperature, sent.sampling.top_p, sent.sampling.max_tokens) == (
        0, 0.5, 7)
    assert sent.constraint is None
    await ws.send_json_to({"type": "chat", "content": "as JSON", "json_mode": True})
    await _until(ws, "done")
    assert fake.requests[1].constraint.kind == "json_object"
    await ws.disconnect()


@pytest.mark.asyncio
@pytest.mark.parametrize("bad", [{"max_tokens": 0}, {"max_tokens": 2.5}, {"temperature": 3},
                                 {"temperature": "hot"}, {"top_p": 0}, {"top_p": 1.5},
                                 {"system": "x" * 8001}, {"system": 5}, {"json_mode": "yes"}])
async def test_bad_settings_are_refused_naming_the_field(world_sync, fake, bad):
    ws = await _ready(world_sync.member_cookie)
    await ws.send_json_to({"type": "chat", "content": "hi", **bad})
    error = await ws.receive_json_from()
    assert error["type"] == "error" and error["error"]["param"] == next(iter(bad))
    assert not fake.requests
    await ws.disconnect()


@pytest.mark.asyncio
async def test_a_conversation_is_stored_and_reopened_by_its_owner_only(
        world_sync, fake, user_factory, tenant_factory):
    ws = await _ready(world_sync.member_cookie)
    await ws.send_json_to({"type": "chat", "content": "first question", "system": "Be brief.",
                           "tier": "warm", "temperature": 0.3})
    saved = next(m for m in await _until(ws, "done") if m["type"] == "saved")["conversation"]
    assert saved["title"] == "first question"
    await ws.disconnect()

    again = await _ready(world_sync.member_cookie)  # a reload: a new socket
    await again.send_json_to({"type": "open", "conversation": saved["id"]})
    opened = (await again.receive_json_from())["conversation"]
    assert opened["system"] == "Be brief." and opened["settings"]["temperature"] == 0.3
    assert [m["role"] for m in opened["messages"]] == ["user", "assistant"]
    meta = opened["messages"][1]["meta"]
    assert meta["tier"] == "warm" and meta["tier_asked"] == "warm" and "ttft_s" in meta
    await again.send_json_to({"type": "chat", "content": "second", "system": "Be brief."})
    await _until(again, "done")
    assert [m["content"] for m in fake.requests[1].messages] == [
        "Be brief.", "first question", "Hello world!", "second"]
    await again.disconnect()

    alpha = world_sync.alpha
    other_user = await sync_to_async(user_factory)(tenant=alpha)
    other_tenant = await sync_to_async(tenant_factory)()
    from apps.slo.services import contract_create

    await sync_to_async(contract_create)(tenant=other_tenant, tier="hot")
    stranger = await sync_to_async(user_factory)(tenant=other_tenant)
    for user in (other_user, stranger):
        ws = await _ready(await sync_to_async(session_cookie)(user))
        await ws.send_json_to({"type": "open", "conversation": saved["id"]})
        error = await ws.receive_json_from()
        assert error["error"]["code"] == "conversation_not_found"
        await ws.send_json_to({"type": "chat", "content": "x"})  # a fresh one, not theirs
        await _until(ws, "done")
        await ws.disconnect()
    from apps.web.models import Conversation

    mine = await sync_to_async(Conversation.objects.get)(pk=saved["id"])
    assert len(mine.messages) == 4  # nobody else wrote into it
    assert await sync_to_async(Conversation.objects.count)() == 3


def test_rename_delete_and_the_list_are_the_owners_only(world_sync, user_factory):
    from apps.web.conversations import conversation_save_turn

    owner = logged_in(world_sync.member)
    convo = conversation_save_turn(
        tenant=world_sync.alpha, user=world_sync.member, conversation_id="", system="",
        turn_settings={}, messages=[{"role": "user", "content": "a question"}])
    assert "a question" in owner.get("/chat/").content.decode()
    neighbour = logged_in(user_factory(tenant=world_sync.alpha))
    assert "a question" not in neighbour.get("/chat/").content.decode()
    for action in ("rename", "delete"):
        assert neighbour.post(f"/chat/{convo.pk.hex}/{action}", {"title": "x"}).status_code == 404
        assert owner.post(f"/chat/not-an-id/{action}").status_code == 404
    renamed = owner.post(f"/chat/{convo.pk.hex}/rename", {"title": "  Paris  "},
                         HTTP_ACCEPT="application/json")
    assert renamed.json() == {"id": convo.pk.hex, "title": "Paris"}
    assert owner.post(f"/chat/{convo.pk.hex}/delete")["Location"] == "/chat/"
    assert "Paris" not in owner.get("/chat/").content.decode()


def test_a_user_keeps_a_bounded_number_of_conversations(world_sync, monkeypatch):
    from apps.web import conversations

    monkeypatch.setattr(conversations, "KEEP_PER_USER", 3)
    made = [conversations.conversation_save_turn(
        tenant=world_sync.alpha, user=world_sync.member, conversation_id="", system="",
        turn_settings={}, messages=[{"role": "user", "content": f"q{i}"}]) for i in range(5)]
    kept = conversations.conversations_for(tenant=world_sync.alpha, user=world_sync.member)
    assert [c.title for c in kept] == ["q4", "q3", "q2"]
    assert made[4].pk == kept[0].pk
