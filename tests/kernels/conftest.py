"""Kernel tests run Triton kernels on CPU tensors through Triton's interpreter.

Triton picks "interpret" when a kernel is decorated, i.e. when ``kernels._triton.*`` is first
imported; ``kernels`` itself never imports Triton, so setting the variable here, at collection,
is early enough even when other test directories imported ``kernels`` before us.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.kernels.backend import use_backend  # noqa: E402


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture
def force_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    use_backend(monkeypatch, "triton", triton_interpret=True)


@pytest.fixture
def force_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    use_backend(monkeypatch, "reference")
