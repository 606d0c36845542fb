"""Per-request output state: detokenisers, seeds, usage, and the deltas a step produces."""

from __future__ import annotations

from dataclasses import dataclass, field

from inference.request import Delta, EngineRequest, Tier, TierChange
from inference.sequence import FINISH_REASONS, Sequence, SequenceStatus
from inference.tokenizer import Detokenizer, Tokenizer


@dataclass(slots=True)
class Choice:
    """One choice of a request: its sequence and its detokeniser."""

    seq: Sequence
    detok: Detokenizer | None
    finish_reason: str | None = None
    cached_tokens: int = 0

    @property
    def done(self) -> bool:
        return self.finish_reason is not None


@dataclass(slots=True)
class RequestState:
    request: EngineRequest
    prompt_token_ids: list[int]
    seed: int
    choices: list[Choice] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return all(c.done for c in self.choices)


def make_state(request: EngineRequest, prompt_ids: list[int], seqs: list[Sequence], seed: int,
               tokenizer: Tokenizer | None) -> RequestState:
    stop = request.sampling.stop
    choices = [Choice(seq, Detokenizer(tokenizer, stop) if tokenizer is not None else None)
               for seq in seqs]
    return RequestState(request, prompt_ids, seed, choices)


def token_delta(state: RequestState, choice: Choice, token: int, now: float,
                logprob: float | None, top: dict[int, float] | None,
                tier_change: TierChange | None) -> tuple[Delta, bool]:
    """The delta for one new token; returns (delta, stopped_by_string).

    The sequence's status tells whether the scheduler already finished it (EOS, length);
    a stop string found by the detokeniser finishes it here.
    """
    seq = choice.seq
    if choice.cached_tokens == 0 and seq.num_cached_tokens:
        choice.cached_tokens = seq.num_cached_tokens
    text, stopped = "", False
    if choice.detok is not None:
        text = choice.detok.push(token)
        stopped = choice.detok.stopped is not None
    if stopped:
        choice.finish_reason = "stop"
    elif seq.is_finished:
        if choice.detok is not None:
            text += choice.detok.finish()
        choice.finish_reason = FINISH_REASONS[seq.status]
    sp = state.request.sampling
    delta = Delta(
        request_id=seq.request_id,
        index=seq.index,
        text=text,
        token_ids=(token,),
        token_times=(now,),
        tier=Tier(seq.tier),
        logprobs=(logprob,) if sp.logprobs and logprob is not None else None,
        top_logprobs=(top or {},) if sp.logprobs and sp.top_logprobs else None,
        finish_reason=choice.finish_reason,
        tier_change=tier_change,
        prompt_tokens=len(state.prompt_token_ids),
        completion_tokens=seq.num_output_tokens,
        cached_tokens=choice.cached_tokens,
    )
    return delta, stopped


def empty_delta(state: RequestState, choice: Choice, *, finish_reason: str | None = None,
                tier_change: TierChange | None = None) -> Delta:
    """A delta without tokens: an abort, a refusal, or a tier change between tokens."""
    seq = choice.seq
    if finish_reason is not None:
        choice.finish_reason = finish_reason
    return Delta(
        request_id=seq.request_id, index=seq.index, text="", token_ids=(), token_times=(),
        tier=Tier(seq.tier), finish_reason=finish_reason, tier_change=tier_change,
        prompt_tokens=len(state.prompt_token_ids), completion_tokens=seq.num_output_tokens,
        cached_tokens=choice.cached_tokens,
    )


def abort_deltas(state: RequestState) -> list[Delta]:
    """Final ``abort`` deltas for every unfinished choice."""
    return [empty_delta(state, c, finish_reason=FINISH_REASONS[SequenceStatus.FINISHED_ABORTED])
            for c in state.choices if not c.done]
