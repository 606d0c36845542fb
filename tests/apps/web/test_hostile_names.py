"""Names a user chooses, taken safely (issue 41): a download named ``a"b;x=y.jsonl`` keeps its
``Content-Disposition`` intact, a key named with a NUL or a lone surrogate is refused and a
conversation title drops a NUL (PostgreSQL would refuse the NUL with a 500)."""

from __future__ import annotations

import email.message

import pytest

pytestmark = pytest.mark.django_db


def _filename(header: str) -> str | None:
    message = email.message.Message()
    message["Content-Disposition"] = header
    return message.get_filename()


@pytest.mark.parametrize("name, shown", [('a"b;x=y.jsonl', 'a"b;x=y.jsonl'),
                                         ("caf\u00e9 \u2603.jsonl", "caf\u00e9 \u2603.jsonl"),
                                         ("a\\b.jsonl", "a\\b.jsonl"),
                                         ("cr\r\nlf.jsonl", "cr__lf.jsonl")])
def test_a_download_is_named_as_uploaded_in_one_header(world, name, shown):
    from apps.batches.files import file_create

    stored = file_create(tenant=world.a, filename=name, content=b"{}\n", purpose="batch")
    response = world.member.get(f"/files/{stored.uid}/content")
    assert response.status_code == 200
    header = response["Content-Disposition"]
    assert header.startswith("attachment;") and header.count(";") <= 2 + name.count(";")
    assert _filename(header) == shown


@pytest.mark.parametrize("name", ["a\x00b", "\x00"])
def test_a_key_name_with_a_nul_is_refused_by_the_page(world, name):
    from apps.tenants.models import ApiKey

    response = world.admin.post("/keys/create", {"name": name, "default_tier": "warm",
                                                 "expires_days": ""})
    assert response.status_code == 400 and "U+0000" in response.content.decode()
    assert not ApiKey.objects.filter(tenant=world.a).exists()


@pytest.mark.parametrize("name", ["a\x00b", "bad \ud800"])  # a form decodes no surrogate
def test_a_key_name_no_database_can_hold_is_refused_by_the_service(world, name):
    from apps.tenants.services import api_key_create

    with pytest.raises(ValueError, match="key name"):
        api_key_create(tenant=world.a, name=name, default_tier="warm")


def test_a_conversation_renamed_with_a_nul_keeps_text_a_database_holds(world_sync):
    from apps.web.conversations import conversation_save_turn
    from tests.apps.web.conftest import logged_in

    convo = conversation_save_turn(
        tenant=world_sync.alpha, user=world_sync.member, conversation_id="", system="",
        turn_settings={}, messages=[{"role": "user", "content": "a question"}])
    renamed = logged_in(world_sync.member).post(
        f"/chat/{convo.pk.hex}/rename", {"title": "Par\x00is"}, HTTP_ACCEPT="application/json")
    assert renamed.status_code == 200 and renamed.json()["title"] == "Par is"
