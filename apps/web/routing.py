"""The web app's WebSocket route; the session cookie authenticates it (``AuthMiddlewareStack``)."""

from __future__ import annotations

from channels.auth import AuthMiddlewareStack
from django.urls import path

from apps.web.consumers import WebChatConsumer

websocket_urlpatterns = [path("ws/app/chat/", AuthMiddlewareStack(WebChatConsumer.as_asgi()))]
