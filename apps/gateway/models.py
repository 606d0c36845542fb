"""Responses kept for ``previous_response_id`` (``/v1/responses`` with ``store``)."""

from __future__ import annotations

from django.db import models

from apps.tenants.models import Tenant


class StoredResponse(models.Model):
    """One answered ``/v1/responses`` request of a tenant: the conversation it continued
    (chat messages, its own answer last) and the response object it returned. Only its
    tenant reads it."""

    id = models.CharField(primary_key=True, max_length=64)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="responses")
    created_at = models.DateTimeField(auto_now_add=True)
    messages = models.JSONField()
    body = models.JSONField()

    class Meta:
        indexes = [models.Index(fields=["tenant", "id"], name="gw_resp_tenant")]

    def __str__(self) -> str:
        return self.id
