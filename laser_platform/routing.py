"""WebSocket URL patterns, wrapped by ``asgi.py`` in the origin validator. Apps append theirs
here (e.g. the gateway's ``/ws/chat/``)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver

websocket_urlpatterns: list[URLPattern | URLResolver] = []
