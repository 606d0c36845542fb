"""``manage.py create_tenant --name NAME --slug SLUG [--plan PLAN]``.

The tenant starts on the plan (default: the default plan) with the plan's default contract for
every tier, so its first API key works at once.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.tenants.models import Plan, Tenant
from apps.tenants.services import tenant_create


class Command(BaseCommand):
    help = "Create a tenant on a plan, with the plan's default contracts."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True)
        parser.add_argument("--slug", required=True, help="unique URL-safe id, e.g. acme")
        parser.add_argument("--plan", default=None, help="plan name (default: the default plan)")

    def handle(self, *args: Any, name: str, slug: str, plan: str | None, **options: Any) -> None:
        if Tenant.objects.filter(slug=slug).exists():
            raise CommandError(f"A tenant with slug {slug!r} already exists.", returncode=2)
        chosen = None
        if plan is not None:
            chosen = Plan.objects.filter(name=plan).first()
            if chosen is None:
                names = ", ".join(Plan.objects.values_list("name", flat=True)) or "none"
                raise CommandError(f"No plan {plan!r} (plans: {names}).", returncode=2)
        try:
            tenant = tenant_create(name=name, slug=slug, plan=chosen)
        except ValidationError as exc:
            details = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            raise CommandError(f"Invalid tenant: {details}", returncode=2) from exc
        self.stdout.write(f"Created tenant {tenant.slug!r} ({tenant.name}) on plan "
                          f"{tenant.plan.name!r}, with its default contracts.")
