"""The gateway's WebSocket route (``/ws/chat/``)."""

from __future__ import annotations

from django.urls import path

from apps.gateway.consumers import ChatConsumer

websocket_urlpatterns = [path("ws/chat/", ChatConsumer.as_asgi())]
