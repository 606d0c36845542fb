"""Engine statistics: a plain value the web side can serialise (``to_dict``/``from_dict``)."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from inference.request import Tier
from inference.scheduler import SchedulingPolicy

THROUGHPUT_WINDOW_S = 10.0


@dataclass(frozen=True, slots=True)
class EngineStats:
    """A snapshot of the engine.

    ``kv_fragmentation`` is the fraction of allocated KV slots that hold no token (the unused
    tail of each sequence's last block, plus blocks reserved for tokens not computed yet).
    ``tokens_per_s`` counts generated tokens over the last ``THROUGHPUT_WINDOW_S`` seconds.
    ``cpu_contention``: how many times longer the engine's threads take than with the cores
    to themselves (``inference.engine.contention``; 1 where it is not measured).
    """

    running: dict[str, int] = field(default_factory=dict)   # per tier
    waiting: dict[str, int] = field(default_factory=dict)   # per tier (preempted included)
    num_blocks: int = 0
    used_blocks: int = 0
    cached_free_blocks: int = 0
    kv_usage: float = 0.0
    kv_fragmentation: float = 0.0
    tokens_per_s: float = 0.0
    num_preemptions: int = 0
    last_step_s: float = 0.0
    mean_step_s: float = 0.0
    num_steps: int = 0
    cpu_contention: float = 1.0
    ready: bool = True
    max_model_len: int = 0  # longest prompt + output the engine takes (0: not known)
    max_prompt_bytes: int = 0  # a prompt longer than this can never fit (0: no bound known)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EngineStats:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


class StepMeter:
    """Step times and generated tokens over a sliding window."""

    def __init__(self, window_s: float = THROUGHPUT_WINDOW_S) -> None:
        self.window_s = window_s
        self._events: deque[tuple[float, int]] = deque()
        self.num_steps = 0
        self.last_step_s = 0.0
        self._total_step_s = 0.0

    def record(self, now: float, step_s: float, new_tokens: int) -> None:
        self.num_steps += 1
        self.last_step_s = step_s
        self._total_step_s += step_s
        if new_tokens:
            self._events.append((now, new_tokens))
        self._trim(now)

    def tokens_per_s(self, now: float) -> float:
        self._trim(now)
        if not self._events:
            return 0.0
        return sum(n for _, n in self._events) / self.window_s

    @property
    def mean_step_s(self) -> float:
        return self._total_step_s / self.num_steps if self.num_steps else 0.0

    def _trim(self, now: float) -> None:
        while self._events and self._events[0][0] < now - self.window_s:
            self._events.popleft()


def max_token_bytes(tokenizer: Any) -> int:
    """Bytes of the longest vocabulary entry (byte-level BPE: one character a byte), 0 when
    there is no tokenizer to ask."""
    if tokenizer is None:
        return 0
    vocab = tokenizer.backend.get_vocab(with_added_tokens=True)
    return max((len(token.encode()) for token in vocab), default=0)


def kv_fragmentation(scheduler: SchedulingPolicy) -> float:
    """Allocated slots not holding a computed token, over all allocated slots.

    Shared blocks (forks, prefix hits) count once, with the most tokens any holder wrote.
    """
    bs = scheduler.kv.block_size
    filled: dict[int, int] = {}
    for seq in scheduler.in_flight():
        for i, block in enumerate(seq.block_ids):
            held = min(bs, max(0, seq.num_computed_tokens - i * bs))
            if held > filled.get(block, -1):
                filled[block] = held
    if not filled:
        return 0.0
    return 1.0 - sum(filled.values()) / (len(filled) * bs)


def per_tier(seqs: list) -> dict[str, int]:
    counts = {t.value: 0 for t in Tier}
    for seq in seqs:
        counts[Tier(seq.tier).value] += 1
    return counts


def engine_stats(scheduler: SchedulingPolicy, meter: StepMeter,
                 cpu_contention: float) -> EngineStats:
    """The engine's figures now, from its scheduler, step meter and contention factor."""
    kv = scheduler.kv.stats()
    return EngineStats(
        running=per_tier(scheduler.in_flight()), waiting=per_tier(scheduler.waiting),
        num_blocks=kv.num_blocks, used_blocks=kv.used_blocks,
        cached_free_blocks=kv.cached_free_blocks, kv_usage=kv.usage,
        kv_fragmentation=kv_fragmentation(scheduler),
        tokens_per_s=meter.tokens_per_s(time.time()),
        num_preemptions=scheduler.num_preemptions, last_step_s=meter.last_step_s,
        mean_step_s=meter.mean_step_s, num_steps=meter.num_steps,
        cpu_contention=cpu_contention,
    )
