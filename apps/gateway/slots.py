"""Who may call, and how much at once: the caller, its key's validity, its concurrency caps.

A ``Caller`` is an API key, or a logged-in user of the tenant (the browser app): the serving
path records which. ``caps_for`` is the one place the caps are read (the tenant's plan), and
``slots`` counts what each key, user and tenant holds: past a cap a request gets 429
``rate_limit_exceeded`` with ``Retry-After``, never a queue. With
``LASER_RATELIMIT_REDIS_URL`` (default ``REDIS_URL``) the count is every web process's
(``RedisSlots``: leases in Redis that a dead process's expire), else this process's
(``Slots``, embedded mode).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.conf import settings

from apps.core.errors import AuthenticationError, RateLimitError
from apps.core.tiers import Tier

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from apps.tenants.models import ApiKey, Tenant

KEY, USER = "api_key", "user"


@dataclass(slots=True)
class Caller:
    """Who sends a request. ``checked_at`` is when the key (or membership) was last found
    valid (``time.monotonic()``); ``caller_check`` re-reads it when older than asked."""

    tenant: Tenant
    kind: str
    api_key: ApiKey | None = None
    user: Any = None
    default_tier: str = Tier.HOT
    checked_at: float = field(default_factory=time.monotonic)

    @classmethod
    def for_key(cls, api_key: ApiKey) -> Caller:
        """A key just resolved (so just checked) by the transport."""
        return cls(api_key.tenant, KEY, api_key=api_key, default_tier=str(api_key.default_tier))

    @classmethod
    def for_user(cls, user: Any, tenant: Tenant, default_tier: str = Tier.HOT) -> Caller:
        return cls(tenant, USER, user=user, default_tier=default_tier)

    @property
    def api_key_id(self) -> int | None:
        return self.api_key.pk if self.api_key is not None else None

    @property
    def slot_key(self) -> str:
        """The per-caller slot: one per key, one per user."""
        if self.kind == KEY:
            return f"key:{self.api_key_id}"
        return f"user:{self.user.pk}"


def _recheck(caller: Caller) -> None:
    from apps.tenants import selectors
    from apps.tenants.models import ApiKey, Membership

    if caller.kind == KEY:
        key_id = caller.api_key_id  # None: the key was deleted
        key = (ApiKey.objects.select_related("tenant").filter(pk=key_id).first()
               if key_id is not None else None)
        if key is None or key.is_revoked:
            raise AuthenticationError(selectors.REVOKED_KEY)
        if key.is_expired():
            raise AuthenticationError(selectors.EXPIRED_KEY)
        if not key.tenant.is_active:
            raise AuthenticationError(selectors.INACTIVE_TENANT)
        caller.default_tier = str(key.default_tier)
    else:
        user = caller.user
        member = Membership.objects.filter(user_id=user.pk, tenant_id=caller.tenant.pk,
                                           user__is_active=True, tenant__is_active=True)
        if not member.exists():
            raise AuthenticationError("You are no longer a member of this tenant.",
                                      code="invalid_session")
    caller.checked_at = time.monotonic()


async def caller_check(caller: Caller, *, max_age_s: float = 0.0) -> None:
    """Raise 401 when the caller's key was revoked or expired (or the user left the tenant)
    since it was last checked, unless that was less than ``max_age_s`` ago."""
    if time.monotonic() - caller.checked_at < max_age_s:
        return
    await sync_to_async(_recheck, thread_sensitive=True)(caller)


@dataclass(frozen=True, slots=True)
class Caps:
    key_inflight: int  # requests in flight per key (or user)
    tenant_inflight: int  # requests in flight per tenant
    key_sockets: int  # open WebSockets per key (or user)


def caps_for(tenant: Tenant) -> Caps:
    """The caps of ``tenant``'s callers, from its plan: the one place they are read.

    ``Slots`` calls it on the event loop, where the ORM must not run: the plan is the one the
    tenant carries (``api_key_resolve``, ``membership_for_user`` and the batch runner load it),
    read without a query. Off the loop a tenant without its plan loaded is looked up; on the loop
    it gets the platform's pre-plan caps (``LASER_KEY_MAX_*``), with a warning.
    """
    from apps.tenants.plans import plan_loaded, tenant_limits

    if not plan_loaded(tenant) and _on_event_loop():
        logger.warning("tenant %s has no plan loaded: pre-plan caps", tenant.pk)
        return Caps(settings.LASER_KEY_MAX_INFLIGHT, settings.LASER_TENANT_MAX_INFLIGHT,
                    settings.LASER_KEY_MAX_SOCKETS)
    limits = tenant_limits(tenant)
    return Caps(limits.max_inflight_per_key, limits.max_inflight_per_tenant,
                limits.max_sockets_per_key)


def _on_event_loop() -> bool:
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _over(what: str, cap: int) -> RateLimitError:
    return RateLimitError(f"Too many {what} (at most {cap}); retry when one has finished.",
                          retry_after=1.0)


class Slots:
    """In-flight requests per caller and per tenant, open sockets per caller (this process).
    ``aacquire``/``arelease`` are the serving path's (``RedisSlots`` awaits Redis there)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: Counter[str] = Counter()
        self._sockets: Counter[str] = Counter()

    def acquire(self, caller: Caller) -> None:
        """Hold one request slot of the caller and its tenant, or raise 429."""
        caps, mine, tenant = caps_for(caller.tenant), caller.slot_key, f"tenant:{caller.tenant.pk}"
        with self._lock:
            if self._requests[mine] >= caps.key_inflight:
                raise _over("requests in flight for this key", caps.key_inflight)
            if self._requests[tenant] >= caps.tenant_inflight:
                raise _over("requests in flight for this tenant", caps.tenant_inflight)
            self._requests[mine] += 1
            self._requests[tenant] += 1

    def release(self, caller: Caller) -> None:
        with self._lock:
            for name in (caller.slot_key, f"tenant:{caller.tenant.pk}"):
                self._requests[name] -= 1
                if self._requests[name] <= 0:
                    del self._requests[name]

    def open_socket(self, caller: Caller) -> None:
        cap = caps_for(caller.tenant).key_sockets
        with self._lock:
            if self._sockets[caller.slot_key] >= cap:
                raise _over("open WebSockets for this key", cap)
            self._sockets[caller.slot_key] += 1

    def close_socket(self, caller: Caller) -> None:
        with self._lock:
            self._sockets[caller.slot_key] -= 1
            if self._sockets[caller.slot_key] <= 0:
                del self._sockets[caller.slot_key]

    def held(self, caller: Caller) -> tuple[int, int]:
        """(requests of the caller, requests of its tenant) in flight now."""
        with self._lock:
            return self._requests[caller.slot_key], self._requests[f"tenant:{caller.tenant.pk}"]

    async def aacquire(self, caller: Caller) -> None:
        self.acquire(caller)

    async def arelease(self, caller: Caller) -> None:
        self.release(caller)


def get_slots() -> Any:
    """The process's slots: shared through Redis when configured (``shared_slots``), else
    in-process (``Slots``)."""
    from apps.gateway.shared_slots import RedisSlots

    global _slots
    url = settings.LASER_RATELIMIT_REDIS_URL
    if _slots is None or getattr(_slots, "url", "") != url:
        _slots = RedisSlots(url, caps_for, _over) if url else Slots()
    return _slots


_slots: Any = None


class _Proxy:
    """``slots``: whichever ``get_slots`` holds (the settings may name Redis after import)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(get_slots(), name)


slots: Any = _Proxy()
