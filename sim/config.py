"""What a simulator run needs besides the trace: hardware, model, policy, scheduler limits and
the contracts the scenario's tenants hold."""

from __future__ import annotations

from dataclasses import dataclass, field

from inference.scheduler import LaserPolicyConfig, SchedulerConfig
from sim.ablations import LaserAblations
from sim.profiles import GPUS, MODELS

DEFAULT_BUDGET = 2048  # tokens per step: vLLM's default for online serving with chunked prefill


@dataclass(frozen=True, slots=True)
class Contracts:
    """Targets every simulated tenant of a tier holds (the design's defaults, except TTFT).

    A hot request's TTFT target is ``hot_ttft_s`` of queueing on top of its own prefill time on
    an idle machine (from the cost model): a flat 200 ms is out of reach on an A100 for the
    longest 10 % of chat prompts whatever the policy, and a contract no policy can keep
    measures nothing.
    """

    hot_ttft_s: float = 0.2
    hot_tbt_s: float = 0.1
    warm_rate_tps: float = 20.0
    warm_band: float = 0.05
    warm_mean_ttft_s: float = 2.0
    cold_deadline_s: float = 4 * 3600.0

    def __post_init__(self) -> None:
        for name in ("hot_ttft_s", "hot_tbt_s", "warm_rate_tps", "warm_mean_ttft_s",
                     "cold_deadline_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if not 0 <= self.warm_band < 1:
            raise ValueError("warm_band must lie in [0, 1)")


@dataclass(frozen=True, slots=True)
class SimConfig:
    """One simulated replica. ``drain_s`` bounds how long the run goes on after the last
    arrival; requests still unfinished then count as misses. ``window_s`` is the accounting
    window (the platform's minute)."""

    policy: str = "laser"
    gpu: str = "a100"
    model: str = "llama3-8b"
    block_size: int = 16
    max_num_batched_tokens: int = DEFAULT_BUDGET
    long_prefill_chunk: int = DEFAULT_BUDGET
    max_num_seqs: int = 256
    max_waiting: int = 100_000
    contracts: Contracts = field(default_factory=Contracts)
    laser: LaserPolicyConfig | None = None  # the laser policy's thresholds; default
    ablations: LaserAblations | None = None  # laser's parts switched off; default all on
    layer_pause: bool = False  # laser's steps without hot work stop between layers for hot
    layer_decode_batching: bool = False  # relaxed decodes run part of the depth under hot's cap
    drain_s: float = 3600.0
    window_s: float = 60.0
    idle_tick_s: float = 0.005

    def __post_init__(self) -> None:
        if self.gpu not in GPUS:
            raise ValueError(f"unknown gpu {self.gpu!r}; known: {sorted(GPUS)}")
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r}; known: {sorted(MODELS)}")
        for name in ("drain_s", "window_s", "idle_tick_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")

    def scheduler_config(self) -> SchedulerConfig:
        return SchedulerConfig(
            max_num_batched_tokens=self.max_num_batched_tokens, max_num_seqs=self.max_num_seqs,
            max_model_len=MODELS[self.model].max_context,
            long_prefill_chunk=self.long_prefill_chunk, max_waiting=self.max_waiting)
