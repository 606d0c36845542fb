"""The ASGI handler ``laser_platform.asgi`` serves: Django's, with the header-only stock
middlewares' hooks on the event loop (``apps.core.middleware.InlineHooks``).

``settings.MIDDLEWARE`` keeps Django's own names, so ``check --deploy`` still finds
SecurityMiddleware and XFrameOptionsMiddleware (and runs the HSTS and SSL checks that depend on
the former); the handler swaps in the inline subclasses while it builds its chain, once, at
start.
"""

from __future__ import annotations

from django.conf import settings
from django.core.handlers import asgi

from apps.core.middleware import INLINE


class ASGIHandler(asgi.ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        listed = settings.MIDDLEWARE
        settings.MIDDLEWARE = [INLINE.get(path, path) for path in listed]
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = listed
