"""Engine settings: the one table of the engine's variables (names, defaults, validation).

``LASER_ENGINE_CONFIG`` holds every ``inference.engine.config.EngineConfig`` field; the gateway
builds the engine's config from it (``apps.gateway.engine_client.engine_config``) and ``inference/``
reads no environment itself. The README's configuration table lists exactly these variables
(tests/laser_platform/test_config_table.py checks both ways).

Defaults are the platform's, chosen for ``make run`` on a CPU; ``EngineConfig``'s own defaults
are the same wherever the bare engine (CLI, benchmarks) has no reason to differ. On purpose they
differ in: the model (the bundled one by name here, None there), the device (``auto`` here),
``LASER_MATMUL_DTYPE`` (``auto`` here, exact float32 there), the thread counts (one core left
to the event loop here) and the KV memory (2 GiB here for 64 streams, 256 MB for a bare
engine: it is allocated at start).
"""

from __future__ import annotations

import os
from typing import Any

from laser_platform.settings._env import env

# Names that mean the bundled SmolLM2-135M-Instruct (EngineConfig's model=None).
BUNDLED_MODEL_NAMES = ("", "smollm2-135m-instruct", "smollm2", "default")
# The engine's accepted values (inference/engine/config.py: DTYPES, MATMUL_DTYPES and the
# scheduler's POLICIES); tests/apps/gateway/test_engine_config.py keeps the two lists equal.
DTYPES = ("float32", "bfloat16", "float16")
MATMUL_DTYPES = ("auto", "float32", "bfloat16", "quant", "q8")
POLICIES = ("laser", "fcfs")


def whole(raw: str) -> int:
    """An integer of at least 0 (``env``'s cast: a bad value names the variable)."""
    value = int(raw)
    if value < 0:
        raise ValueError("must be at least 0")
    return value


def count(raw: str) -> int:
    """A positive integer."""
    value = whole(raw)
    if value < 1:
        raise ValueError("must be at least 1")
    return value


def factor(raw: str) -> float:
    """A number of at least 1."""
    value = float(raw)
    if not value >= 1:
        raise ValueError("must be at least 1")
    return value


_CORES = len(os.sched_getaffinity(0))

# A name the engine knows (the bundled default) or a path to a GGUF / safetensors checkpoint.
LASER_MODEL: str = env("LASER_MODEL", "smollm2-135m-instruct")
# A Jinja chat template file used instead of the model's own (one missing or wrong).
LASER_CHAT_TEMPLATE: str | None = env("LASER_CHAT_TEMPLATE", None)
# "embedded": the engine runs on a thread of the serving process (the one-command default).
# "remote": web processes reach engine worker processes over the Redis channel layer.
# "ray": web processes reach the engine replicas of a Ray Serve deployment (docs/deploy.md).
LASER_ENGINE_MODE: str = env("LASER_ENGINE_MODE", "embedded",
                             choices=("embedded", "remote", "ray"))
# ray mode: the Ray cluster to join ("auto": the one this machine is part of) and the name of
# the Serve application `manage.py run_fleet` deployed.
LASER_RAY_ADDRESS: str = env("LASER_RAY_ADDRESS", "auto")
LASER_RAY_APP: str = env("LASER_RAY_APP", "laser")
# Name of the channel-layer group engine workers listen on in remote mode.
LASER_ENGINE_CHANNEL: str = env("LASER_ENGINE_CHANNEL", "laser-engine")
# "auto": CUDA when torch sees a GPU, else the CPU (resolved when the engine is built).
LASER_DEVICE: str = env("LASER_DEVICE", "auto", choices=("auto", "cpu", "cuda"))
# Weights and activations; unset: float32 on CPU (bfloat16 changes SmolLM2's greedy answers,
# docs/benchmarks.md), bfloat16 on CUDA.
LASER_DTYPE: str | None = env("LASER_DTYPE", None, choices=DTYPES)
# The paged KV cache; unset: on CPU float16 beside the approximate LASER_MATMUL_DTYPEs (auto, quant,
# q8, bfloat16) and float32 beside the exact one (float32), else LASER_DTYPE (docs/engine.md).
LASER_KV_CACHE_DTYPE: str | None = env("LASER_KV_CACHE_DTYPE", None, choices=DTYPES)
# CPU projections: "auto" keeps the GGUF's quantized blocks (int8 activations on VNNI/AVX2) and
# bfloat16 packs, and runs each step on the side this machine's own step times show faster at
# its width (which side wins where differs between CPUs); "quant", "q8", "bfloat16" force one;
# "float32" is the exact mode (equal to transformers); docs/engine.md, "Which kernels run a
# step".
LASER_MATMUL_DTYPE: str = env("LASER_MATMUL_DTYPE", "auto", choices=MATMUL_DTYPES)
# auto: a fixed crossover instead of the calibrated one, the widest step (in tokens) run on the
# quantized blocks (unset: calibrated at load).
LASER_QUANT_MAX_ROWS: int | None = env("LASER_QUANT_MAX_ROWS", None, count)
# KV memory: 64 streams of ~600 tokens fit twice over (SmolLM2's float16 KV is 30 layers x 2 x 3
# heads x 64 x 2 B = 22.5 KiB a token: 2 GiB hold ~93,000 tokens, ~46,600 in float32), allocated
# and zeroed at start.
LASER_KV_MEMORY_MB: int = env("LASER_KV_MEMORY_MB", 2048, count)
LASER_KV_BLOCK_SIZE: int = env("LASER_KV_BLOCK_SIZE", 16, count)
# Sequences one step may run: one key can hold 64 streams with room for a second tenant.
LASER_MAX_NUM_SEQS: int = env("LASER_MAX_NUM_SEQS", 128, count)
# Longest prompt + output; unset: the model's context (8,192 for SmolLM2), capped by what the
# KV pool holds (the engine states both at start), so a long prompt is served, not refused.
LASER_MAX_MODEL_LEN: int | None = env("LASER_MAX_MODEL_LEN", None, count)
# Token budget of one step (prefill chunks plus decodes).
LASER_MAX_BATCH_TOKENS: int = env("LASER_MAX_BATCH_TOKENS", 2048, count)
# Most prompt tokens one sequence advances per step; unset: the whole step budget.
LASER_LONG_PREFILL_CHUNK: int | None = env("LASER_LONG_PREFILL_CHUNK", None, count)
# Requests the engine queues past which it refuses new ones fast.
LASER_MAX_WAITING: int = env("LASER_MAX_WAITING", 1024, count)
# The engine's scheduling policy: "laser" keeps each tier's contract (hot reserve, demotion,
# borrowing, cold deadline pacing); "fcfs" is the plain fallback (inference/scheduler/fcfs.py).
LASER_POLICY: str = env("LASER_POLICY", "laser", choices=POLICIES)
# laser: a hot request that cannot start within its target is demoted to warm with notice; a
# request is refused (503 + Retry-After) only when the warm backlog ahead of it passes this many
# times the warm mean-TTFT target.
LASER_OVERLOAD_TTFT_FACTOR: float = env("LASER_OVERLOAD_TTFT_FACTOR", 10.0, factor)
# Reuse the KV blocks of a tenant's identical prompt prefixes.
LASER_PREFIX_CACHING: bool = env("LASER_PREFIX_CACHING", True, bool)
# laser: stop a step without hot work between two decoder layers when hot work arrives.
LASER_LAYER_PAUSE: bool = env("LASER_LAYER_PAUSE", True, bool)
# Torch threads of the engine's decode steps: every core but one, which the event loop (HTTP,
# SSE, WebSocket) keeps. OpenMP threads that lose their core to the serving loop stall every
# short matmul, and spinning ones collapse beside a CPU hog (docs/engine.md, "Threads").
# Laser's own C kernels run on their own pool of sleeping threads over every core instead.
LASER_THREADS: int = env("LASER_THREADS", max(1, _CORES - 1), count)
# Torch threads for wide steps (128 tokens and more: prefills): every core. Their matmuls are
# long enough that the event loop's short turns on a core cost little, so a second thread
# speeds them up (inference/engine/runner.py).
LASER_WIDE_THREADS: int = env("LASER_WIDE_THREADS", _CORES, count)
# Microseconds the C kernels' pool workers poll for the next call before they sleep (a decode
# step's ~200 calls come microseconds apart; waking a sleeper took longer than a one-stream call).
LASER_POOL_SPIN_US: int = env("LASER_POOL_SPIN_US", 25, whole)

# Every EngineConfig field, from the variables above ("auto" device resolved at build time).
LASER_ENGINE_CONFIG: dict[str, Any] = {
    "model": None if LASER_MODEL.lower() in BUNDLED_MODEL_NAMES else LASER_MODEL,
    "chat_template": LASER_CHAT_TEMPLATE,
    "device": LASER_DEVICE,
    "dtype": LASER_DTYPE,
    "kv_cache_dtype": LASER_KV_CACHE_DTYPE,
    "matmul_dtype": LASER_MATMUL_DTYPE,
    "quant_max_rows": LASER_QUANT_MAX_ROWS,
    "block_size": LASER_KV_BLOCK_SIZE,
    "kv_memory_mb": float(LASER_KV_MEMORY_MB),
    "max_num_batched_tokens": LASER_MAX_BATCH_TOKENS,
    "max_num_seqs": LASER_MAX_NUM_SEQS,
    "max_model_len": LASER_MAX_MODEL_LEN,
    "long_prefill_chunk": LASER_LONG_PREFILL_CHUNK,
    "policy": LASER_POLICY,
    "max_waiting": LASER_MAX_WAITING,
    "overload_ttft_factor": LASER_OVERLOAD_TTFT_FACTOR,
    "prefix_caching": LASER_PREFIX_CACHING,
    "num_threads": LASER_THREADS,
    "wide_threads": LASER_WIDE_THREADS,
    "pool_spin_us": LASER_POOL_SPIN_US,
    "layer_pause": LASER_LAYER_PAUSE,
    "ignore_eos": False,  # tests and benchmarks only: no setting or API parameter reaches it
}
