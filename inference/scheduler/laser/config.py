"""Knobs of the tier-aware policy: ``LaserPolicyConfig`` holds the thresholds the engine runs
with. Which parts run is ``LaserParts`` (``assembly.py``); the simulator's ablations swap
some out (``sim.ablations``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LaserPolicyConfig:
    """Thresholds of the ``laser`` policy (its parts are in ``LaserParts``).

    Reserve: hot keeps headroom of tokens per step and KV blocks sized from its recent demand
    (``reserve_margin`` above its peak over ``reserve_window_s``), at most ``reserve_max_frac``.
    Chunking: when hot decodes run, the step is sized to fit a safety fraction of the tightest
    hot TBT target: ``tbt_safety`` at least, up to ``tbt_safety_max`` as far as the worst ratio
    of measured to estimated step time over the last ``error_window_steps`` steps allows;
    non-hot prefill is deferred while a hot request's TTFT slack is below
    ``ttft_slack_frac`` of its target, and cold decodes sit those steps out. Warm floor:
    while warm decodes run, the step is also sized to fit the same fraction of the gap that
    keeps warm's contracted rate floor.
    Demotion: hot slack below ``pressure_slack_frac`` of target for ``pressure_window_s``
    demotes up to ``demote_fraction`` of demotable hot sessions (lowest weight first); they
    return after ``restore_window_s`` without pressure.
    Borrowing: warm may use what cold does not need for its deadlines (need times
    ``cold_need_safety``); without borrowing warm is held to ``warm_share`` of the budget.
    Cold: ordered by least slack, promoted when slack falls under ``promote_slack_s``;
    admission refuses cold work whose serial completion bound misses its deadline.
    Triage: when waiting hot requests cannot all meet their TTFT deadlines, the fewest (by
    Moore-Hodgson, demotable ones first) are served after the others instead of making the
    rest miss too; with demotion on, demotable ones among them are demoted to warm, as long
    as triage's demotions stay within ``triage_demotion_budget`` of the hot requests admitted
    (the platform's default demotion budget is 5 %).
    Overload: a hot request whose estimated TTFT exceeds
    ``overload_ttft_factor`` times its target is refused with a retry-after estimate (with
    triage: only one triage serves late).
    Aging: a waiting request older than its tier's bound is served as hot, after hot's
    on-time work.
    Hot ignores the warm floor's cap (the floor is a mean rate over a window; a hot burst's
    longer steps cost it little).
    Layer pause (where the executor can stop a forward between layers, i.e. the engine, not
    the simulator): a step without hot work stops at the next layer boundary when a hot
    request arrives or a hot stream's next token falls due (``tbt_safety`` of its TBT target
    after the last one, less the hot step's estimated time), and resumes after the hot-only
    steps that follow. Running hot streams share every step with the rest (one pass over the
    weights for both, under hot's TBT cap), so such a step runs while no hot stream decodes.
    While hot traffic was seen within ``reserve_window_s``, it is sized so that one layer
    takes at most ``pause_layer_frac`` of the latest hot TBT target: a hot arrival waits at
    most that long for the layer in flight.
    """

    reserve_margin: float = 0.25
    reserve_window_s: float = 30.0
    reserve_max_frac: float = 0.5
    reserve_min_tokens: int = 0
    tbt_safety: float = 0.8
    tbt_safety_max: float = 0.95
    error_window_steps: int = 512
    ttft_slack_frac: float = 0.25
    pressure_slack_frac: float = 0.2
    pressure_window_s: float = 2.0
    restore_window_s: float = 10.0
    demote_fraction: float = 0.25
    warm_share: float = 0.3
    cold_need_safety: float = 1.5
    promote_slack_s: float = 60.0
    cold_refresh_s: float = 1.0
    overload_ttft_factor: float = 2.0
    aging_warm_s: float = 30.0
    aging_cold_s: float = 1800.0
    triage_demotion_budget: float = 0.04
    pause_layer_frac: float = 0.1

    def __post_init__(self) -> None:
        for name in ("reserve_margin", "reserve_window_s", "pressure_window_s",
                     "restore_window_s", "cold_need_safety", "promote_slack_s",
                     "cold_refresh_s", "overload_ttft_factor", "aging_warm_s", "aging_cold_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be non-negative")
        for name in ("reserve_max_frac", "tbt_safety", "tbt_safety_max", "ttft_slack_frac",
                     "pressure_slack_frac", "demote_fraction", "warm_share",
                     "triage_demotion_budget", "pause_layer_frac"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must lie in [0, 1]")
        if self.reserve_min_tokens < 0:
            raise ValueError("reserve_min_tokens must be non-negative")
        if self.tbt_safety_max < self.tbt_safety:
            raise ValueError("tbt_safety_max cannot be below tbt_safety")
        if self.error_window_steps < 1:
            raise ValueError("error_window_steps must be at least 1")
