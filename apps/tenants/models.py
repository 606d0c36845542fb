"""Tenants, memberships and hashed API keys.

Business logic lives in ``services.py`` (writes) and ``selectors.py`` (reads); models only hold
data and a few derived properties.
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import models
from django.utils import timezone

from apps.core.tiers import CHOICES, Tier

GIB = 1024**3


class Plan(models.Model):
    """A commercial plan, defined by platform staff: tenant-wide limits, and per tier
    (``PlanTier``) the bounds of what a tenant may sign and the contract it starts with.

    The request path enforces the tenant-wide fields through ``selectors.tenant_limits``.
    """

    name = models.CharField(max_length=100, unique=True)
    is_default = models.BooleanField(
        default=False, help_text="New tenants get this plan (exactly one plan is the default)."
    )
    burst_factor = models.FloatField(
        default=2.0, help_text="Burst ceiling: how many times the contract's rpm/tpm may be used "
        "in a short burst (2 = twice the contracted rate)."
    )
    max_inflight_per_key = models.PositiveIntegerField(
        "max requests in flight per key", default=128
    )
    max_inflight_per_tenant = models.PositiveIntegerField(
        "max requests in flight per tenant", default=256
    )
    max_sockets_per_key = models.PositiveIntegerField(
        "max open WebSocket sockets per key", default=32
    )
    max_storage_bytes = models.PositiveBigIntegerField(
        "max file storage (bytes)", default=GIB,
        help_text="Batch input and output files together; 1 GiB = 1073741824.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"], condition=models.Q(is_default=True),
                name="tenants_one_default_plan",
            ),
            models.CheckConstraint(
                condition=models.Q(burst_factor__gte=1.0), name="tenants_plan_burst_at_least_1"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} (default)" if self.is_default else self.name


class PlanTier(models.Model):
    """One tier of a plan: the bounds a tenant's contract must stay within, and the default
    contract a new tenant starts with. An empty bound means "no bound beyond the platform's"."""

    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="tiers")
    tier = models.CharField(max_length=8, choices=CHOICES)
    # Tightest targets a tenant may sign (a smaller target would jump the queue).
    min_ttft_p99_s = models.FloatField("tightest P99 TTFT (s)", null=True, blank=True)
    min_tbt_p99_s = models.FloatField("tightest P99 TBT (s)", null=True, blank=True)
    min_warm_mean_ttft_s = models.FloatField("tightest warm mean TTFT (s)", null=True,
                                             blank=True)
    min_cold_deadline_s = models.FloatField(
        "shortest cold deadline (s)", null=True, blank=True,
        help_text="Empty = the platform minimum (LASER_COLD_MIN_DEADLINE_S).",
    )
    # Highest weights and rates a tenant may sign.
    max_priority_weight = models.FloatField("highest priority weight", null=True, blank=True)
    max_warm_rate_tps = models.FloatField("highest warm tokens/s", null=True, blank=True)
    max_requests_per_min = models.PositiveIntegerField("highest requests/min", null=True,
                                                       blank=True)
    max_tokens_per_min = models.PositiveIntegerField("highest tokens/min", null=True, blank=True)
    max_daily_token_budget = models.PositiveBigIntegerField(
        "highest daily token budget", null=True, blank=True,
        help_text="Empty = an unlimited daily budget may be signed.",
    )
    default_terms = models.JSONField(
        "default contract", default=dict, blank=True,
        help_text='Terms of a new tenant\'s contract that differ from the design\'s table, e.g. '
        '{"ttft_p99_s": 0.3, "daily_token_budget": 1000000}.',
    )

    class Meta:
        ordering = ["plan", "tier"]
        verbose_name = "plan tier"
        constraints = [
            models.UniqueConstraint(fields=["plan", "tier"], name="tenants_one_plan_tier")
        ]

    def __str__(self) -> str:
        return f"{self.plan.name} · {self.tier}"


class Tenant(models.Model):
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=64, unique=True)
    is_active = models.BooleanField(default=True)
    plan = models.ForeignKey(
        Plan, on_delete=models.PROTECT, null=True, blank=True, related_name="tenants",
        help_text="Bounds what the tenant may sign. Empty = the default plan.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """Attaches a Django user to exactly one tenant with a role."""

    class Role(models.TextChoices):
        ADMIN = "admin", "Tenant admin"
        MEMBER = "member", "Member"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="membership"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant__name", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant} ({self.role})"


class ApiKey(models.Model):
    """An API key ``lsr_<prefix>.<secret>``. Only ``prefix`` and a hash of the key are stored."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    default_tier = models.CharField(max_length=8, choices=CHOICES, default=Tier.HOT)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        editable=False,
        related_name="+",
    )

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        # Shown in admin and its change log: the public prefix only, never the secret.
        return f"lsr_{self.prefix}… ({self.name})" if self.name else f"lsr_{self.prefix}…"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    def is_expired(self, now: dt.datetime | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or timezone.now())

    @property
    def status(self) -> str:
        if self.is_revoked:
            return "revoked"
        return "expired" if self.is_expired() else "active"
