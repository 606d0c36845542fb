"""Login throttling for every login page (admin, dashboard), on top of django-axes.

- The address is ``REMOTE_ADDR`` and nothing else (``client_address``, axes'
  ``AXES_CLIENT_IP_CALLABLE``): ``manage.py serve`` lets uvicorn replace it with
  ``X-Forwarded-For`` only on connections from ``LASER_TRUSTED_PROXIES`` (none by default), so a
  client cannot pick the address its failures are counted against.
- axes locks one (username, address) pair after ``LASER_LOGIN_FAILURE_LIMIT`` failures
  (``LASER_LOGIN_LOCKOUT_MINUTES``); other addresses are not affected by it.
- Per user, across addresses: at most ``LASER_LOGIN_USER_FAILURE_LIMIT`` failures per
  ``LASER_LOGIN_USER_WINDOW_S`` from addresses the user never signed in from. Past that, logins
  for that username from such addresses get a 429 with ``Retry-After`` until the window ends,
  without the password being checked; no lockout outlives the window. An address the user
  signed in from before (axes' access log) is never held by this throttle, so an attacker
  spreading guesses over many addresses gains no speed and still cannot lock the user out.

Counters live in the default cache (Redis when ``REDIS_URL`` is set, so shared by every web
process; per process otherwise).
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import Any

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username, get_cool_off, get_failure_limit
from axes.models import AccessLog
from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

THROTTLE_TEMPLATE = "core/login_throttled.html"
clock = time.time  # the throttle's clock (a test moves it)


def client_address(request: HttpRequest) -> str | None:
    """The address failures count against: the connection's (``REMOTE_ADDR``), which uvicorn
    takes from ``X-Forwarded-For`` only for a trusted proxy. Never read from a header here."""
    return request.META.get("REMOTE_ADDR")


def _window(now: float) -> tuple[int, float]:
    """The current window's number and the seconds left in it."""
    size = settings.LASER_LOGIN_USER_WINDOW_S
    number = int(now // size)
    return number, (number + 1) * size - now


def _key(username: str, number: int) -> str:
    digest = hashlib.sha256(username.encode("utf-8", "backslashreplace")).hexdigest()[:32]
    return f"laser:login-failures:{digest}:{number}"


def _known(username: str, address: str | None) -> bool:
    return address is not None and AccessLog.objects.filter(
        username=username, ip_address=address).exists()


def throttle_wait(username: str | None, address: str | None) -> float:
    """Seconds a login for ``username`` from ``address`` must wait (0: it may try)."""
    if not username or _known(username, address):
        return 0.0
    number, left = _window(clock())
    failures = cache.get(_key(username, number), 0)
    return left if failures >= settings.LASER_LOGIN_USER_FAILURE_LIMIT else 0.0


def count_failure(username: str | None, address: str | None) -> None:
    """Count one failed login for ``username`` unless it came from a known address."""
    if not username or _known(username, address):
        return
    number, _ = _window(clock())
    key = _key(username, number)
    cache.add(key, 0, timeout=settings.LASER_LOGIN_USER_WINDOW_S * 2)
    try:
        cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=settings.LASER_LOGIN_USER_WINDOW_S * 2)


class LoginHandler(AxesDatabaseHandler):
    """axes' database handler (the pair lockout) plus the per-user throttle above."""

    def is_allowed(self, request: Any, credentials: dict | None = None) -> bool:
        if not super().is_allowed(request, credentials):
            return False
        wait = throttle_wait(get_client_username(request, credentials), client_address(request))
        if wait > 0:  # AxesMiddleware answers with lockout_response
            request.laser_login_wait, request.axes_locked_out = wait, True
            return False
        return True

    def user_login_failed(self, sender: Any, credentials: dict, request: Any = None,
                          **kwargs: Any) -> None:
        if getattr(request, "laser_login_wait", 0.0):
            return  # held by the throttle, the password unchecked: no failure to count
        super().user_login_failed(sender, credentials, request, **kwargs)
        if request is not None and not getattr(request, "axes_locked_out", False):
            count_failure(get_client_username(request, credentials), client_address(request))


def lockout_response(request: HttpRequest, original_response: Any = None,
                     credentials: dict | None = None) -> HttpResponse:
    """axes' ``AXES_LOCKOUT_CALLABLE``: the throttle's 429 or the pair lockout's, each a page
    saying how long, with ``Retry-After``."""
    wait = getattr(request, "laser_login_wait", 0.0)
    if wait:
        seconds = max(1, math.ceil(wait))
        response = render(request, THROTTLE_TEMPLATE, {"seconds": seconds}, status=429)
    else:
        credentials = getattr(request, "axes_credentials", None) or credentials
        cool_off = get_cool_off(request)
        seconds = max(1, math.ceil(cool_off.total_seconds())) if cool_off else 0
        response = render(request, settings.AXES_LOCKOUT_TEMPLATE, {
            "failure_limit": get_failure_limit(request, credentials),
            "username": get_client_username(request, credentials) or "",
            "cooloff_timedelta": cool_off}, status=429)
    if seconds:
        response["Retry-After"] = str(seconds)
    return response
