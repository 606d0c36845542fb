"""WebSocket URL patterns, wrapped by ``asgi.py`` in the origin validator. Apps append theirs
here (e.g. the gateway's ``/ws/chat/``)."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver

from apps.gateway.routing import websocket_urlpatterns as gateway_websockets
from apps.web.routing import websocket_urlpatterns as web_websockets

websocket_urlpatterns: list[URLPattern | URLResolver] = [*gateway_websockets, *web_websockets]
