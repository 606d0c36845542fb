"""Checks on contract terms, with messages a tenant admin can act on (used by the admin form
through ``SLOContract.clean``, by the services and by the contract API).

Two layers: ``validate_terms`` is what the platform can honour at all; ``check_bounds`` is what
the tenant's plan lets it sign (``apps.tenants.plans.tier_bounds``). Platform staff may sign
beyond the plan, never beyond the platform."""

from __future__ import annotations

from collections.abc import Mapping

from django.conf import settings

from apps.tenants.plans import TierBounds, tier_bounds

_POSITIVE = {
    "ttft_p99_s": "P99 TTFT",
    "tbt_p99_s": "P99 TBT",
    "priority_weight": "Priority weight",
    "warm_rate_tps": "Contracted tokens/s",
    "warm_mean_ttft_s": "Mean TTFT",
    "cold_deadline_s": "Deadline",
    "requests_per_min": "Requests per minute",
    "tokens_per_min": "Tokens per minute",
    "daily_token_budget": "Daily token budget",
}


def cold_min_deadline_s() -> float:
    """The shortest cold deadline the platform can honour (``LASER_COLD_MIN_DEADLINE_S``)."""
    return float(getattr(settings, "LASER_COLD_MIN_DEADLINE_S", 300.0))


def validate_terms(terms: Mapping[str, object]) -> dict[str, str]:
    """Field name → message for every invalid term; empty when the terms are acceptable."""
    errors: dict[str, str] = {}
    for name, label in _POSITIVE.items():
        value = terms.get(name)
        if value is None and name == "daily_token_budget":
            continue  # unlimited
        if value is None or not value > 0:
            errors[name] = f"{label} must be greater than zero (got {value})."
    budget = terms.get("interruption_budget")
    if budget is None or not 0 < budget < 1:
        errors["interruption_budget"] = (
            f"Interruption budget is a fraction of streams: more than 0 and less than 1 "
            f"(0.001 = 0.1 %), got {budget}."
        )
    for name, label in (("warm_band", "Stability band"), ("demotion_budget", "Demotion budget")):
        value = terms.get(name)
        if value is None or not 0 <= value < 1:
            errors[name] = f"{label} is a fraction: at least 0 and less than 1, got {value}."
    percentile = terms.get("cold_percentile")
    if percentile is None or not 0 < percentile <= 100:
        errors["cold_percentile"] = (
            f"Completion percentile must lie in (0, 100] (e.g. 99), got {percentile}."
        )
    deadline = terms.get("cold_deadline_s")
    minimum = cold_min_deadline_s()
    if "cold_deadline_s" not in errors and deadline < minimum:
        errors["cold_deadline_s"] = (
            f"The platform cannot honour a deadline shorter than {minimum:g} s "
            f"(LASER_COLD_MIN_DEADLINE_S); got {deadline:g} s."
        )
    return errors


# Contract term -> (plan bound, "min" or "max", what the tenant reads, unit).
PLAN_BOUNDS: dict[str, tuple[str, str, str, str]] = {
    "ttft_p99_s": ("min_ttft_p99_s", "min", "P99 TTFT", " s"),
    "tbt_p99_s": ("min_tbt_p99_s", "min", "P99 TBT", " s"),
    "warm_mean_ttft_s": ("min_warm_mean_ttft_s", "min", "Mean TTFT", " s"),
    "cold_deadline_s": ("min_cold_deadline_s", "min", "Deadline", " s"),
    "priority_weight": ("max_priority_weight", "max", "Priority weight", ""),
    "warm_rate_tps": ("max_warm_rate_tps", "max", "Contracted tokens/s", ""),
    "requests_per_min": ("max_requests_per_min", "max", "Requests per minute", ""),
    "tokens_per_min": ("max_tokens_per_min", "max", "Tokens per minute", ""),
    "daily_token_budget": ("max_daily_token_budget", "max", "Daily token budget", " tokens"),
}


def _outside(value: object, bound: float, kind: str) -> bool:
    if value is None:  # only the daily budget may be empty: unlimited exceeds any maximum
        return kind == "max"
    return value < bound if kind == "min" else value > bound


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def check_bounds(terms: Mapping[str, object], bounds: TierBounds | None) -> dict[str, str]:
    """Field name → message for every term outside the plan's ``bounds`` (None = unbounded).

    The message names the bound, so a tenant admin knows what the plan allows.
    """
    if bounds is None:
        return {}
    errors: dict[str, str] = {}
    for name, (bound_name, kind, label, unit) in PLAN_BOUNDS.items():
        bound = getattr(bounds, bound_name)
        if bound is None or name not in terms or not _outside(terms[name], bound, kind):
            continue
        value = terms[name]
        shown = "unlimited" if value is None else f"{_num(value)}{unit}"
        limit = "at least" if kind == "min" else "at most"
        errors[name] = (
            f"{label} {shown} is outside your plan '{bounds.plan}': its bound "
            f"'{bound_name}' for {bounds.tier} contracts is {limit} {_num(bound)}{unit}. "
            f"Platform staff can move you to another plan."
        )
    return errors


def clamp_to_bounds(terms: Mapping[str, object], bounds: TierBounds | None) -> dict[str, object]:
    """The terms outside ``bounds`` moved onto them (an unlimited daily budget onto its
    maximum); terms within them are left out: what a contract changes under a tighter plan."""
    if bounds is None:
        return {}
    clamped: dict[str, object] = {}
    for name, (bound_name, kind, _, _) in PLAN_BOUNDS.items():
        bound = getattr(bounds, bound_name)
        if bound is not None and name in terms and _outside(terms[name], bound, kind):
            value = terms[name]
            clamped[name] = type(value)(bound) if value is not None else bound
    return clamped


def validate_contract(
    terms: Mapping[str, object],
    *,
    tenant_id: int | None,
    tier: str,
    beyond_plan: bool = False,
    signed: Mapping[str, object] | None = None,
) -> dict[str, str]:
    """Platform rules, then (unless staff sign ``beyond_plan``) the tenant's plan bounds.

    ``signed`` are the terms of the version in force: a term left as it was signed (e.g. one
    platform staff granted beyond the plan) is not re-judged; every changed term is.
    """
    errors = validate_terms(terms)
    if beyond_plan or tenant_id is None or not tier:
        return errors
    bounds = tier_bounds(tenant_id, tier)
    changed = {k: v for k, v in terms.items()
               if k not in errors and (signed is None or signed.get(k) != v)}
    return {**errors, **check_bounds(changed, bounds)}
