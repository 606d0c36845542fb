"""Writes for tenants, members and API keys. Keyword-only and typed; views and admin call these."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from apps.core.jsonbody import text_problem
from apps.core.tiers import TIERS, Tier
from apps.tenants import keys
from apps.tenants.models import ApiKey, Membership, Plan, PlanTier, Tenant
from apps.tenants.plans import (
    DEFAULT_BOUNDS,
    DEFAULT_PLAN_NAME,
    DEFAULT_PLAN_TERMS,
    default_plan,
    default_plan_limits,
)

_PREFIX_ATTEMPTS = 5


@transaction.atomic
def tenant_create(
    *,
    name: str,
    slug: str,
    is_active: bool = True,
    plan: Plan | None = None,
    default_contracts: bool = True,
) -> Tenant:
    """A new tenant on ``plan`` (default: the default plan).

    Unless ``default_contracts`` is False, the SLO app gives it the plan's default contract for
    every tier as it is saved (a ``post_save`` receiver, so tenants created anywhere get them),
    and its first key works at once.
    """
    tenant = Tenant(name=name, slug=slug, is_active=is_active, plan=plan or plan_ensure_default())
    tenant.full_clean()
    tenant.skip_default_contracts = not default_contracts
    tenant.save()
    return tenant


@transaction.atomic
def tenant_plan_change(*, tenant: Tenant, plan: Plan) -> Tenant:
    """Move ``tenant`` to ``plan``. Its caps follow at once; the SLO app clamps its contracts
    to the new plan's bounds in the same transaction (a receiver: a term outside them moves
    onto the bound, as a new contract version authored by the change)."""
    tenant.plan = plan
    tenant.save(update_fields=["plan"])
    return tenant


@transaction.atomic
def plan_ensure_default() -> Plan:
    """The default plan, created with ``DEFAULT_BOUNDS`` for every tier if none exists."""
    plan = default_plan()
    if plan is not None:
        return plan
    plan, _ = Plan.objects.get_or_create(name=DEFAULT_PLAN_NAME, defaults=default_plan_limits())
    plan.is_default = True
    plan.save(update_fields=["is_default"])
    for tier in TIERS:
        PlanTier.objects.get_or_create(
            plan=plan, tier=tier,
            defaults={**DEFAULT_BOUNDS, "default_terms": dict(DEFAULT_PLAN_TERMS)},
        )
    return plan


def member_add(
    *, tenant: Tenant, user: AbstractBaseUser, role: str = Membership.Role.MEMBER
) -> Membership:
    """Attach ``user`` to ``tenant`` (a user belongs to one tenant; re-adding updates the role)."""
    membership, _ = Membership.objects.update_or_create(
        user=user, defaults={"tenant": tenant, "role": role}
    )
    return membership


def api_key_issue(*, api_key: ApiKey) -> str:
    """Give an unsaved ``api_key`` a fresh prefix and secret hash, save it, return the plaintext.

    The plaintext exists only in the return value: show it once, never store it.
    """
    for attempt in range(_PREFIX_ATTEMPTS):
        prefix, secret = keys.new_prefix(), keys.new_secret()
        api_key.prefix = prefix
        api_key.secret_hash = keys.hash_key(prefix, secret)
        try:
            # The savepoint keeps a caller's transaction usable after a prefix collision.
            with transaction.atomic():
                api_key.save(force_insert=True)
        except IntegrityError:
            if attempt == _PREFIX_ATTEMPTS - 1:
                raise
            continue
        return keys.format_key(prefix, secret)
    raise AssertionError("unreachable")


def api_key_create(
    *,
    tenant: Tenant,
    name: str = "",
    default_tier: str = Tier.HOT,
    expires_at: dt.datetime | None = None,
    created_by: AbstractBaseUser | None = None,
) -> tuple[ApiKey, str]:
    """Create a key for ``tenant``; returns (key, plaintext). The plaintext is not stored."""
    if default_tier not in TIERS:
        names = [tier.value for tier in TIERS]
        raise ValueError(f"unknown tier {default_tier!r}; expected one of {names}")
    problem = text_problem(name)  # PostgreSQL refuses a NUL; no encoding takes a surrogate
    if problem is not None:
        raise ValueError(f"the key name {problem}")
    api_key = ApiKey(
        tenant=tenant,
        name=name,
        default_tier=default_tier,
        expires_at=expires_at,
        created_by=created_by,
    )
    return api_key, api_key_issue(api_key=api_key)


def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    """Revoke ``api_key`` (idempotent: the first revocation time is kept)."""
    if api_key.revoked_at is None:
        api_key.revoked_at = timezone.now()
        ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(
            revoked_at=api_key.revoked_at
        )
    return api_key


def api_key_mark_used(*, api_key: ApiKey, now: dt.datetime | None = None) -> bool:
    """Record use of ``api_key``, at most once per ``LASER_API_KEY_TOUCH_INTERVAL`` seconds.

    Writing on every request would turn each authenticated call into a row update (and a lock);
    the conditional UPDATE also keeps concurrent requests from writing twice.
    """
    now = now or timezone.now()
    threshold = now - dt.timedelta(seconds=settings.LASER_API_KEY_TOUCH_INTERVAL)
    if api_key.last_used_at is not None and api_key.last_used_at > threshold:
        return False
    updated = ApiKey.objects.filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lte=threshold), pk=api_key.pk
    ).update(last_used_at=now)
    if updated:
        api_key.last_used_at = now
    return bool(updated)
