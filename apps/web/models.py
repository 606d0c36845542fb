"""Playground conversations, kept per user and tenant on the server (a reload keeps them; no
other user, even of the same tenant, sees them)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from apps.tenants.models import Tenant


class Conversation(models.Model):
    """One chat of a user in a tenant: its system prompt, sampling settings and messages.

    ``messages`` is ``[{"role", "content"}...]``; an assistant message also keeps ``meta`` (the
    socket's ``done`` message: tier served, TTFT, TBT, usage), so its SLO line survives a
    reload. ``settings`` holds the last turn's tier, temperature, top_p and max_tokens."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="+")
    title = models.CharField(max_length=120)
    system = models.TextField(blank=True)
    settings = models.JSONField(default=dict)
    messages = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["tenant", "user", "-updated_at"],
                                name="web_conversation_recent")]
