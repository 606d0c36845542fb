"""The dispatcher: reference on CPU by default, env var forces either backend."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels import dispatch


def test_auto_on_cpu_uses_reference(monkeypatch):
    monkeypatch.delenv("LASER_KERNELS", raising=False)
    assert dispatch.backend() == "auto"
    assert not dispatch.use_triton(torch.zeros(1))


def test_forced_backends(monkeypatch):
    monkeypatch.setenv("LASER_KERNELS", "reference")
    assert not dispatch.use_triton(torch.zeros(1))
    monkeypatch.setenv("LASER_KERNELS", "Triton")
    assert dispatch.use_triton(torch.zeros(1))  # conftest set TRITON_INTERPRET=1


def test_forced_triton_on_cpu_without_interpreter_fails_loudly(monkeypatch):
    monkeypatch.setenv("LASER_KERNELS", "triton")
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        dispatch.use_triton(torch.zeros(1))


def test_bad_value_fails_loudly(monkeypatch):
    monkeypatch.setenv("LASER_KERNELS", "cuda")
    with pytest.raises(ValueError, match="LASER_KERNELS"):
        dispatch.backend()


def test_importing_kernels_and_running_references_never_imports_triton():
    code = (
        "import sys, torch, kernels\n"
        "kernels.rms_norm(torch.randn(2, 8), torch.ones(8), 1e-6)\n"
        "kernels.silu_and_mul(torch.randn(2, 8))\n"
        "assert 'triton' not in sys.modules, 'triton imported'\n"
    )
    env = {"PYTHONPATH": ".", "PATH": "/usr/bin:/bin", "LASER_KERNELS": "auto"}
    repo = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=repo)


def test_tune_cpu_allocator_reports_success_on_glibc():
    from kernels import tune_cpu_allocator

    result = tune_cpu_allocator()
    assert isinstance(result, bool)
    if sys.platform.startswith("linux") and "glibc" in " ".join(__import__("platform").libc_ver()):
        assert result
