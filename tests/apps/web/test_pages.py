"""The web app's pages with Django's test client: where the pages lead, the one login, the tenant
picker, key rights by role, and tenant isolation (another tenant's ids answer 404)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from apps.tenants.models import ApiKey

pytestmark = pytest.mark.django_db

PAGES = ("/chat/", "/keys/", "/batches/", "/batches/progress.json")


def _line(i: int) -> str:
    return json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                       "body": {"model": "smollm2-135m-instruct", "max_tokens": 4,
                                "messages": [{"role": "user", "content": f"hi {i}"}]}})


def _upload(client: Client, lines: int = 3, window: str = "24h"):
    from django.core.files.uploadedfile import SimpleUploadedFile

    content = "\n".join(_line(i) for i in range(lines)).encode()
    return client.post("/batches/start", {
        "file": SimpleUploadedFile("in.jsonl", content), "endpoint": "/v1/chat/completions",
        "completion_window": window})


def test_pages_send_a_visitor_to_the_login_and_root_a_member_to_the_chat(world, client):
    for page in PAGES:
        assert client.get(page)["Location"].startswith("/login/?next=")
    assert world.member.get("/")["Location"] == "/chat/"
    page = world.member.get("/chat/").content.decode()
    assert "Alpha" in page and 'id="chat-tier"' in page and "lsr_" not in page


def test_one_login_page_signs_in_through_authenticate(world, user_factory, client):
    user_factory(username="ada", tenant=world.a, password="pw-correct-horse")
    assert 'id="id_username"' in client.get("/login/").content.decode()
    assert 'id="id_username"' in client.get("/dashboard/login/").content.decode()
    wrong = client.post("/login/", {"username": "ada", "password": "nope"})
    assert wrong.status_code == 200 and 'role="alert"' in wrong.content.decode()
    ok = client.post("/login/", {"username": "ada", "password": "pw-correct-horse"})
    assert ok.status_code == 302 and ok["Location"] == "/"
    assert client.get("/chat/").status_code == 200
    to_dashboard = Client().post("/dashboard/login/", {"username": "ada",
                                                       "password": "pw-correct-horse"})
    assert to_dashboard["Location"] == "/dashboard/"


def test_staff_pick_a_tenant_first(world):
    assert world.staff.get("/")["Location"] == "/tenants/"
    assert world.staff.get("/chat/")["Location"] == "/tenants/"
    picker = world.staff.get("/tenants/").content.decode()
    assert "Alpha" in picker and "Beta" in picker
    assert world.staff.post("/tenants/", {"tenant": "nope"}).status_code == 400
    assert world.staff.post("/tenants/", {"tenant": "beta"})["Location"] == "/chat/"
    assert "Beta" in world.staff.get("/keys/").content.decode()
    chat = world.staff.get("/chat/").content.decode()  # staff do not chat as a tenant's user
    assert 'id="not-a-member"' in chat and "chat.js" not in chat
    assert 'id="not-a-member"' in world.staff.get("/batches/").content.decode()
    assert _upload(world.staff).status_code == 403  # a batch runs as a member of the tenant


def test_a_member_cannot_pick_another_tenant(world):
    assert world.member.post("/tenants/", {"tenant": "beta"}).status_code == 400
    assert "Alpha" in world.member.get("/keys/").content.decode()


def test_chat_offers_only_contracted_tiers(world, tenant_factory, user_factory):
    from apps.slo.services import contract_create

    warm_only = tenant_factory(slug="warm-only")
    contract_create(tenant=warm_only, tier="warm")
    page = Client()
    page.force_login(user_factory(tenant=warm_only))
    html = page.get("/chat/").content.decode()
    assert '<option value="warm" selected>' in html and 'value="hot"' not in html
    assert '<option value="hot" selected>' in world.member.get("/chat/").content.decode()


def test_admin_creates_a_key_shown_once_and_revokes_it(world):
    created = world.admin.post("/keys/create", {"name": "ci", "default_tier": "warm",
                                                "expires_days": "30"})
    assert created.status_code == 201 and "no-store" in created["Cache-Control"]
    html = created.content.decode()
    key = ApiKey.objects.get(tenant=world.a, name="ci")
    assert key.default_tier == "warm" and key.expires_at is not None
    secret = html.split('id="new-secret" readonly value="')[1].split('"')[0]
    assert secret.startswith(f"lsr_{key.prefix}.")
    assert "client.chat.completions.create" in html and "Authorization: Bearer lsr_" in html
    assert secret not in world.admin.get("/keys/").content.decode()  # shown once
    assert world.admin.post(f"/keys/{key.pk}/revoke")["Location"] == "/keys/"
    key.refresh_from_db()
    assert key.status == "revoked"


def test_bad_key_form_is_a_400_naming_the_field(world):
    response = world.admin.post("/keys/create", {"name": "x", "default_tier": "platinum",
                                                 "expires_days": "-3"})
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="key-tier-error"' in html and 'id="key-expiry-error"' in html
    assert not ApiKey.objects.filter(tenant=world.a).exists()


def test_a_member_without_the_admin_role_only_reads_keys(world, api_key_factory):
    key, _ = api_key_factory(tenant=world.a, name="shared")
    html = world.member.get("/keys/").content.decode()
    assert "shared" in html and 'id="read-only"' in html and "Create key" not in html
    assert world.member.post("/keys/create", {"name": "x", "default_tier": "hot"}
                             ).status_code == 403
    assert world.member.post(f"/keys/{key.pk}/revoke").status_code == 403
    assert not ApiKey.objects.filter(name="x").exists()
    key.refresh_from_db()
    assert key.revoked_at is None


def test_another_tenants_key_is_a_404(world, api_key_factory):
    theirs, _ = api_key_factory(tenant=world.b, name="theirs")
    assert "theirs" not in world.admin.get("/keys/").content.decode()
    assert world.admin.post(f"/keys/{theirs.pk}/revoke").status_code == 404
    theirs.refresh_from_db()
    assert theirs.revoked_at is None


def test_upload_starts_a_batch_listed_with_progress(world, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        response = _upload(world.member)
    assert response.status_code == 302 and response["Location"].startswith("/batches/?started=")
    data = world.member.get("/batches/progress.json").json()
    [batch] = data["batches"]
    assert batch["status"] == "validating" and batch["percent"] == 0 and batch["cancellable"]
    assert batch["id"] in data["html"] and "<progress" in data["html"]
    assert world.b_admin.get("/batches/progress.json").json()["batches"] == []


def test_refused_batches_are_a_clear_4xx(world):
    short = _upload(world.member, window="10m")  # below the cold contract's 1 h
    assert short.status_code == 400 and "window" in short.content.decode().lower()
    empty = world.member.post("/batches/start", {"endpoint": "/v1/chat/completions",
                                                 "completion_window": "24h"})
    assert empty.status_code == 400 and 'id="batch-error"' in empty.content.decode()


def test_another_tenants_batch_and_file_are_404(world, django_capture_on_commit_callbacks):
    from apps.batches.files import files_list

    with django_capture_on_commit_callbacks(execute=False):
        _upload(world.b_admin)
    [theirs] = world.b_admin.get("/batches/progress.json").json()["batches"]
    [their_file] = files_list(tenant=world.b)[0]
    assert world.admin.post(f"/batches/{theirs['id']}/cancel").status_code == 404
    assert world.admin.get(f"/files/{their_file.uid}/content").status_code == 404
    own = world.b_admin.get(f"/files/{their_file.uid}/content")
    assert own.status_code == 200 and b'"custom_id": "r0"' in b"".join(own.streaming_content)
    assert world.b_admin.post(f"/batches/{theirs['id']}/cancel")["Location"] == "/batches/"


def test_the_login_is_throttled(world, user_factory, settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast
    user_factory(username="eve", tenant=world.a, password="pw-correct-horse")
    for _ in range(2):
        assert Client().post("/login/", {"username": "eve", "password": "x"}).status_code == 200
    assert Client().post("/login/", {"username": "eve", "password": "x"}).status_code == 429
    right = Client().post("/login/", {"username": "eve", "password": "pw-correct-horse"})
    assert right.status_code == 429  # locked out even with the right password


def test_an_upload_over_the_limit_is_a_413_on_the_page(world, settings):
    settings.LASER_BATCH_MAX_FILE_BYTES = 200
    response = _upload(world.member, lines=5)  # about 1 kB
    assert response.status_code == 413 and 'id="batch-error"' in response.content.decode()
    assert world.member.get("/batches/progress.json").json()["batches"] == []


def test_the_upload_form_is_csrf_protected(world, user_factory):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user_factory(tenant=world.a))
    assert _upload(strict).status_code == 403
