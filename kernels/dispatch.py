"""Backend choice for every public kernel: Triton on CUDA, the PyTorch reference elsewhere, and
on the CPU the model's fused C kernels (``kernels/_cpu``) where they build.

``LASER_KERNELS`` forces a backend (:class:`kernels.choice.Backend`):

- ``auto`` (default): Triton when the tensors are on CUDA and ``triton`` imports, else reference;
- ``triton``: always Triton (on CPU tensors this needs ``TRITON_INTERPRET=1`` set before the
  first Triton kernel is used: that is how the interpreter tests run the model end to end);
- ``native``: the CPU model path runs the C kernels of ``kernels/_cpu`` (an error if they do not
  build here); ``auto`` uses them on CPU tensors whenever they build;
- ``reference``: always the PyTorch reference.

The environment is read once, on first need, into a :class:`KernelEnv`; :func:`configure`
replaces it (a process that sets its backend itself, tests). Triton itself is imported only
when a Triton kernel is first needed: Triton decides between compiling and interpreting when a
kernel is *decorated*, so importing ``kernels`` must not decorate anything.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from kernels.choice import Backend

ENV_VAR = "LASER_KERNELS"


@dataclass(frozen=True, slots=True)
class KernelEnv:
    """The kernels' environment knobs, parsed: the backend and whether Triton interprets."""

    backend: Backend = Backend.AUTO
    triton_interpret: bool = False

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> KernelEnv:
        """Parse ``LASER_KERNELS`` and ``TRITON_INTERPRET``; ValueError on a bad backend."""
        return cls(Backend.parse(environ.get(ENV_VAR, "auto"), ENV_VAR),
                   environ.get("TRITON_INTERPRET") == "1")


_env: KernelEnv | None = None


def kernel_env() -> KernelEnv:
    """The process's :class:`KernelEnv`, read from the environment the first time."""
    global _env
    if _env is None:
        _env = KernelEnv.from_environ(os.environ)
    return _env


def configure(env: KernelEnv) -> KernelEnv:
    """Set the process's :class:`KernelEnv`; returns the one it replaces."""
    global _env
    old, _env = kernel_env(), env
    return old


def backend() -> Backend:
    """The backend forced by ``LASER_KERNELS`` (``auto`` when unset)."""
    return kernel_env().backend


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
    env = kernel_env()
    if env.backend is Backend.REFERENCE:
        return False
    if env.backend is Backend.TRITON:
        if not triton_available():
            raise RuntimeError(f"{ENV_VAR}=triton but triton does not import")
        if not tensor.is_cuda and not env.triton_interpret:
            raise RuntimeError(
                f"{ENV_VAR}=triton on {tensor.device} tensors needs TRITON_INTERPRET=1 "
                "set before the first Triton kernel is used"
            )
        return True
    return tensor.is_cuda and triton_available()


def use_native(tensor: torch.Tensor) -> bool:
    """Whether the model's CPU layers should run on the C kernels (``kernels/_cpu``) for a
    forward whose activations are ``tensor``."""
    mode = kernel_env().backend
    if tensor.device.type != "cpu" or mode in (Backend.REFERENCE, Backend.TRITON):
        return False
    from kernels._cpu import library

    if library() is None:
        if mode is Backend.NATIVE:
            raise RuntimeError(f"{ENV_VAR}=native but the CPU kernels do not build here "
                               "(see the warning above)")
        return False
    return True
