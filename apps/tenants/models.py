"""Tenants, memberships and hashed API keys.

Business logic lives in ``services.py`` (writes) and ``selectors.py`` (reads); models only hold
data and a few derived properties.
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import models
from django.utils import timezone


class Tier(models.TextChoices):
    """Service tiers. The engine uses the same strings."""

    HOT = "hot", "Hot (interactive)"
    WARM = "warm", "Warm (analysis)"
    COLD = "cold", "Cold (batch)"


class Tenant(models.Model):
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=64, unique=True)
    is_active = models.BooleanField(default=True)
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
    default_tier = models.CharField(max_length=8, choices=Tier.choices, default=Tier.HOT)
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
