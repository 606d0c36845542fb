"""The OpenAI-compatible REST routes (``/v1/...``)."""

from __future__ import annotations

from django.urls import path

from apps.gateway import responses_views, views

urlpatterns = [
    path("v1/models", views.ModelListApi.as_view(), name="models"),
    path("v1/models/<path:model_id>", views.ModelDetailApi.as_view(), name="model-detail"),
    path("v1/chat/completions", views.chat_completions, name="chat-completions"),
    path("v1/completions", views.completions, name="completions"),
    path("v1/responses", responses_views.responses, name="responses"),
    path("v1/responses/<str:response_id>", responses_views.retrieve, name="response-detail"),
    path("v1/embeddings", responses_views.embeddings, name="embeddings"),
]
