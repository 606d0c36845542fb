"""What a step carries between its phases in ``LLMEngine``: the plan with its batch while it
runs (``PlannedStep``), and a forward stopped between layers until it resumes
(``PausedForward``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from inference.request import Delta
from inference.scheduler import StepPlan

from .runner import BatchInputs, LayerwiseForward
from .sampler import SamplingRow


@dataclass(slots=True)
class PausedForward:
    """A forward stopped between layers, with what its completion needs."""

    plan: StepPlan
    rows: list[SamplingRow]
    forward: LayerwiseForward  # holds the batch
    # a step that ran its own forward beside this one returned its tokens first: the next
    # call resumes this forward before anything is scheduled (the value: finish it in full)
    resume_next: bool | None = None


@dataclass(slots=True)
class PlannedStep:
    """A scheduled step: its plan, the deltas so far, when planning began, the forward paused
    before it (and whether to finish that one in full) and, unless the plan is empty, its
    batch, sampling rows and the time a pausable step stops at (None: not pausable)."""

    plan: StepPlan
    deltas: list[Delta]
    t_plan: float
    paused: PausedForward | None
    finish: bool
    batch: BatchInputs | None = None
    rows: list[SamplingRow] = field(default_factory=list)
    due: float | None = None
