"""The newcomer's pages: the front page for a visitor, getting started with the user's key
prefix, the guides of ``docs/`` rendered, the favicon, and password reset by e-mail."""

from __future__ import annotations

import re
import secrets

import pytest
from django.core import mail
from django.test import Client

pytestmark = pytest.mark.django_db


def test_a_visitor_sees_the_front_page_and_a_member_goes_to_the_chat(world, client):
    page = client.get("/")
    assert page.status_code == 200
    text = page.content.decode()
    assert 'href="/login/"' in text and 'href="/docs/"' in text and "hot" in text
    assert world.member.get("/")["Location"] == "/chat/"
    assert world.staff.get("/")["Location"] == "/tenants/"


def test_getting_started_shows_the_base_url_models_and_the_users_key_prefix(
        world, api_key_factory, user_factory):
    from django.contrib.auth import get_user_model

    assert world.member.get("/start/").status_code == 200
    assert 'id="no-key"' in world.member.get("/start/").content.decode()
    admin = get_user_model().objects.get(membership__tenant=world.a, membership__role="admin")
    key, _ = api_key_factory(tenant=world.a, name="ci", created_by=admin)
    other, _ = api_key_factory(tenant=world.b, name="theirs")
    page = world.admin.get("/start/").content.decode()
    assert "http://testserver/v1" in page and "smollm2-135m-instruct" in page
    assert f"lsr_{key.prefix}" in page and f"lsr_{other.prefix}" not in page
    assert 'href="/docs/api.md"' in page
    assert Client().get("/start/")["Location"].startswith("/login/")


def test_the_guides_are_served_rendered_and_only_from_docs(client):
    index = client.get("/docs/")
    assert index.status_code == 200 and 'href="/docs/batches.md"' in index.content.decode()
    guide = client.get("/docs/batches.md")
    body = guide.content.decode()
    assert guide.status_code == 200 and "<h1>" in body and "<table>" in body
    assert 'href="api.md"' in body  # relative links between guides keep working
    for bad in ("/docs/..%2Fsettings.md", "/docs/nope.md", "/docs/img/..%2Fapi.md",
                "/docs/img/none.png"):
        assert client.get(bad).status_code == 404, bad
    assert client.get("/docs/img/dashboard.png")["Content-Type"] == "image/png"


def test_raw_html_in_a_guide_is_escaped(tmp_path, settings, client):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "evil.md").write_text("# Evil\n\n<script>alert(1)</script>\n"
                                               "[x](javascript:alert(1))\n")
    settings.BASE_DIR = tmp_path
    body = client.get("/docs/evil.md").content.decode()
    assert "<script>alert" not in body and "&lt;script&gt;" in body
    assert 'href="javascript:' not in body


def test_the_favicon_is_served(client):
    icon = client.get("/favicon.ico")
    assert icon.status_code == 200 and icon["Content-Type"] == "image/svg+xml"
    assert b"<svg" in icon.content


def test_password_reset_by_email_sets_a_new_password(user_factory, client):
    run = secrets.token_hex(4)  # the reset throttle's counters outlive a run in Redis
    email = f"ada-{run}@example.com"
    user_factory(username="ada", email=email, password="old-horse-battery")
    assert client.get("/password-reset/").status_code == 200
    sent = client.post("/password-reset/", {"email": email}, REMOTE_ADDR=run)
    assert sent["Location"] == "/password-reset/sent/"
    assert client.post("/password-reset/", {"email": f"nobody-{run}@example.com"},
                       REMOTE_ADDR=run).status_code == 302
    assert len(mail.outbox) == 1 and mail.outbox[0].to == [email]
    link = re.search(r"http://testserver(/password-reset/\S+/)", mail.outbox[0].body).group(1)
    form = client.get(link, follow=True)
    assert form.status_code == 200 and 'id="id_new_password1"' in form.content.decode()
    done = client.post(form.redirect_chain[-1][0], {"new_password1": "new-horse-battery-9",
                                                    "new_password2": "new-horse-battery-9"})
    assert done["Location"] == "/password-reset/done/"
    from django.contrib.auth import get_user_model

    assert get_user_model().objects.get(username="ada").check_password("new-horse-battery-9")
    used = client.get(link, follow=True).content.decode()
    assert 'id="reset-invalid"' in used


def test_password_reset_mail_is_throttled_per_address_and_per_email(user_factory, client):
    from apps.web.password_views import RESETS_PER_HOUR

    run = secrets.token_hex(4)  # fresh counters, whatever the cache holds from other runs
    email = f"bea-{run}@example.com"
    user_factory(username="bea", email=email, password="bea-horse-battery")
    for i in range(RESETS_PER_HOUR + 2):
        sent = client.post("/password-reset/", {"email": email}, REMOTE_ADDR=f"{run}:{i}")
        assert sent["Location"] == "/password-reset/sent/"  # never says whether it sent
    assert len(mail.outbox) == RESETS_PER_HOUR
    for i in range(RESETS_PER_HOUR):
        client.post("/password-reset/", {"email": f"x{i}-{run}@example.com"},
                    REMOTE_ADDR=f"{run}:x")
    refused = client.post("/password-reset/", {"email": email}, REMOTE_ADDR=f"{run}:x")
    assert refused.status_code == 429 and refused["Retry-After"] == "3600"
    assert 'id="reset-throttled"' in refused.content.decode()
