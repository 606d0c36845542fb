"""The dispatcher: reference on CPU by default, env var forces either backend."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels import dispatch
from kernels.choice import Backend
from kernels.dispatch import KernelEnv
from tests.kernels.backend import use_backend


def test_auto_on_cpu_uses_reference(monkeypatch):
    use_backend(monkeypatch, "auto")
    assert dispatch.backend() is Backend.AUTO
    assert not dispatch.use_triton(torch.zeros(1))


def test_forced_backends(monkeypatch):
    use_backend(monkeypatch, "reference")
    assert not dispatch.use_triton(torch.zeros(1))
    use_backend(monkeypatch, "Triton", triton_interpret=True)
    assert dispatch.use_triton(torch.zeros(1))


def test_forced_triton_on_cpu_without_interpreter_fails_loudly(monkeypatch):
    use_backend(monkeypatch, "triton", triton_interpret=False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        dispatch.use_triton(torch.zeros(1))


def test_the_environment_is_parsed_once_into_typed_values(monkeypatch):
    env = KernelEnv.from_environ({"LASER_KERNELS": " Native ", "TRITON_INTERPRET": "1"})
    assert env == KernelEnv(Backend.NATIVE, triton_interpret=True)
    assert KernelEnv.from_environ({}) == KernelEnv(Backend.AUTO, triton_interpret=False)
    monkeypatch.setattr(dispatch, "_env", None)
    monkeypatch.setenv("LASER_KERNELS", "reference")
    assert dispatch.backend() is Backend.REFERENCE
    monkeypatch.setenv("LASER_KERNELS", "triton")  # read once: a later change is not seen
    assert dispatch.backend() is Backend.REFERENCE
    assert dispatch.configure(KernelEnv(Backend.AUTO)).backend is Backend.REFERENCE
    assert dispatch.backend() is Backend.AUTO


def test_bad_value_fails_loudly():
    with pytest.raises(ValueError, match="LASER_KERNELS"):
        KernelEnv.from_environ({"LASER_KERNELS": "cuda"})


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
