"""The tenant and API-key routes."""

from __future__ import annotations

from django.urls import path

from apps.tenants.api import ApiKeyListApi

urlpatterns = [
    path("api/keys", ApiKeyListApi.as_view(), name="api-keys"),
]
