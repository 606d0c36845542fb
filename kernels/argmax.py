"""Greedy pick: each row's index of its largest value.

Math, per row of ``x`` (``[rows, n]``, float32): the first ``i`` with ``x[i]`` the row's
maximum, a NaN counting as larger than any number (``torch.argmax``'s answer). On CPU with
the C kernels it runs rows over their pool (``laser_argmax_rows``): the engine's decode steps
leave torch one thread, on which a 64-row step's logits (64 x 49,152) took 3.3 ms while the
pool's workers waited.
"""

from __future__ import annotations

import torch

from kernels.dispatch import use_native


def argmax_reference(x: torch.Tensor) -> torch.Tensor:
    """``torch.argmax`` over the last dimension (int64)."""
    return x.argmax(dim=-1)


def argmax(x: torch.Tensor) -> torch.Tensor:
    """Each row's argmax (int64 ``[rows]``), as :func:`argmax_reference`."""
    if (x.dim() == 2 and x.dtype == torch.float32 and x.is_contiguous() and x.shape[1] > 0
            and use_native(x)):
        from kernels import _cpu

        return _cpu.argmax_rows(x)
    return argmax_reference(x)
