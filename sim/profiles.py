"""Hardware and model profiles for the simulator: shapes, memory, bandwidth, and where the
measured operator timings live.

Two profiles are calibrated on measured operator timings (Vidur's profiling CSVs):
Llama-2-7B on H100 and Llama-3-8B on A100 (and Llama-2-7B on A100). Any other model/GPU pair
gets a roofline profile computed from the shapes and the GPU's peak numbers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    num_layers: int
    hidden: int
    num_heads: int
    num_kv_heads: int
    ffn: int
    vocab: int
    max_context: int
    num_params: float
    dtype_bytes: int = 2

    @property
    def head_dim(self) -> int:
        return self.hidden // self.num_heads

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer for one token."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def weight_bytes(self) -> float:
        return self.num_params * self.dtype_bytes


@dataclass(frozen=True, slots=True)
class GPUSpec:
    name: str
    memory_bytes: float
    bandwidth: float  # bytes/s
    flops: float  # dense bf16 FLOP/s


MODELS = {
    "llama2-7b": ModelSpec("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096, 6.74e9),
    "llama3-8b": ModelSpec("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, 8.03e9),
    "mistral-7b": ModelSpec("mistral-7b", 32, 4096, 32, 8, 14336, 32000, 8192, 7.24e9),
    "llama2-13b": ModelSpec("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096, 13.0e9),
}

GPUS = {
    "a100": GPUSpec("a100", 80 * GIB, 2.039e12, 312e12),
    "h100": GPUSpec("h100", 80 * GIB, 3.35e12, 989e12),
    "l40s": GPUSpec("l40s", 48 * GIB, 0.864e12, 362e12),
    "h200": GPUSpec("h200", 141 * GIB, 4.8e12, 989e12),
}

# (gpu, model) -> profiling CSV in the traces directory
PROFILED = {
    ("h100", "llama2-7b"): "profiling/h100_llama2_7b_mlp.csv",
    ("a100", "llama2-7b"): "profiling/a100_llama2_7b_mlp.csv",
    ("a100", "llama3-8b"): "profiling/a100_llama3_8b_mlp.csv",
}


def traces_dir() -> Path:
    """``$LASER_TRACES_DIR``, else ``../shared/traces`` next to the repository root."""
    env = os.environ.get("LASER_TRACES_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2].parent / "shared" / "traces"


def kv_capacity_tokens(model: ModelSpec, gpu: GPUSpec, utilization: float = 0.9,
                       activation_bytes: float = 2 * GIB) -> int:
    """Tokens of KV cache that fit: GPU memory share minus weights and activations."""
    free = gpu.memory_bytes * utilization - model.weight_bytes - activation_bytes
    if free <= 0:
        raise ValueError(f"{model.name} does not fit on {gpu.name}")
    return int(free // model.kv_bytes_per_token)
