"""The engine's book of requests: each request's output state by id and each choice by
sequence id, and the deltas a step's plan and sampled tokens make of them. The engine calls it
under its lock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from inference.request import Delta
from inference.scheduler import StepPlan
from inference.sequence import SequenceStatus

from .grammar import GrammarMasks
from .outputs import Choice, RequestState, empty_delta, token_delta
from .sampler import SamplerOutput, SamplingRow


class RequestBook:
    """``requests`` (id -> state) and ``choices`` (sequence id -> (state, choice)) of the
    requests the engine holds; ``grammar``, when set, tracks the constrained ones."""

    def __init__(self, grammar: GrammarMasks | None) -> None:
        self.grammar = grammar
        self.requests: dict[str, RequestState] = {}
        self.choices: dict[str, tuple[RequestState, Choice]] = {}

    def add(self, state: RequestState) -> None:
        self.requests[state.request.request_id] = state
        for choice in state.choices:
            self.choices[choice.seq.seq_id] = (state, choice)

    def forget(self, state: RequestState) -> None:
        self.requests.pop(state.request.request_id, None)
        for choice in state.choices:
            self.choices.pop(choice.seq.seq_id, None)
        if state.request.constraint is not None and self.grammar is not None:
            self.grammar.remove(c.seq.seq_id for c in state.choices)

    def sampling_row(self, seq_id: str) -> SamplingRow:
        """What the sampler needs of a sequence's next token."""
        state, choice = self.choices[seq_id]
        seq = choice.seq
        return SamplingRow(state.request.sampling, state.seed, seq.index, seq.num_output_tokens,
                           tuple(seq.output_token_ids) if _penalised(state) else ())

    def token_deltas(self, plan: StepPlan, seq_ids: list[str], out: SamplerOutput, now: float,
                     finish: Callable[[str, SequenceStatus], None]) -> list[Delta]:
        """A delta per sampled sequence still running (``seq_ids``, in ``out``'s order); a
        stop string ends its sequence through ``finish`` (the scheduler's)."""
        changes = dict(plan.tier_changes)
        deltas = []
        for j, seq_id in enumerate(seq_ids):
            entry = self.choices.get(seq_id)
            if entry is None or entry[1].done:
                continue  # aborted while the forward ran
            state, choice = entry
            if self.grammar is not None and self.grammar.cut_short(seq_id) and \
                    choice.seq.status is SequenceStatus.FINISHED_STOPPED:
                choice.seq.status = SequenceStatus.FINISHED_LENGTH  # never reported as valid
            token = choice.seq.output_token_ids[-1]
            logprob = out.logprobs[j] if out.logprobs is not None else None
            top = out.top_logprobs[j] if out.top_logprobs is not None else None
            delta, stopped = token_delta(state, choice, token, now, logprob, top,
                                         changes.get(seq_id))
            if stopped and not choice.seq.is_finished:
                finish(seq_id, SequenceStatus.FINISHED_STOPPED)
            deltas.append(delta)
            if state.done:
                self.forget(state)
        return deltas

    def refusals(self, plan: StepPlan) -> list[Delta]:
        """The final deltas of the sequences the plan refused."""
        deltas = []
        for seq_id, reason in plan.refused:
            entry = self.choices.get(seq_id)
            if entry is not None and not entry[1].done:
                state, choice = entry
                deltas.append(replace(empty_delta(state, choice, finish_reason="abort"),
                                      refusal=reason))
                if state.done:
                    self.forget(state)
        return deltas

    def tier_only(self, plan: StepPlan, delivered: set) -> list[Delta]:
        """Tier changes of sequences that produced no token this step still reach the client."""
        deltas = []
        for seq_id, change in plan.tier_changes:
            entry = self.choices.get(seq_id)
            if entry is None or entry[1].done:
                continue
            if (entry[1].seq.request_id, entry[1].seq.index) in delivered:
                continue
            deltas.append(empty_delta(entry[0], entry[1], tier_change=change))
        return deltas


def _penalised(state: RequestState) -> bool:
    sp = state.request.sampling
    return bool(sp.presence_penalty or sp.frequency_penalty)
