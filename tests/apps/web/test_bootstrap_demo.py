"""bootstrap_demo: idempotent demo tenant, admin and key; the saved key file is private."""

from __future__ import annotations

import io
import stat

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from apps.tenants.models import ApiKey, Tenant
from apps.tenants.selectors import api_key_resolve
from apps.tenants.services import api_key_revoke

pytestmark = pytest.mark.django_db


def _bootstrap() -> str:
    out = io.StringIO()
    call_command("bootstrap_demo", stdout=out)
    return out.getvalue()


def _printed_key(output: str) -> str:
    return next(word for word in output.split() if word.startswith("lsr_"))


def test_bootstrap_is_idempotent_and_prints_a_working_key(settings, tmp_path, monkeypatch):
    settings.VAR_DIR = tmp_path
    monkeypatch.setenv("LASER_ADMIN_PASSWORD", "a-long-demo-password")
    first = _bootstrap()
    key = _printed_key(first)
    assert api_key_resolve(key, touch=False).tenant.slug == "demo"
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.check_password("a-long-demo-password")

    saved = tmp_path / "demo_api_key"
    assert saved.read_text().strip() == key
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600

    second = _bootstrap()
    assert _printed_key(second) == key  # same key again, nothing new created
    assert Tenant.objects.filter(slug="demo").count() == 1
    assert ApiKey.objects.count() == 1 and get_user_model().objects.count() == 1


def test_a_revoked_saved_key_is_replaced(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    old = _printed_key(_bootstrap())
    api_key_revoke(api_key=api_key_resolve(old, touch=False))
    new = _printed_key(_bootstrap())
    assert new != old and api_key_resolve(new, touch=False).tenant.slug == "demo"


def test_random_admin_password_is_printed_once(settings, tmp_path, monkeypatch):
    settings.VAR_DIR = tmp_path
    monkeypatch.delenv("LASER_ADMIN_PASSWORD", raising=False)
    first = _bootstrap()
    password = first.split("with password: ")[1].split()[0]
    assert get_user_model().objects.get(username="admin").check_password(password)
    assert "password" not in _bootstrap()
