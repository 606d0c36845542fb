"""What the chat page and its socket know about a tenant: contracted tiers, the default tier,
the contract terms each answer is shown against, and the served model(s)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from apps.core.errors import BadRequestError
from apps.core.tiers import TIERS, Tier
from apps.slo.selectors import contracts_for_tenant
from apps.tenants.models import Tenant

MAX_TOKENS_LIMIT = 2048
DEFAULT_MAX_TOKENS = 256
SYSTEM_MAX_CHARS = 8000
# name -> (lowest, highest, lowest excluded): OpenAI's ranges
SAMPLING_RANGES = {"temperature": (0.0, 2.0, False), "top_p": (0.0, 1.0, True)}


@dataclass(frozen=True, slots=True)
class ChatSetup:
    tenant: Tenant
    tiers: list[str]
    default_tier: str
    terms: dict[str, dict[str, float]] = field(default_factory=dict)
    models: list[str] = field(default_factory=list)


def chat_setup(tenant: Tenant) -> ChatSetup:
    """Tiers the tenant holds contracts for (hot first); default hot where contracted, else
    warm, else the first one held."""
    contracts = {c.tier: c for c in contracts_for_tenant(tenant=tenant)}
    tiers = [t for t in TIERS if t in contracts]
    default = next((t for t in (Tier.HOT, Tier.WARM) if t in contracts),
                   tiers[0] if tiers else Tier.WARM)
    terms = {t: _terms(contracts[t]) for t in tiers}
    return ChatSetup(tenant=tenant, tiers=tiers, default_tier=default, terms=terms,
                     models=[settings.LASER_SERVED_MODEL_ID])  # what /v1/models lists


def _terms(contract: Any) -> dict[str, float]:
    targets = contract.targets
    return {"ttft_p99_s": targets.ttft_p99_s, "tbt_p99_s": targets.tbt_p99_s,
            "warm_rate_tps": targets.warm_rate_tps,
            "warm_mean_ttft_s": targets.warm_mean_ttft_s}


def turn_params(content: dict[str, Any], setup: ChatSetup) -> dict[str, Any]:
    """The request parameters of one browser turn; 400 for a tier without a contract."""
    tier = content.get("tier") or setup.default_tier
    if tier not in setup.tiers:
        raise BadRequestError(f"Your tenant has no contract for the '{tier}' tier.",
                              param="tier", code="tier_not_contracted")
    max_tokens = content.get("max_tokens", DEFAULT_MAX_TOKENS)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not (
            1 <= max_tokens <= MAX_TOKENS_LIMIT):
        raise BadRequestError(f"'max_tokens' must be between 1 and {MAX_TOKENS_LIMIT}.",
                              param="max_tokens")
    model = content.get("model")
    if model is not None and model not in setup.models:
        raise BadRequestError(f"The model '{model}' does not exist.", param="model",
                              code="model_not_found")
    params: dict[str, Any] = {"service_tier": tier, "max_tokens": max_tokens}
    for name, (low, high, open_low) in SAMPLING_RANGES.items():
        value = content.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not (
                low < value <= high if open_low else low <= value <= high):
            bound = f"above {low:g}" if open_low else f"from {low:g}"
            raise BadRequestError(f"'{name}' must be a number {bound} to {high:g}.", param=name)
        params[name] = value
    json_mode = content.get("json_mode", False)
    if not isinstance(json_mode, bool):
        raise BadRequestError("'json_mode' must be true or false.", param="json_mode")
    if json_mode:  # the engine constrains every token to valid JSON
        params["response_format"] = {"type": "json_object"}
    return params


def system_prompt(content: dict[str, Any]) -> str:
    """The turn's system prompt ('' for none); 400 past ``SYSTEM_MAX_CHARS``."""
    system = content.get("system") or ""
    if not isinstance(system, str) or len(system) > SYSTEM_MAX_CHARS:
        raise BadRequestError(f"The system prompt must be text of at most {SYSTEM_MAX_CHARS} "
                              "characters.", param="system")
    return system.strip()
