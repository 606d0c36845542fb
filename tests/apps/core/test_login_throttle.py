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
