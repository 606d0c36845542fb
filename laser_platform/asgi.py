"""ASGI entry point: HTTP goes to Django (static files included) behind the body-size guard and
the uploads' key and session checks, WebSocket to Channels."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "laser_platform.settings")

import django  # noqa: E402

# Django must be set up before anything imports models (the routing modules do).
django.setup(set_prefix=False)

from apps.core.handler import ASGIHandler  # noqa: E402

# get_asgi_application(), with the header-only middlewares' hooks inline (apps.core.handler)
django_asgi_app = ASGIHandler()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from apps.core.body_limit import BodyLimit  # noqa: E402
from apps.tenants.upload_auth import UploadAuth  # noqa: E402
from laser_platform.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Static files (admin CSS/JS) are served by the app itself so one process is enough in
        # embedded mode; behind a proxy, serve `collectstatic` output from the proxy instead.
        # BodyLimit answers 413 past the route's body limit before Django reads the body.
        # UploadAuth answers a file upload without a valid key with 401, and the web app's
        # upload without a signed-in session with the login redirect, also unread.
        "http": BodyLimit(UploadAuth(ASGIStaticFilesHandler(django_asgi_app))),
        "websocket": AllowedHostsOriginValidator(URLRouter(websocket_urlpatterns)),
    }
)
