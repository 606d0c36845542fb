from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Limits every policy respects.

    ``max_num_batched_tokens`` is the per-step token budget (prefill chunks plus decodes);
    ``long_prefill_chunk`` caps how many prompt tokens one sequence advances in a step;
    ``max_waiting`` bounds the queue, past which requests are refused fast.
    """

    max_num_batched_tokens: int = 512
    max_num_seqs: int = 64
    max_model_len: int = 8192
    long_prefill_chunk: int = 512
    max_waiting: int = 1024

    def __post_init__(self) -> None:
        for name in ("max_num_batched_tokens", "max_num_seqs", "max_model_len",
                     "long_prefill_chunk", "max_waiting"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.long_prefill_chunk > self.max_num_batched_tokens:
            raise ValueError("long_prefill_chunk cannot exceed max_num_batched_tokens")
