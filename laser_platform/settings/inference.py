"""Engine settings. Read by the web side and passed to ``inference/`` as plain values
(``inference/`` never imports Django settings itself)."""

from __future__ import annotations

import os

from laser_platform.settings._env import env

# A name the engine knows (the bundled default) or a path to a GGUF / safetensors checkpoint.
LASER_MODEL: str = env("LASER_MODEL", "smollm2-135m-instruct")
# "embedded": the engine runs on a thread of the serving process (the one-command default).
# "remote": web processes reach engine worker processes over the Redis channel layer.
LASER_ENGINE_MODE: str = env("LASER_ENGINE_MODE", "embedded", choices=("embedded", "remote"))
LASER_DEVICE: str = env("LASER_DEVICE", "auto", choices=("auto", "cpu", "cuda"))
LASER_KV_MEMORY_MB: int = env("LASER_KV_MEMORY_MB", 256, int)
LASER_KV_BLOCK_SIZE: int = env("LASER_KV_BLOCK_SIZE", 16, int)
LASER_MAX_NUM_SEQS: int = env("LASER_MAX_NUM_SEQS", 32, int)
LASER_MAX_MODEL_LEN: int = env("LASER_MAX_MODEL_LEN", 2048, int)
LASER_MAX_BATCH_TOKENS: int = env("LASER_MAX_BATCH_TOKENS", 2048, int)
# Torch threads of the engine's decode steps: every core but one, which the event loop (HTTP,
# SSE, WebSocket) keeps. OpenMP threads that lose their core to the serving loop stall every
# short matmul; on the 2-core development machine one sleeping thread held 215 tok/s end to end
# with a CPU hog beside the server, two spinning ones 80 (docs/benchmarks.md, docs/engine.md).
LASER_THREADS: int = env("LASER_THREADS", max(1, len(os.sched_getaffinity(0)) - 1), int)
# Torch threads for wide steps (128 tokens and more: prefills): every core. Their matmuls are
# long enough that the event loop's short turns on a core cost little, and a second thread made
# a 128-token forward 1.75x faster on the 2-core machine (inference/engine/runner.py).
LASER_WIDE_THREADS: int = env("LASER_WIDE_THREADS", len(os.sched_getaffinity(0)), int)
# CPU: "auto" runs the layers' matmuls in bfloat16 (float32 everywhere else) where the CPU has
# native bfloat16 units in decode steps (prefills stay float32), 1.3-1.5x faster decode with
# float32's greedy answers in bench/cpu_precision.py; "float32" is the exact mode (equal to
# transformers); docs/engine.md.
LASER_MATMUL_DTYPE: str = env("LASER_MATMUL_DTYPE", "auto",
                              choices=("auto", "float32", "bfloat16"))
# The engine's scheduling policy: "laser" keeps each tier's contract (hot reserve, demotion,
# borrowing, cold deadline pacing); "priority", "partitioned" and "fcfs" are the baselines.
LASER_POLICY: str = env("LASER_POLICY", "laser",
                        choices=("laser", "priority", "partitioned", "fcfs"))
# laser: refuse a hot request (503 + Retry-After) only when its estimated time to first token
# passes this many times its contract's target; below that it is served late, not refused.
LASER_OVERLOAD_TTFT_FACTOR: float = env("LASER_OVERLOAD_TTFT_FACTOR", 10.0, float)
# Name of the channel-layer group engine workers listen on in remote mode.
LASER_ENGINE_CHANNEL: str = env("LASER_ENGINE_CHANNEL", "laser-engine")
