"""Reads: resolving an API key to its tenant, and who a user is in which tenant."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

from asgiref.sync import sync_to_async
from django.utils import timezone

from apps.core.errors import MISSING_KEY, AuthenticationError
from apps.tenants import keys
from apps.tenants.models import ApiKey, Membership, Tenant

MALFORMED_KEY = "Malformed API key: Laser keys look like 'lsr_<prefix>.<secret>'."
INCORRECT_KEY = "Incorrect API key provided."
REVOKED_KEY = "This API key has been revoked."
EXPIRED_KEY = "This API key has expired."
INACTIVE_TENANT = "The tenant of this API key is not active."

# Compared against when the prefix is unknown, so that a miss costs about as much as a hit.
_DUMMY_HASH = "0" * 64


def key_from_headers(headers: Mapping[str, Any]) -> str | None:
    """The raw key from ``Authorization: Bearer <key>`` or ``X-API-Key``, else ``None``.

    ``headers`` may be a Django ``request.headers`` (case-insensitive) or a plain dict with
    lower-case names (as built from an ASGI scope).
    """
    authorization = headers.get("Authorization") or headers.get("authorization") or ""
    if isinstance(authorization, bytes):
        authorization = authorization.decode("latin-1")
    scheme, _, credentials = authorization.strip().partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    x_api_key = headers.get("X-API-Key") or headers.get("x-api-key") or ""
    if isinstance(x_api_key, bytes):
        x_api_key = x_api_key.decode("latin-1")
    return x_api_key.strip() or None


def api_key_resolve(raw: str | None, *, touch: bool = True) -> ApiKey:
    """Return the usable ``ApiKey`` for ``raw`` (with its tenant loaded) or raise 401.

    The secret is checked before revocation/expiry, so a caller who only knows a (public)
    prefix learns nothing about the key's state. ``touch`` records last use (rate-limited).
    """
    from apps.tenants.services import api_key_mark_used

    if not raw:
        raise AuthenticationError(MISSING_KEY)
    parsed = keys.parse_key(raw)
    if parsed is None:
        raise AuthenticationError(MALFORMED_KEY)
    prefix, secret = parsed
    api_key = ApiKey.objects.select_related("tenant__plan").filter(prefix=prefix).first()
    expected = api_key.secret_hash if api_key else _DUMMY_HASH
    if not hmac.compare_digest(keys.hash_key(prefix, secret), expected) or api_key is None:
        raise AuthenticationError(INCORRECT_KEY)
    now = timezone.now()
    if api_key.is_revoked:
        raise AuthenticationError(REVOKED_KEY)
    if api_key.is_expired(now):
        raise AuthenticationError(EXPIRED_KEY)
    if not api_key.tenant.is_active:
        raise AuthenticationError(INACTIVE_TENANT)
    if touch:
        api_key_mark_used(api_key=api_key, now=now)
    return api_key


async def aapi_key_resolve(raw: str | None, *, touch: bool = True) -> ApiKey:
    """``api_key_resolve`` for async views and Channels consumers (runs the ORM in a thread)."""
    return await sync_to_async(api_key_resolve, thread_sensitive=True)(raw, touch=touch)


def tenant_for_user(user: Any) -> Tenant | None:
    """The tenant ``user`` belongs to, or ``None`` (anonymous, platform staff, no membership)."""
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    tenant = getattr(user, "tenant", None)  # an ApiPrincipal already carries it
    if isinstance(tenant, Tenant):
        return tenant
    membership = Membership.objects.select_related("tenant__plan").filter(user_id=user.pk).first()
    return membership.tenant if membership else None


def membership_for_user(user: Any) -> Membership | None:
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    if getattr(user, "api_key", None) is not None:
        return None  # an ApiPrincipal is a key, not a Django user

    return Membership.objects.select_related("tenant__plan").filter(user_id=user.pk).first()


def user_is_tenant_admin(user: Any) -> bool:
    membership = membership_for_user(user)
    return membership is not None and membership.role == Membership.Role.ADMIN


def api_keys_for_tenant(*, tenant: Tenant) -> list[ApiKey]:
    return list(ApiKey.objects.filter(tenant=tenant).order_by("-created_at"))
