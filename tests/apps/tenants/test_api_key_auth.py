"""API keys: hashing at rest and 401s in the OpenAI shape through real requests."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from apps.core.errors import AuthenticationError
from apps.tenants import keys
from apps.tenants.models import ApiKey
from apps.tenants.selectors import api_key_resolve, key_from_headers
from apps.tenants.services import api_key_mark_used, api_key_revoke

pytestmark = pytest.mark.django_db


def _assert_openai_401(response, message_part: str) -> None:
    assert response.status_code == 401, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "authentication_error"
    assert body["error"]["code"] == "invalid_api_key"
    assert message_part.lower() in body["error"]["message"].lower()
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_key_format_and_parse_roundtrip(api_key_factory) -> None:
    api_key, plaintext = api_key_factory(name="ci")
    assert plaintext.startswith(f"lsr_{api_key.prefix}.")
    prefix, secret = keys.parse_key(plaintext)
    assert prefix == api_key.prefix and len(secret) >= 32
    assert api_key.secret_hash == keys.hash_key(prefix, secret)


def test_no_plaintext_secret_anywhere_in_the_key_row(api_key_factory) -> None:
    api_key, plaintext = api_key_factory(name="scan me")
    _, secret = keys.parse_key(plaintext)
    table = ApiKey._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table} WHERE id = %s", [api_key.pk])
        row = cursor.fetchone()
    assert row is not None
    for value in row:
        text = str(value)
        assert secret not in text and plaintext not in text
        assert secret[:16] not in text  # not even a recognisable part of it
    assert secret not in str(api_key) and secret not in repr(api_key)


def test_resolve_accepts_the_issued_key(api_key_factory) -> None:
    api_key, plaintext = api_key_factory()
    assert api_key_resolve(plaintext).pk == api_key.pk


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda raw: None, "didn't provide"),
        (lambda raw: "sk-not-a-laser-key", "malformed"),
        (lambda raw: raw[:-1] + ("A" if raw[-1] != "A" else "B"), "incorrect"),
        (lambda raw: "lsr_zzzzzzzz." + raw.split(".", 1)[1], "incorrect"),
    ],
    ids=["missing", "malformed", "wrong-secret", "unknown-prefix"],
)
def test_resolve_rejects_bad_keys(api_key_factory, mutate, message) -> None:
    _, plaintext = api_key_factory()
    with pytest.raises(AuthenticationError) as excinfo:
        api_key_resolve(mutate(plaintext))
    assert message in excinfo.value.message.lower()
    assert excinfo.value.status == 401


def test_secret_is_checked_before_state(api_key_factory) -> None:
    # Knowing the public prefix of a revoked key must not reveal that it is revoked.
    api_key, plaintext = api_key_factory()
    api_key_revoke(api_key=api_key)
    forged = f"lsr_{api_key.prefix}.{'x' * 43}"
    with pytest.raises(AuthenticationError, match="Incorrect"):
        api_key_resolve(forged)


def test_key_from_headers_bearer_and_x_api_key() -> None:
    assert key_from_headers({"Authorization": "Bearer lsr_abc.def"}) == "lsr_abc.def"
    assert key_from_headers({"authorization": "bearer  k1 "}) == "k1"
    assert key_from_headers({"x-api-key": "k2"}) == "k2"
    assert key_from_headers({"Authorization": "Basic dXNlcjpwdw=="}) is None
    assert key_from_headers({}) is None


class TestThroughRequests:
    url = "/api/keys"

    def test_bearer_and_x_api_key_work(self, api_key_factory) -> None:
        api_key, plaintext = api_key_factory()
        for headers in (
            {"HTTP_AUTHORIZATION": f"Bearer {plaintext}"},
            {"HTTP_X_API_KEY": plaintext},
        ):
            response = APIClient().get(self.url, **headers)
            assert response.status_code == 200, response.content
            assert [k["prefix"] for k in response.json()["data"]] == [api_key.prefix]

    def test_missing_key(self) -> None:
        _assert_openai_401(APIClient().get(self.url), "didn't provide")

    def test_malformed_key(self) -> None:
        response = APIClient().get(self.url, HTTP_AUTHORIZATION="Bearer nope")
        _assert_openai_401(response, "malformed")

    def test_wrong_key(self, api_key_factory) -> None:
        _, plaintext = api_key_factory()
        wrong = (
            plaintext[:-4] + "AAAA" if not plaintext.endswith("AAAA") else plaintext[:-4] + "BB_B"
        )
        response = APIClient().get(self.url, HTTP_AUTHORIZATION=f"Bearer {wrong}")
        _assert_openai_401(response, "incorrect")

    def test_revoked_key(self, api_key_factory) -> None:
        api_key, plaintext = api_key_factory()
        api_key_revoke(api_key=api_key)
        response = APIClient().get(self.url, HTTP_AUTHORIZATION=f"Bearer {plaintext}")
        _assert_openai_401(response, "revoked")

    def test_expired_key(self, api_key_factory) -> None:
        past = timezone.now() - dt.timedelta(seconds=1)
        _, plaintext = api_key_factory(expires_at=past)
        response = APIClient().get(self.url, HTTP_X_API_KEY=plaintext)
        _assert_openai_401(response, "expired")

    def test_inactive_tenant(self, api_key_factory, tenant_factory) -> None:
        tenant = tenant_factory(is_active=False)
        _, plaintext = api_key_factory(tenant=tenant)
        response = APIClient().get(self.url, HTTP_X_API_KEY=plaintext)
        _assert_openai_401(response, "not active")


def test_last_used_is_written_at_most_once_per_interval(api_key_factory, settings) -> None:
    settings.LASER_API_KEY_TOUCH_INTERVAL = 60
    api_key, _ = api_key_factory()
    t0 = timezone.now()
    assert api_key_mark_used(api_key=api_key, now=t0) is True
    assert api_key_mark_used(api_key=api_key, now=t0 + dt.timedelta(seconds=30)) is False
    # A stale in-memory copy (another worker) must not write either: the UPDATE is conditional.
    stale = ApiKey.objects.get(pk=api_key.pk)
    stale.last_used_at = None
    assert api_key_mark_used(api_key=stale, now=t0 + dt.timedelta(seconds=30)) is False
    assert api_key_mark_used(api_key=api_key, now=t0 + dt.timedelta(seconds=61)) is True
    api_key.refresh_from_db()
    assert api_key.last_used_at == t0 + dt.timedelta(seconds=61)
