"""The ``laser`` policy's thresholds and ablation switches as one value for tests: ``OFF``
(every part off) and ``knobs(base, **fields)``, which sends each field to the config that
has it."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from inference.scheduler import LaserPolicyConfig
from sim.ablations import NONE_POLICY, LaserAblations, laser_options

_ABLATIONS = {f.name for f in fields(LaserAblations)}


@dataclass(frozen=True, slots=True)
class Knobs:
    policy: LaserPolicyConfig = LaserPolicyConfig()
    ablations: LaserAblations = LaserAblations()

    def options(self, pause_layers: int = 0, **more) -> dict:
        """``make_scheduler`` options for ``laser``: its thresholds, and the parts its
        ablations leave (``sim.ablations``)."""
        return {"policy_config": self.policy, **laser_options(self.ablations, pause_layers),
                **more}


def knobs(base: Knobs, **changes) -> Knobs:
    abl = {k: v for k, v in changes.items() if k in _ABLATIONS}
    pol = {k: v for k, v in changes.items() if k not in _ABLATIONS}
    return Knobs(replace(base.policy, **pol), replace(base.ablations, **abl))


OFF = Knobs(NONE_POLICY, LaserAblations.none())
ALL = Knobs()
