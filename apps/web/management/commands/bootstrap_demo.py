"""``manage.py bootstrap_demo``: a demo tenant, an ``admin`` superuser and a demo API key.

Idempotent, for ``make run``. The demo key is also written to ``var/demo_api_key`` (mode 0600)
so later runs can print it again: a development convenience only — in production create keys
with ``create_api_key`` and hand them over once.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from apps.core.errors import APIError
from apps.slo.services import contracts_ensure_defaults
from apps.tenants.models import Tenant
from apps.tenants.selectors import api_key_resolve
from apps.tenants.services import api_key_create, tenant_create

DEMO_SLUG = "demo"
ADMIN_USERNAME = "admin"


def demo_key_path() -> Path:
    return Path(settings.VAR_DIR) / "demo_api_key"


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Create with 0600 from the start: never a moment where the key is world-readable.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")
    os.chmod(path, 0o600)


class Command(BaseCommand):
    help = "Create the demo tenant, the admin superuser and a demo API key (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="URL to print")

    def handle(self, *args: Any, url: str, **options: Any) -> None:
        with transaction.atomic():
            tenant = Tenant.objects.filter(slug=DEMO_SLUG).first()
            if tenant is None:
                tenant = tenant_create(name="Demo", slug=DEMO_SLUG)
                self.stdout.write("Created the demo tenant 'demo'.")
            self._ensure_admin()
            contracts_ensure_defaults(tenant=tenant)  # hot, warm and cold contracts
            key_line = self._ensure_key(tenant)
        self.stdout.write(f"Laser: {url}/  admin: {url}/admin/  (user '{ADMIN_USERNAME}')")
        self.stdout.write(key_line)

    def _ensure_admin(self) -> None:
        users = get_user_model().objects
        if users.filter(username=ADMIN_USERNAME).exists():
            return
        password = os.environ.get("LASER_ADMIN_PASSWORD")
        generated = secrets.token_urlsafe(12)
        users.create_superuser(ADMIN_USERNAME, "", password or generated)
        if password:
            self.stdout.write(f"Created superuser '{ADMIN_USERNAME}' (password from env).")
        else:
            self.stdout.write(
                f"Created superuser '{ADMIN_USERNAME}' with password: {generated}  "
                "(shown once; change it in the admin)"
            )

    def _ensure_key(self, tenant: Tenant) -> str:
        path = demo_key_path()
        saved = path.read_text().strip() if path.exists() else ""
        if saved and self._usable(saved, tenant):
            return f"Demo API key: {saved}"
        if saved or not tenant.api_keys.exists():
            _, plaintext = api_key_create(tenant=tenant, name="demo")
            _write_private(path, plaintext)
            return f"Demo API key (new): {plaintext}"
        return (
            "The demo tenant already has API keys (not shown again). New one: "
            "python manage.py create_api_key --tenant demo"
        )

    @staticmethod
    def _usable(raw: str, tenant: Tenant) -> bool:
        try:
            return api_key_resolve(raw, touch=False).tenant_id == tenant.pk
        except APIError:
            return False  # revoked, expired or from a reset database: issue a fresh one
