"""Login throttling (django-axes) on every login page: after LASER_LOGIN_FAILURE_LIMIT failures
for one username from one address, that pair is locked out (429 and a page saying so), even
with the right password; platform staff unlock it in the admin."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db
PASSWORD = "correct horse battery"
LOGINS = {"admin": "/admin/login/", "dashboard": "/dashboard/login/"}


@pytest.fixture
def people(settings, user_factory, tenant_factory):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast
    settings.AXES_FAILURE_LIMIT = 3
    tenant = tenant_factory()
    return {
        "alice": user_factory(username="alice", password=PASSWORD, is_staff=True,
                              tenant=tenant, role="admin"),
        "staff": user_factory(username="root", password=PASSWORD, is_staff=True,
                              is_superuser=True),
    }


def _login(page: str, username: str, password: str, ip: str = "203.0.113.7"):
    return Client(REMOTE_ADDR=ip).post(LOGINS[page], {"username": username,
                                                      "password": password})


@pytest.mark.parametrize("page", list(LOGINS))
def test_lockout_after_failures_then_staff_unlock(people, page):
    for _ in range(2):
        assert _login(page, "alice", "wrong").status_code == 200  # the form, with its error
    locked = _login(page, "alice", "wrong")  # the third failure locks
    assert locked.status_code == 429
    assert "Too many failed logins (3) for" in locked.content.decode()
    # Locked even with the right password, from that address; other addresses still work.
    assert _login(page, "alice", PASSWORD).status_code == 429
    assert _login(page, "alice", PASSWORD, ip="198.51.100.9").status_code == 302

    # A tenant admin cannot see (or clear) the lockouts; platform staff can.
    tenant_admin = Client()
    tenant_admin.force_login(people["alice"])
    assert tenant_admin.get("/admin/axes/accessattempt/").status_code == 403
    staff = Client()
    staff.force_login(people["staff"])
    listing = staff.get("/admin/axes/accessattempt/")
    assert listing.status_code == 200 and "alice" in listing.content.decode()
    from axes.models import AccessAttempt

    attempt = AccessAttempt.objects.get(username="alice", ip_address="203.0.113.7")
    response = staff.post("/admin/axes/accessattempt/", {
        "action": "delete_selected", "post": "yes", "_selected_action": [attempt.pk]})
    assert response.status_code == 302
    assert _login(page, "alice", PASSWORD).status_code == 302  # unlocked


def test_a_success_before_the_limit_resets_the_count(people):
    for _ in range(2):
        _login("admin", "alice", "wrong")
    assert _login("admin", "alice", PASSWORD).status_code == 302
    for _ in range(2):
        assert _login("admin", "alice", "wrong").status_code == 200


# ---- issue 41: addresses from trusted proxies only; a per-user throttle, never a lockout ----


@pytest.fixture
def throttle(people, settings):
    from django.core.cache import cache

    settings.LASER_LOGIN_USER_FAILURE_LIMIT = 4
    settings.LASER_LOGIN_USER_WINDOW_S = 600
    cache.clear()
    yield
    cache.clear()


def test_failures_spread_over_addresses_are_throttled_per_user(throttle):
    assert _login("admin", "alice", PASSWORD, ip="198.51.100.1").status_code == 302  # known
    for n in range(4):  # one failure each from four new addresses: no pair reaches 3
        assert _login("admin", "alice", "wrong", ip=f"203.0.113.{n}").status_code == 200
    held = _login("admin", "alice", PASSWORD, ip="203.0.113.99")  # a new address waits
    assert held.status_code == 429 and 0 < int(held["Retry-After"]) <= 600
    assert "Too many failed logins for this account" in held.content.decode()
    # The user is not locked out: an address it signed in from before is not held.
    assert _login("admin", "alice", PASSWORD, ip="198.51.100.1").status_code == 302
    # Another user is not affected.
    assert _login("admin", "root", PASSWORD, ip="203.0.113.99").status_code == 302


def test_the_throttle_ends_with_its_window(throttle, monkeypatch):
    from apps.tenants import lockout

    now = [1_000_000.0]
    monkeypatch.setattr(lockout, "clock", lambda: now[0])
    for n in range(4):
        _login("admin", "alice", "wrong", ip=f"203.0.113.{n}")
    assert _login("admin", "alice", PASSWORD, ip="203.0.113.99").status_code == 429
    now[0] += 600
    assert _login("admin", "alice", PASSWORD, ip="203.0.113.99").status_code == 302


def test_the_pair_lockout_answers_with_retry_after(people):
    for _ in range(3):
        locked = _login("admin", "alice", "wrong")
    assert locked.status_code == 429 and int(locked["Retry-After"]) == 3600


def test_trusted_proxies_are_validated_at_start_up(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    from laser_platform.settings._env import env, proxy_list

    monkeypatch.setenv("LASER_TRUSTED_PROXIES", "10.0.0.0/8, 192.0.2.7,::1")
    assert env("LASER_TRUSTED_PROXIES", [], proxy_list) == ["10.0.0.0/8", "192.0.2.7", "::1"]
    monkeypatch.setenv("LASER_TRUSTED_PROXIES", "10.0.0.0/8,proxy.example")
    with pytest.raises(ImproperlyConfigured, match="LASER_TRUSTED_PROXIES"):
        env("LASER_TRUSTED_PROXIES", [], proxy_list)


def _live_login(client, username: str, password: str, forwarded: str):
    import re

    page = client.get("/admin/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    return client.post("/admin/login/", data={
        "username": username, "password": password, "csrfmiddlewaretoken": token,
        "next": "/admin/"}, headers={"X-Forwarded-For": forwarded})


@pytest.fixture
def live(people, settings):
    """``live(trusted)``: uvicorn configured as ``manage.py serve`` configures it, with
    ``LASER_TRUSTED_PROXIES = trusted``; returns an httpx client on it."""
    import httpx

    from apps.core.server import uvicorn_config
    from laser_platform.asgi import application
    from tests.apps.gateway.live import LiveServer

    servers, clients = [], []

    def start(trusted: list[str]) -> httpx.Client:
        settings.LASER_TRUSTED_PROXIES = trusted
        server = LiveServer(uvicorn_config(application, host="127.0.0.1", port=0,
                                           log_level="warning", timeout_graceful_shutdown=2))
        servers.append(server)
        clients.append(httpx.Client(base_url=server.start(), timeout=30))
        return clients[-1]

    yield start
    for client in clients:
        client.close()
    for server in servers:
        server.stop()


@pytest.mark.django_db(transaction=True)
def test_x_forwarded_for_is_ignored_unless_the_peer_is_a_trusted_proxy(live, settings):
    # The finding: uvicorn trusted 127.0.0.1 by default, so each failure named a new address
    # and never locked, and a locked user got in by naming another.
    client = live([])
    for n in range(3):
        response = _live_login(client, "alice", "wrong", forwarded=f"9.9.9.{n}")
    assert response.status_code == 429
    assert _live_login(client, "alice", PASSWORD, forwarded="9.9.9.9").status_code == 429
    from axes.models import AccessAttempt

    assert list(AccessAttempt.objects.values_list("ip_address", flat=True)) == ["127.0.0.1"]


@pytest.mark.django_db(transaction=True)
def test_behind_a_trusted_proxy_the_forwarded_address_counts(live):
    client = live(["127.0.0.1"])
    for _ in range(3):
        response = _live_login(client, "alice", "wrong", forwarded="198.51.100.4")
    assert response.status_code == 429
    assert _live_login(client, "alice", PASSWORD, forwarded="198.51.100.5").status_code == 302


def test_the_per_user_count_is_shared_by_processes_on_redis(require_redis, settings):
    """With ``REDIS_URL`` the counter is the default cache's (Redis): failures counted by
    another process hold logins here too. (The pair lockout is axes' database table, which
    every process shares already.)"""
    import os
    import subprocess
    import sys

    from apps.tenants.lockout import count_failure, throttle_wait

    window = 10**9  # one window for the whole test, whichever process reads the clock
    settings.LASER_LOGIN_USER_FAILURE_LIMIT, settings.LASER_LOGIN_USER_WINDOW_S = 4, window
    name = f"shared-{os.getpid()}-{id(settings)}"  # a name no other run counts against
    count_failure(name, None)  # one here, three in the other process
    env = {**os.environ, "LASER_LOGIN_USER_FAILURE_LIMIT": "4",
           "LASER_LOGIN_USER_WINDOW_S": str(window)}
    script = ("import django; django.setup(); from apps.tenants.lockout import count_failure, "
              f"throttle_wait; print(throttle_wait({name!r}, None)); "
              f"[count_failure({name!r}, None) for _ in range(3)]")
    other = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, timeout=120, check=True)
    assert float(other.stdout.split()[-1]) == 0.0  # it saw the one failure: not held yet
    assert throttle_wait(name, None) > 0  # the four together hold the name here
    assert throttle_wait(f"{name}-other", None) == 0.0
