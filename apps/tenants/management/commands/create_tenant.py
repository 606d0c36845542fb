"""``manage.py create_tenant --name NAME --slug SLUG``."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.tenants.models import Tenant
from apps.tenants.services import tenant_create


class Command(BaseCommand):
    help = "Create a tenant."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True)
        parser.add_argument("--slug", required=True, help="unique URL-safe id, e.g. acme")

    def handle(self, *args: Any, name: str, slug: str, **options: Any) -> None:
        if Tenant.objects.filter(slug=slug).exists():
            raise CommandError(f"A tenant with slug {slug!r} already exists.", returncode=2)
        try:
            tenant = tenant_create(name=name, slug=slug)
        except ValidationError as exc:
            details = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            raise CommandError(f"Invalid tenant: {details}", returncode=2) from exc
        self.stdout.write(f"Created tenant {tenant.slug!r} ({tenant.name}).")
