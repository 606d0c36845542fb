"""``manage.py create_api_key --tenant SLUG [--name] [--tier] [--expires-days N]``.

The key is printed once, alone on stdout (so ``KEY=$(manage.py create_api_key ...)`` works);
the details go to stderr.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from apps.core.tiers import TIERS, Tier
from apps.tenants.models import Tenant
from apps.tenants.services import api_key_create


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value <= 0:
        raise ValueError(raw)
    return value


class Command(BaseCommand):
    help = "Create an API key for a tenant and print it (once: only its hash is stored)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, metavar="SLUG")
        parser.add_argument("--name", default="")
        parser.add_argument("--tier", choices=[tier.value for tier in TIERS], default=Tier.HOT)
        parser.add_argument("--expires-days", type=_positive_int, default=None, metavar="N")

    def handle(self, *args: Any, **options: Any) -> None:
        slug = options["tenant"]
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            raise CommandError(
                f"Unknown tenant {slug!r}. Create it with: manage.py create_tenant "
                f"--name NAME --slug {slug}",
                returncode=2,
            )
        if not tenant.is_active:
            self.stderr.write(f"Warning: tenant {slug!r} is inactive; the key will be refused.")
        days = options["expires_days"]
        expires_at = timezone.now() + dt.timedelta(days=days) if days else None
        api_key, plaintext = api_key_create(
            tenant=tenant, name=options["name"], default_tier=options["tier"], expires_at=expires_at
        )
        expiry = f"expires {expires_at:%Y-%m-%d %H:%M} UTC" if expires_at else "no expiry"
        self.stderr.write(
            f"API key {api_key.prefix} for {tenant.slug} (tier {api_key.default_tier}, {expiry}). "
            "Store it now: it cannot be shown again."
        )
        self.stdout.write(plaintext)
