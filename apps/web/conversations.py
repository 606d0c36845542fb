"""Reads and writes of playground conversations, always by (tenant, user): a conversation of
another user or tenant is ``None`` here, never an error that tells it exists."""

from __future__ import annotations

import uuid
from typing import Any

from apps.core.jsonbody import printable
from apps.tenants.models import Tenant
from apps.web.models import Conversation

LIST_LIMIT = 50
KEEP_PER_USER = 500  # past it, a new conversation drops the user's least recently used one
TITLE_CHARS = 60


def _uuid(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def conversations_for(*, tenant: Tenant, user: Any) -> list[Conversation]:
    """The user's most recent conversations in ``tenant`` (newest first)."""
    return list(Conversation.objects.filter(tenant=tenant, user=user)
                .only("id", "title", "updated_at")[:LIST_LIMIT])


def conversation_get(*, tenant: Tenant, user: Any, conversation_id: Any) -> Conversation | None:
    pk = _uuid(conversation_id)
    if pk is None:
        return None
    return Conversation.objects.filter(pk=pk, tenant=tenant, user=user).first()


def title_from(text: str) -> str:
    line = " ".join(printable(text).replace("\\x00", " ").split())  # PostgreSQL refuses NUL
    return line if len(line) <= TITLE_CHARS else line[:TITLE_CHARS - 1] + "…"


def conversation_save_turn(*, tenant: Tenant, user: Any, conversation_id: str, system: str,
                           turn_settings: dict[str, Any], messages: list[dict]) -> Conversation:
    """Store the conversation after a turn: created on its first answer (titled by its first
    message), else updated. Only the owner's row is ever written."""
    pk = _uuid(conversation_id)
    found = conversation_get(tenant=tenant, user=user, conversation_id=pk)
    if found is None:
        if pk is not None and Conversation.objects.filter(pk=pk).exists():
            pk = uuid.uuid4()  # never write into someone else's row
        first = next((m["content"] for m in messages if m.get("role") == "user"), "")
        created = Conversation.objects.create(
            id=pk or uuid.uuid4(), tenant=tenant, user=user, title=title_from(first) or "Chat",
            system=system, settings=turn_settings, messages=messages)
        old = Conversation.objects.filter(tenant=tenant, user=user).values_list(
            "pk", flat=True)[KEEP_PER_USER:]
        Conversation.objects.filter(pk__in=list(old)).delete()
        return created
    found.system, found.settings, found.messages = system, turn_settings, messages
    found.save(update_fields=["system", "settings", "messages", "updated_at"])
    return found


def conversation_rename(*, conversation: Conversation, title: str) -> None:
    conversation.title = title_from(title)[:120] or conversation.title
    conversation.save(update_fields=["title", "updated_at"])


def conversation_delete(*, conversation: Conversation) -> None:
    conversation.delete()
