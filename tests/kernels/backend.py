"""Setting the kernels' backend in a test: ``LASER_KERNELS`` is read once per process, so a
test replaces the parsed value (``kernels.dispatch.KernelEnv``) instead of the variable."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kernels import dispatch
from kernels.choice import Backend


def use_backend(monkeypatch: pytest.MonkeyPatch, name: str,
                triton_interpret: bool | None = None) -> None:
    """Run the rest of the test under backend ``name`` (undone with ``monkeypatch``)."""
    env = replace(dispatch.kernel_env(), backend=Backend.parse(name))
    if triton_interpret is not None:
        env = replace(env, triton_interpret=triton_interpret)
    monkeypatch.setattr(dispatch, "_env", env)
