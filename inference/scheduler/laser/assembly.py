"""Which class plays each part of the ``laser`` policy: ``LaserParts``. The default is the
policy the engine serves; the simulator's ablations swap parts for variants of their own
(``sim.ablations``)."""

from __future__ import annotations

from dataclasses import dataclass

from inference.scheduler.laser.hot import HotTriage
from inference.scheduler.laser.parts import (
    Aging,
    ColdAdmission,
    ColdPacing,
    Contract,
    Demotion,
    FillRules,
    WarmOrder,
)
from inference.scheduler.laser.reserve import HotReserve


@dataclass(frozen=True, slots=True)
class LaserParts:
    """The class of each part: ``admission`` (cold admitted by its deadlines), ``contract``
    (in-contract work first), ``demotion`` (hot served as warm under pressure or when late),
    ``aging`` (a long wait ranks as hot), ``cold`` (cold paced by deadline slack), ``warm``
    (warm's order), ``fill`` (the step's caps), ``reserve`` (the hot block and token
    reserve), ``triage`` (hot triage and overload)."""

    admission: type[ColdAdmission] = ColdAdmission
    contract: type[Contract] = Contract
    demotion: type[Demotion] = Demotion
    aging: type[Aging] = Aging
    cold: type[ColdPacing] = ColdPacing
    warm: type[WarmOrder] = WarmOrder
    fill: type[FillRules] = FillRules
    reserve: type[HotReserve] = HotReserve
    triage: type[HotTriage] = HotTriage
