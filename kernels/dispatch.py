"""Backend choice for every public kernel: Triton on CUDA, the PyTorch reference elsewhere, and
on the CPU the model's fused C kernels (``kernels/_cpu``) where they build.

``LASER_KERNELS`` forces a backend:

- ``auto`` (default): Triton when the tensors are on CUDA and ``triton`` imports, else reference;
- ``triton``: always Triton (on CPU tensors this needs ``TRITON_INTERPRET=1`` set before the
  first Triton kernel is used: that is how the interpreter tests run the model end to end);
- ``native``: the CPU model path runs the C kernels of ``kernels/_cpu`` (an error if they do not
  build here); ``auto`` uses them on CPU tensors whenever they build;
- ``reference``: always the PyTorch reference.

The variable is read on every call (a dict lookup) so tests can flip it with ``monkeypatch``.
Triton itself is imported only when a Triton kernel is first needed: Triton decides between
compiling and interpreting when a kernel is *decorated*, so importing ``kernels`` must not
decorate anything.
"""

from __future__ import annotations

import functools
import os

import torch

BACKENDS = ("auto", "triton", "native", "reference")
ENV_VAR = "LASER_KERNELS"


def backend() -> str:
    """The backend forced by ``LASER_KERNELS`` (``auto`` when unset); fails on a bad value."""
    value = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if value not in BACKENDS:
        raise ValueError(f"{ENV_VAR}={value!r}: expected one of {', '.join(BACKENDS)}")
    return value


@functools.cache
def triton_available() -> bool:
    """Whether ``import triton`` works here (tried once, on first need)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def use_triton(tensor: torch.Tensor) -> bool:
    """Whether a call whose main input is ``tensor`` should run the Triton kernel."""
    mode = backend()
    if mode == "reference":
        return False
    if mode == "triton":
        if not triton_available():
            raise RuntimeError(f"{ENV_VAR}=triton but triton does not import")
        if not tensor.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError(
                f"{ENV_VAR}=triton on {tensor.device} tensors needs TRITON_INTERPRET=1 "
                "set before the first Triton kernel is used"
            )
        return True
    return tensor.is_cuda and triton_available()


def use_native(tensor: torch.Tensor) -> bool:
    """Whether the model's CPU layers should run on the C kernels (``kernels/_cpu``) for a
    forward whose activations are ``tensor``."""
    mode = backend()
    if tensor.device.type != "cpu" or mode in ("reference", "triton"):
        return False
    from kernels._cpu import library

    if library() is None:
        if mode == "native":
            raise RuntimeError(f"{ENV_VAR}=native but the CPU kernels do not build here "
                               "(see the warning above)")
        return False
    return True
