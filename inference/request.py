"""What a caller hands the engine, and what it gets back.

These are plain values: the platform builds them from a tenant's contract and an API request,
the simulator builds them from a trace. Nothing here holds tensors or Django objects.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from enum import StrEnum

from inference.errors import InvalidParameter

MAX_STOP_STRINGS = 4
MAX_STOP_LENGTH = 256
MAX_N = 16
MAX_TOP_LOGPROBS = 20
SEED_RANGE = (-(2**63), 2**63 - 1)


class Tier(StrEnum):
    """Service tier; the strings are the ones the platform stores and the API accepts."""

    HOT = "hot"
    WARM = "warm"
    COLD = "cold"

    @property
    def rank(self) -> int:
        """0 for the most urgent tier. Lower rank preempts higher rank."""
        return _TIER_RANK[self]


_TIER_RANK = {Tier.HOT: 0, Tier.WARM: 1, Tier.COLD: 2}


def _check_number(param: str, value: object, lo: float, hi: float, *, integer=False) -> None:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise InvalidParameter(param, f"'{param}' must be a {'integer' if integer else 'number'}.")
    if not math.isfinite(value) or not lo <= value <= hi:
        raise InvalidParameter(param, f"'{param}' must be between {lo} and {hi}, got {value}.")


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to pick tokens, and when to stop. Invalid values raise ``InvalidParameter``.

    ``temperature == 0`` is greedy; ``top_k == 0`` disables top-k; a ``seed`` makes a request's
    samples reproducible whatever else shares the batch.
    """

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    n: int = 1
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    logprobs: bool = False
    top_logprobs: int = 0

    def __post_init__(self) -> None:
        _check_number("max_tokens", self.max_tokens, 1, 2**31 - 1, integer=True)
        _check_number("temperature", self.temperature, 0.0, 2.0)
        _check_number("top_p", self.top_p, 0.0, 1.0)
        if self.top_p == 0.0:
            raise InvalidParameter("top_p", "'top_p' must be greater than 0.")
        _check_number("top_k", self.top_k, 0, 2**31 - 1, integer=True)
        _check_number("presence_penalty", self.presence_penalty, -2.0, 2.0)
        _check_number("frequency_penalty", self.frequency_penalty, -2.0, 2.0)
        _check_number("n", self.n, 1, MAX_N, integer=True)
        if self.seed is not None:
            _check_number("seed", self.seed, *SEED_RANGE, integer=True)
        _check_number("top_logprobs", self.top_logprobs, 0, MAX_TOP_LOGPROBS, integer=True)
        if self.top_logprobs and not self.logprobs:
            raise InvalidParameter("top_logprobs", "'top_logprobs' requires 'logprobs' = true.")
        self._check_stop()

    def _check_stop(self) -> None:
        if not isinstance(self.stop, tuple) or len(self.stop) > MAX_STOP_STRINGS:
            raise InvalidParameter("stop", f"'stop' takes at most {MAX_STOP_STRINGS} strings.")
        for s in self.stop:
            if not isinstance(s, str) or not s or len(s) > MAX_STOP_LENGTH:
                raise InvalidParameter(
                    "stop", f"each 'stop' entry must be a non-empty string of at most "
                    f"{MAX_STOP_LENGTH} characters.")
        for t in self.stop_token_ids:
            _check_number("stop_token_ids", t, 0, 2**31 - 1, integer=True)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


CONSTRAINT_KINDS = ("json_object", "json_schema", "tool_calls")


@dataclass(frozen=True, slots=True)
class Constraint:
    """What a request's output must match; the engine compiles it into a token mask per step.

    ``kind``: ``json_object`` (any JSON object), ``json_schema`` (``schema``, JSON text) or
    ``tool_calls`` (``schema``: a JSON array of ``{"name", "parameters"}``; the output is one
    ``<tool_call>`` block per call, several when ``parallel``). ``strict``: unknown schema
    keywords are refused instead of ignored. ``param`` is the API parameter a grammar that does
    not compile is reported on.
    """

    kind: str
    schema: str = ""
    strict: bool = False
    parallel: bool = False
    param: str = "response_format"

    def __post_init__(self) -> None:
        if self.kind not in CONSTRAINT_KINDS:
            raise InvalidParameter(self.param, f"unknown constraint kind {self.kind!r}.")


@dataclass(frozen=True, slots=True)
class ContractTargets:
    """A tenant's contract for one tier, as plain numbers (seconds, tokens/s, fractions).

    Defaults are the design's table. The scheduler reads only the fields of the request's tier.
    """

    ttft_p99_s: float = 0.2
    tbt_p99_s: float = 0.1
    interruption_budget: float = 0.001
    demotable: bool = False
    priority_weight: float = 1.0
    warm_rate_tps: float = 20.0
    warm_band: float = 0.05
    warm_mean_ttft_s: float = 2.0
    cold_deadline_s: float = 4 * 3600.0
    cold_percentile: float = 99.0
    version: int | None = None

    def __post_init__(self) -> None:
        for name in ("ttft_p99_s", "tbt_p99_s", "priority_weight", "warm_rate_tps",
                     "warm_mean_ttft_s", "cold_deadline_s"):
            if not getattr(self, name) > 0:
                raise InvalidParameter(name, f"contract target '{name}' must be positive.")
        if not 0 <= self.warm_band < 1 or not 0 <= self.interruption_budget <= 1:
            raise InvalidParameter("warm_band", "contract fractions must lie in [0, 1).")


@dataclass(frozen=True, slots=True)
class Profile:
    """What the scheduler knows about a request's shape before running it."""

    time_sensitivity: float
    expected_output_tokens: int
    context_length: int
    error_tolerance: float = 0.0

    @property
    def compute_density(self) -> int:
        """Tokens the request is expected to cost: prompt plus expected output."""
        return self.context_length + self.expected_output_tokens

    @classmethod
    def for_tier(cls, tier: Tier, prompt_tokens: int, max_tokens: int) -> Profile:
        """Defaults derived from the tier when the caller gives no profile."""
        sensitivity = {Tier.HOT: 1.0, Tier.WARM: 0.5, Tier.COLD: 0.0}[tier]
        return cls(sensitivity, max_tokens, prompt_tokens, 0.0 if tier is Tier.HOT else 0.5)


@dataclass(slots=True)
class EngineRequest:
    """One generation request as the design's shared conventions describe it.

    Exactly one of ``prompt`` (raw text), ``messages`` (chat, rendered with the model's template)
    or ``prompt_token_ids`` is set. ``deadline`` is an absolute ``time.time()`` value; when None
    for a cold request the engine uses ``arrival_time + targets.cold_deadline_s``.
    ``cache_salt`` keeps one tenant's cached prefixes from serving another; it defaults to the
    tenant id. ``in_contract`` is False for a tenant's traffic above its contract's rates
    (the gateway marks it; docs/simulator.md, "In contract and excess"): the scheduler serves
    every tenant's in-contract work of a tier before any tenant's excess, and demotes,
    preempts and refuses excess first. ``constraint`` (None: free text) limits every
    sampled token to those its grammar allows; ``tools`` (function definitions: name,
    description, parameters) are shown to the model by its chat template.
    """

    request_id: str
    sampling: SamplingParams = field(default_factory=SamplingParams)
    prompt: str | None = None
    messages: list[dict] | None = None
    prompt_token_ids: list[int] | None = None
    tier: Tier = Tier.HOT
    tenant_id: str = ""
    targets: ContractTargets = field(default_factory=ContractTargets)
    profile: Profile | None = None
    cache_salt: str | None = None
    arrival_time: float = field(default_factory=time.time)
    deadline: float | None = None
    session_id: str | None = None
    in_contract: bool = True
    constraint: Constraint | None = None
    tools: list[dict] | None = None

    def __post_init__(self) -> None:
        given = [x is not None for x in (self.prompt, self.messages, self.prompt_token_ids)]
        if sum(given) != 1:
            raise InvalidParameter("prompt", "give exactly one of prompt, messages or token ids.")
        self.tier = Tier(self.tier)
        if self.cache_salt is None:
            self.cache_salt = self.tenant_id

    def effective_deadline(self) -> float | None:
        if self.deadline is not None:
            return self.deadline
        if self.tier is Tier.COLD:
            return self.arrival_time + self.targets.cold_deadline_s
        return None


@dataclass(frozen=True, slots=True)
class TierChange:
    """A request moved between tiers: demoted under hot pressure, promoted as slack ran out."""

    from_tier: Tier
    to_tier: Tier
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class Delta:
    """New output of one choice of a request since its previous delta.

    ``token_times`` holds one ``time.time()`` stamp per token in ``token_ids``. ``finish_reason``
    is set on a choice's last delta: ``stop``, ``length`` or ``abort``. ``refusal`` (with
    ``abort``) says why the engine refused a request it had admitted (overload: demoted, then
    past warm's bound) rather than ending it for another cause.
    """

    request_id: str
    index: int
    text: str
    token_ids: tuple[int, ...]
    token_times: tuple[float, ...]
    tier: Tier
    logprobs: tuple[float, ...] | None = None
    top_logprobs: tuple[dict[int, float], ...] | None = None
    finish_reason: str | None = None
    tier_change: TierChange | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    refusal: str | None = None
