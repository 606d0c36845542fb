"""A grammar's mask in the LM head (``kernels.backends.Packing.logits``): applied before the
screen, so the rescored tokens are the best *allowed* ones and the choice among them uses exact
logits, and applied after, so no forbidden token keeps a finite logit."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.kernels.test_linear import _unpack, needs_bf16


def _allowed_far_from_the_top(exact: torch.Tensor, keep: int) -> torch.Tensor:
    """Per row, only tokens ranked past 2 * SCREEN_TOP: the unmasked screen never rescores
    them."""
    order = exact.argsort(dim=-1, descending=True)
    allowed = torch.zeros_like(exact, dtype=torch.bool)
    allowed.scatter_(1, order[:, 130:130 + keep], True)
    return allowed


@pytest.mark.parametrize("packed", [False, pytest.param(True, marks=needs_bf16)])
@pytest.mark.parametrize("keep", [3, 100])
def test_masked_rows_are_exact_on_their_allowed_tokens(packed, keep):
    from tests.inference.engine.helpers import tiny_loaded

    model = tiny_loaded(seed=2).model
    head = model.embed_tokens if model.lm_head is None else model.lm_head
    hidden = torch.randn(5, head.shape[1], generator=torch.Generator().manual_seed(1))
    exact = F.linear(hidden, head)
    allowed = _allowed_far_from_the_top(exact, keep)
    allowed[4] = True  # an unconstrained row in the same batch
    _unpack(model)
    try:
        with torch.inference_mode():
            if packed:
                model.pack_linears(torch.bfloat16)
                assert model.packing.head_screen is not None
            got = model.compute_logits(hidden, allowed=allowed)
    finally:
        _unpack(model)
    assert torch.isneginf(got[~allowed]).all()
    best = exact.masked_fill(~allowed, float("-inf")).topk(min(keep, 16), dim=-1).indices
    torch.testing.assert_close(got.gather(1, best), exact.gather(1, best))
    assert torch.equal(got.argmax(-1), exact.masked_fill(~allowed, float("-inf")).argmax(-1))
