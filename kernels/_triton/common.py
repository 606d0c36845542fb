"""Launcher helpers shared by the Triton ops."""

from __future__ import annotations

import functools

import torch
import triton


def next_pow2(n: int) -> int:
    return triton.next_power_of_2(max(int(n), 1))


def check_rows(name: str, t: torch.Tensor, ndim: int) -> None:
    """``t`` has ``ndim`` dims and a unit-stride last dim (other strides are passed through)."""
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dims, got shape {tuple(t.shape)}")
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name}: last dim must be contiguous, strides {t.stride()}")


def check_same_device(*tensors: torch.Tensor) -> None:
    devices = {t.device for t in tensors}
    if len(devices) != 1:
        raise ValueError(f"tensors on several devices: {sorted(map(str, devices))}")


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device; 4 for CPU (interpreter) tensors."""
    if device.type != "cuda":
        return 4
    return _sm_count(device.index if device.index is not None else torch.cuda.current_device())


def dot_precision(dtype: torch.dtype) -> str:
    """``tl.dot`` precision: full fp32 for fp32 inputs (TF32 would break the 1e-5 contract)."""
    return "ieee" if dtype == torch.float32 else "tf32"


LOG2E = 1.4426950408889634


def _patch_interpreter_loop_bounds() -> None:
    """Let Triton 3.6's interpreter take loop bounds loaded at run time.

    The interpreter holds scalars as 1-element numpy arrays and turns ``range`` bounds into
    ints with ``int(array)``, which numpy >= 2.4 refuses for arrays of ndim > 0; compiled
    kernels are unaffected. We re-patch ``__index__`` to read the single element instead.
    """
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "_laser_loop_bounds", False):
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    setattr(patched, "_laser_loop_bounds", True)  # marks the function (not a known attribute)
    interpreter._patch_lang_tensor = patched


if triton.knobs.runtime.interpret:
    _patch_interpreter_loop_bounds()
