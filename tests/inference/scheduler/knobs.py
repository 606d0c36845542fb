"""The ``laser`` policy's thresholds and ablation switches as one value for tests: ``OFF``
(every part off) and ``knobs(base, **fields)``, which sends each field to the config that
has it."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from inference.scheduler import LaserAblations, LaserPolicyConfig
from inference.scheduler.laser.config import NONE_POLICY

_ABLATIONS = {f.name for f in fields(LaserAblations)}


@dataclass(frozen=True, slots=True)
class Knobs:
    policy: LaserPolicyConfig = LaserPolicyConfig()
    ablations: LaserAblations = LaserAblations()

    def options(self, **more) -> dict:
        """``make_scheduler`` options for ``laser``."""
        return {"policy_config": self.policy, "ablations": self.ablations, **more}


def knobs(base: Knobs, **changes) -> Knobs:
    abl = {k: v for k, v in changes.items() if k in _ABLATIONS}
    pol = {k: v for k, v in changes.items() if k not in _ABLATIONS}
    return Knobs(replace(base.policy, **pol), replace(base.ablations, **abl))


OFF = Knobs(NONE_POLICY, LaserAblations.none())
ALL = Knobs()
