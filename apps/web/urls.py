"""The browser pages' routes."""

from __future__ import annotations

from django.urls import path

from apps.web import (
    batch_views,
    conversation_views,
    key_views,
    onboarding,
    password_views,
    usage_views,
    views,
)

urlpatterns = [
    path("", onboarding.home, name="web-home"),
    path("start/", onboarding.start, name="web-start"),
    path("docs/", onboarding.docs_index, name="web-docs"),
    path("docs/<str:name>.md", onboarding.guide, name="web-guide"),
    path("docs/img/<str:name>", onboarding.guide_image, name="web-guide-image"),
    path("favicon.ico", onboarding.favicon, name="web-favicon"),
    path("login/", views.LoginView.as_view(), name="web-login"),
    path("logout/", views.LogoutView.as_view(), name="web-logout"),
    # Before apps.slo's own route: the dashboard signs in on the same page.
    path("dashboard/login/", views.DashboardLoginView.as_view(), name="web-dashboard-login"),
    path("tenants/", views.tenants, name="web-tenants"),
    path("chat/", views.chat, name="web-chat"),
    path("chat/<str:conversation_id>/rename", conversation_views.rename,
         name="web-conversation-rename"),
    path("chat/<str:conversation_id>/delete", conversation_views.delete,
         name="web-conversation-delete"),
    path("usage/", usage_views.usage, name="web-usage"),
    path("usage.csv", usage_views.usage_csv, name="web-usage-csv"),
    path("keys/", key_views.keys, name="web-keys"),
    path("keys/create", key_views.key_create, name="web-key-create"),
    path("keys/<int:key_id>/revoke", key_views.key_revoke, name="web-key-revoke"),
    path("batches/", batch_views.batches, name="web-batches"),
    path("batches/progress.json", batch_views.batches_progress, name="web-batches-progress"),
    path("batches/start", batch_views.batch_start, name="web-batch-start"),
    path("batches/<str:batch_id>/cancel", batch_views.batch_cancel_view, name="web-batch-cancel"),
    path("files/<str:file_id>/content", batch_views.file_download, name="web-file-content"),
    *password_views.urlpatterns,
]
