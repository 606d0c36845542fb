"""A sequence is one choice of a request as the scheduler tracks it.

A request with ``n`` choices becomes ``n`` sequences: choice 0 prefills the prompt, the others
fork from it once the prompt is computed and share its KV blocks (copy-on-write).
There is no "prefill phase" flag: ``num_computed_tokens`` against ``num_tokens`` says it all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from inference.request import ContractTargets, EngineRequest, Profile, Tier


class SequenceStatus(IntEnum):
    """Order matters: every status after PREEMPTED is finished."""

    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    FINISHED_STOPPED = 3
    FINISHED_LENGTH = 4
    FINISHED_ABORTED = 5

    @property
    def is_finished(self) -> bool:
        return self > SequenceStatus.PREEMPTED


FINISH_REASONS = {
    SequenceStatus.FINISHED_STOPPED: "stop",
    SequenceStatus.FINISHED_LENGTH: "length",
    SequenceStatus.FINISHED_ABORTED: "abort",
}


@dataclass(eq=False, slots=True)
class Sequence:
    seq_id: str
    request_id: str
    index: int
    prompt_token_ids: list[int]
    max_tokens: int
    tier: Tier
    arrival_time: float
    targets: ContractTargets = field(default_factory=ContractTargets)
    profile: Profile | None = None
    salt: str = ""
    tenant_id: str = ""
    in_contract: bool = True  # False: above the tenant's contracted rates (EngineRequest)
    deadline: float | None = None
    eos_token_ids: frozenset[int] = frozenset()
    parent_id: str | None = None
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0
    block_ids: list[int] = field(default_factory=list)
    status: SequenceStatus = SequenceStatus.WAITING
    asked_tier: Tier | None = None
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None
    num_preemptions: int = 0

    def __post_init__(self) -> None:
        if self.asked_tier is None:
            self.asked_tier = self.tier

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status.is_finished

    @property
    def is_prefilling(self) -> bool:
        """True while it still has more than one token to compute (prompt or recompute)."""
        return self.num_tokens - self.num_computed_tokens > 1

    @property
    def remaining_output(self) -> int:
        return self.max_tokens - len(self.output_token_ids)

    @property
    def expected_output_left(self) -> int:
        """Output tokens the scheduler plans for: the profile's expectation (at most
        ``max_tokens``; the default profile expects all of them) less those produced, never
        below one while the sequence runs."""
        expected = self.max_tokens if self.profile is None else min(
            self.max_tokens, self.profile.expected_output_tokens)
        return max(expected - len(self.output_token_ids), min(1, self.remaining_output))

    def token_at(self, pos: int) -> int:
        n = len(self.prompt_token_ids)
        return self.prompt_token_ids[pos] if pos < n else self.output_token_ids[pos - n]

    def tokens(self, start: int, stop: int) -> list[int]:
        n = len(self.prompt_token_ids)
        if stop <= n:
            return self.prompt_token_ids[start:stop]
        if start >= n:
            return self.output_token_ids[start - n:stop - n]
        return self.prompt_token_ids[start:] + self.output_token_ids[:stop - n]


def sequences_from_request(
    request: EngineRequest, prompt_token_ids: list[int], eos_token_ids: frozenset[int] = frozenset()
) -> list[Sequence]:
    """Make the request's ``n`` sequences; choices 1.. fork from choice 0 after its prefill."""
    sp = request.sampling
    profile = request.profile or Profile.for_tier(
        request.tier, len(prompt_token_ids), sp.max_tokens)
    eos = frozenset() if sp.ignore_eos else eos_token_ids | frozenset(sp.stop_token_ids)
    parent = f"{request.request_id}-0"
    return [
        Sequence(
            seq_id=f"{request.request_id}-{i}",
            request_id=request.request_id,
            index=i,
            prompt_token_ids=list(prompt_token_ids),
            max_tokens=sp.max_tokens,
            tier=request.tier,
            arrival_time=request.arrival_time,
            targets=request.targets,
            profile=profile,
            salt=request.cache_salt or "",
            tenant_id=request.tenant_id,
            in_contract=request.in_contract,
            deadline=request.effective_deadline(),
            eos_token_ids=eos,
            parent_id=None if i == 0 else parent,
        )
        for i in range(sp.n)
    ]
