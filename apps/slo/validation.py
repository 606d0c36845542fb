"""Checks on contract terms, with messages a tenant admin can act on (used by the admin form
through ``SLOContract.clean`` and by the services)."""

from __future__ import annotations

from collections.abc import Mapping

from django.conf import settings

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
