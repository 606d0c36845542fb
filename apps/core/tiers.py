"""The service tiers: one vocabulary for the engine and every app.

``Tier`` is the engine's ``StrEnum`` (``inference/request.py``): each member is the string the API
accepts and the database stores (``Tier.HOT == "hot"``). ``TIERS`` lists them most urgent first;
``CHOICES`` are the model fields' and forms' choices, with the labels people read; ``NAMES``
is what the pages' scripts get, so that no script spells a tier itself.
"""

from __future__ import annotations

from inference.request import Tier

TIERS: tuple[Tier, ...] = tuple(sorted(Tier, key=lambda tier: tier.rank))
LABELS: dict[Tier, str] = {
    Tier.HOT: "Hot (interactive)", Tier.WARM: "Warm (analysis)", Tier.COLD: "Cold (batch)",
}
CHOICES: list[tuple[str, str]] = [(tier.value, LABELS[tier]) for tier in TIERS]
# the vocabulary as the pages' scripts read it (``json_script``): {"HOT": "hot", ...}, urgent first
NAMES: dict[str, str] = {tier.name: tier.value for tier in TIERS}

__all__ = ["CHOICES", "LABELS", "NAMES", "TIERS", "Tier"]
