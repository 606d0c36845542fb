"""Request intake: a request's prompt as token ids (chat template applied), checked against the
model's vocabulary and context before the engine takes it. Touches no engine state, so the
async front runs it off the engine thread."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inference.errors import InvalidParameter, PromptTooLong
from inference.request import EngineRequest

from .grammar import GrammarMasks

if TYPE_CHECKING:
    from inference.loaders import LoadedModel


class PromptEncoder:
    """Encodes requests for one loaded model.

    Args:
        loaded: the model (its tokenizer and chat template; None tokenizer: token ids only).
        max_model_len: the longest prompt plus output the engine serves.
        grammar: the model's grammar masks (None: no tokenizer to constrain with).
    """

    def __init__(self, loaded: LoadedModel, max_model_len: int,
                 grammar: GrammarMasks | None) -> None:
        self.loaded, self.max_model_len, self.grammar = loaded, max_model_len, grammar
        self.vocab_size = loaded.config.vocab_size

    def encode(self, request: EngineRequest) -> list[int]:
        """The request's prompt token ids, checked against the context. Raises
        ``InvalidParameter``/``PromptTooLong``; a constraint is compiled here (cached)."""
        ids, param = self._prompt_ids(request)
        if not ids:
            raise InvalidParameter(param, f"'{param}' encodes to no tokens.")
        max_tokens, limit = request.sampling.max_tokens, self.max_model_len
        if len(ids) >= limit:
            raise PromptTooLong(param, len(ids), max_tokens, limit)
        if len(ids) + max_tokens > limit:
            raise PromptTooLong("max_tokens", len(ids), max_tokens, limit)
        if request.constraint is not None:  # compiled here, off the engine thread, cached
            self.grammar_for(request).compiler.compile(request.constraint)
        return ids

    def grammar_for(self, request: EngineRequest) -> GrammarMasks:
        """The grammar masks for a constrained request; InvalidParameter without them."""
        if self.grammar is None:
            assert request.constraint is not None
            raise InvalidParameter(request.constraint.param,
                                   "this model has no tokenizer to constrain its output with.")
        return self.grammar

    def _prompt_ids(self, request: EngineRequest) -> tuple[list[int], str]:
        """The prompt's ids and the parameter they came from."""
        if request.prompt_token_ids is not None:
            ids, vocab = list(request.prompt_token_ids), self.vocab_size
            if any(not isinstance(t, int) or not 0 <= t < vocab for t in ids):
                raise InvalidParameter("prompt", f"prompt token ids must lie in [0, {vocab}).")
            return ids, "prompt"
        tokenizer = self.loaded.tokenizer
        if tokenizer is None:
            raise InvalidParameter("prompt", "this model has no tokenizer; send token ids.")
        if request.messages is not None:
            return self._encode_chat(request.messages, request.tools), "messages"
        if request.prompt is not None:
            return tokenizer.encode(request.prompt), "prompt"
        raise InvalidParameter("prompt", "send a prompt, messages or prompt token ids.")

    def _encode_chat(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        from inference.tokenizer import ChatTemplateError

        if not isinstance(messages, list) or not messages:
            raise InvalidParameter("messages", "'messages' must be a non-empty list.")
        try:
            if tools:
                return self.loaded.encode_chat(messages, add_generation_prompt=True, tools=tools)
            return self.loaded.encode_chat(messages, add_generation_prompt=True)
        except ChatTemplateError as exc:
            raise InvalidParameter("messages", str(exc)) from exc
