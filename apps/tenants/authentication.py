"""DRF authentication by API key (``Authorization: Bearer`` as the OpenAI SDK sends, or
``X-API-Key``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rest_framework import authentication, exceptions
from rest_framework.request import Request

from apps.core.errors import APIError
from apps.tenants.models import ApiKey, Tenant
from apps.tenants.selectors import api_key_resolve, key_from_headers


@dataclass(frozen=True, eq=False)
class ApiPrincipal:
    """``request.user`` for a request authenticated by API key: the key and its tenant."""

    api_key: ApiKey
    tenant: Tenant = field(init=False)
    is_authenticated: bool = field(default=True, init=False)
    is_anonymous: bool = field(default=False, init=False)
    is_active: bool = field(default=True, init=False)
    is_staff: bool = field(default=False, init=False)
    is_superuser: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tenant", self.api_key.tenant)

    @property
    def pk(self) -> str:
        # Distinct from Django user ids, so throttles and caches never mix the two.
        return f"apikey:{self.api_key.prefix}"

    id = pk

    @property
    def default_tier(self) -> str:
        return self.api_key.default_tier

    def has_perm(self, perm: str, obj: Any = None) -> bool:
        return False  # keys never reach the Django admin permission system

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.api_key.prefix}"


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """No key → ``None`` (the permission class answers 401); a bad key → 401 with its reason."""

    def authenticate(self, request: Request) -> tuple[ApiPrincipal, ApiKey] | None:
        raw = key_from_headers(request.headers)
        if raw is None:
            return None
        try:
            api_key = api_key_resolve(raw)
        except APIError as exc:
            # AuthenticationFailed (not our APIError) so DRF sets WWW-Authenticate; the
            # project exception handler turns it back into the OpenAI shape.
            raise exceptions.AuthenticationFailed(exc.message) from exc
        return ApiPrincipal(api_key), api_key

    def authenticate_header(self, request: Request) -> str:
        # A non-empty challenge makes DRF answer 401 rather than 403 to unauthenticated calls.
        return 'Bearer realm="laser"'
