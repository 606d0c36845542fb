"""Every Triton kernel lowers to sm_90 PTX (no GPU needed): catches compiled-mode-only errors
the interpreter tests cannot see. See ``ptx_compile.py``; bf16 is the GPU's working dtype."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
def test_kernels_compile_to_sm90_ptx():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(HERE / "ptx_compile.py"), "bf16"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("ok ") == 8, done.stdout
