"""Engine configuration: one frozen value, checked on construction.

``inference/`` reads no environment: the platform builds this value from its settings table
(``laser_platform/settings/inference.py``, the ``LASER_*`` variables), the CLI from its flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from inference.scheduler import SchedulerConfig
from kernels.choice import MatmulMode, resolve_matmul_mode

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPES = tuple(_DTYPES)
# CPU matmul modes (``matmul_dtype``); None is the weights' own dtype.
MATMUL_DTYPES = ("auto", "float32", "bfloat16", "quant", "q8")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What the engine loads and how much it may batch.

    The defaults are the platform's (``laser_platform/settings/inference.py``) except where a
    bare engine has a reason to differ: see that module's docstring.

    Attributes:
        model: GGUF file or Hugging Face directory; None is the bundled SmolLM2 GGUF.
        chat_template: a Jinja file used instead of the model's own chat template (one that
            is missing or wrong); None keeps the model's.
        device: ``cpu`` or ``cuda`` (``cuda:N``).
        dtype: ``float32``/``bfloat16``/``float16`` for weights and activations; None picks
            float32 on CPU and bfloat16 on CUDA. On CPU, bfloat16 is faster but not a safe
            default for small models: SmolLM2-135M's greedy answers degrade (see
            docs/benchmarks.md), so it is opt-in there.
        matmul_dtype: CPU only: ``bfloat16`` runs the layers' projections of a float32 model
            on the CPU's bfloat16 units (mixed precision: half the weight bytes, float32
            everywhere else, the LM head's best logits rescored in float32); None or
            ``float32`` keeps them exact; ``quant`` multiplies the GGUF's own quantized
            blocks (Q4_0/Q4_1/Q5_x/Q8_0/Q4_K-Q6_K; a weight without them quantised to Q8_0)
            with activations
            quantised per block to int8 in two parts (``kernels._cpu.quant``); ``q8`` with
            one part in decode steps, as llama.cpp does (faster in large batches, but it
            changes answers: docs/engine.md);
            ``auto`` keeps both the quantized blocks and the bfloat16 packs where the CPU has
            both paths (the quantized one: the C kernels with AVX2 or better; bfloat16:
            native matmuls, AMX or AVX512-BF16) and runs each step on the side that a
            calibration at load found faster on this machine for its kind and row band
            (docs/engine.md, "Which kernels"); with one of the two paths it is that one, with
            neither
            float32 (``bfloat16`` falls back to float32 there too:
            ``kernels.pack_linear_weight`` packs nothing oneDNN cannot run). The engine's
            default is exact; the platform serves with ``auto`` (docs/engine.md).
        quant_max_rows: ``auto`` only: a fixed crossover instead of the calibrated one: the
            most tokens a step may have to run on the quantized blocks; larger steps run on
            the bfloat16 packs. None (default): calibrated per kind and band at load.
        kv_cache_dtype: dtype of the paged KV cache; None is ``dtype`` on CUDA, on CPU float32
            under the exact ``matmul_dtype`` (None, ``float32``) and float16 under the others
            (the attention computes in float32 either way; at 64 streams a decode step reads
            more cache than weights, and float16 halves it: docs/engine.md, "KV cache").
        block_size: tokens per KV block.
        kv_memory_mb: KV-cache budget; the number of blocks follows from the model's
            ``kv_bytes_per_block``. It is allocated (and zeroed) when the engine starts, so a
            bare engine takes 256 MB (~5,800 tokens of SmolLM2's float32 KV, 45 KiB a token;
            twice as many in float16); the platform serves with 2 GiB.
        max_num_batched_tokens: token budget of one step (prefill chunks plus decodes).
        max_num_seqs: most sequences running at once.
        max_model_len: longest prompt + output; None is the model's context.
        long_prefill_chunk: most prompt tokens one sequence advances per step; None is the
            whole token budget.
        policy: scheduler name in ``inference.scheduler.POLICIES``.
        max_waiting: queue bound past which requests are refused fast.
        overload_ttft_factor: ``laser`` only: refuse a hot request (503 with Retry-After) when
            its estimated TTFT exceeds this many times its contract's target; None keeps the
            policy's own default. 10: a request that will be late anyway is better served
            late than refused, until the queue is really runaway.
        prefix_caching: reuse cached KV blocks of identical (salted) prefixes.
        num_threads: torch intra-op threads; None uses every core.
        wide_threads: torch threads for a step of at least ``WIDE_STEP_TOKENS`` tokens (a
            prefill); None is ``num_threads``. A wide step's matmuls are long enough to gain
            from a core that decode steps leave to the serving loop (docs/engine.md, "On CPU").
        pool_spin_us: microseconds each worker of the C kernels' pool keeps polling for the
            next call before it sleeps (0: straight to sleep). A decode step makes about 200
            calls a few microseconds apart; a sleeping worker takes longer to wake than a
            one-stream call lasts, so without it the caller ran them alone (docs/engine.md,
            "On CPU"). Bounded: a busy machine costs at most this per call, never a spin.
        layer_pause: let a policy that asks for it (``laser``) stop a step without hot work
            between two decoder layers when hot work arrives or falls due, run the hot step,
            then resume (docs/engine.md, "Layer pause").
        ignore_eos: tests and benchmarks only (no setting or API parameter reaches it): every
            request runs to ``max_tokens``, as if the model had no end-of-sequence token
            (the storm tests, docs/faults.md).
    """

    model: str | None = None
    chat_template: str | None = None
    device: str = "cpu"
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    matmul_dtype: str | None = None
    quant_max_rows: int | None = None
    block_size: int = 16
    kv_memory_mb: float = 256.0
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 128
    max_model_len: int | None = None
    long_prefill_chunk: int | None = None
    policy: str = "laser"
    max_waiting: int = 1024
    overload_ttft_factor: float | None = 10.0
    prefix_caching: bool = True
    num_threads: int | None = None
    wide_threads: int | None = None
    pool_spin_us: int = 25
    layer_pause: bool = True
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {self.device!r}")
        for name in ("dtype", "kv_cache_dtype"):
            value = getattr(self, name)
            if value is not None and value not in _DTYPES:
                raise ValueError(f"{name} must be one of {sorted(_DTYPES)}, got {value!r}")
        for name in ("block_size", "max_num_batched_tokens", "max_num_seqs", "max_waiting"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("quant_max_rows", "pool_spin_us"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be at least 0, got {value}")
        for name in ("max_model_len", "long_prefill_chunk", "num_threads", "wide_threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1 (or unset), got {value}")
        if self.matmul_dtype is not None and self.matmul_dtype not in MATMUL_DTYPES:
            raise ValueError(f"matmul_dtype must be one of {MATMUL_DTYPES}, got "
                             f"{self.matmul_dtype!r}")
        factor = self.overload_ttft_factor
        if factor is not None and not factor >= 1:
            raise ValueError(f"overload_ttft_factor must be at least 1, got {factor}")
        if not self.kv_memory_mb > 0:
            raise ValueError(f"kv_memory_mb must be positive, got {self.kv_memory_mb}")
        chunk = self.long_prefill_chunk
        if chunk is not None and chunk > self.max_num_batched_tokens:
            raise ValueError("long_prefill_chunk cannot exceed max_num_batched_tokens")
        from inference.scheduler import POLICIES  # late: policies may register after import

        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; known: {sorted(POLICIES)}")

    # ---- derived values ------------------------------------------------------------------
    @property
    def torch_dtype(self) -> torch.dtype:
        if self.dtype is not None:
            return _DTYPES[self.dtype]
        return torch.float32 if self.device == "cpu" else torch.bfloat16

    @property
    def torch_kv_dtype(self) -> torch.dtype:
        if self.kv_cache_dtype is not None:
            return _DTYPES[self.kv_cache_dtype]
        if self.device != "cpu":
            return self.torch_dtype
        exact = self.matmul_dtype in (None, "float32") or self.torch_dtype != torch.float32
        return torch.float32 if exact else torch.float16

    @property
    def matmul_mode(self) -> MatmulMode:
        """The mode to pack CPU projections for (``kernels.MatmulMode``), resolved against
        this machine once: ``AUTO`` only where both the quantized and the bfloat16 matmuls
        serve; ``OWN`` (the weights' dtype) off the CPU and for a model that is not float32."""
        requested = MatmulMode.OWN if self.matmul_dtype in (None, "float32") \
            else MatmulMode(self.matmul_dtype)
        cpu = self.device == "cpu"
        both = requested is MatmulMode.AUTO and cpu
        import kernels

        return resolve_matmul_mode(requested, self.torch_dtype, cpu,
                                   quant=both and kernels.quant_supported(),
                                   bf16=both and kernels.bf16_matmul_supported())

    def num_blocks(self, kv_bytes_per_block: int) -> int:
        """KV blocks that fit the memory budget (at least one)."""
        return max(1, int(self.kv_memory_mb * 2**20) // kv_bytes_per_block)

    def model_len(self, model_context: int) -> int:
        """Effective ``max_model_len``: the configured one, which may not exceed the model's."""
        if self.max_model_len is None:
            return model_context
        if self.max_model_len > model_context:
            raise ValueError(f"max_model_len {self.max_model_len} exceeds the model's context "
                             f"of {model_context} tokens")
        return self.max_model_len

    def policy_options(self, layers: int) -> dict[str, Any]:
        """``laser``'s options: the layers a forward can pause between (layer pause), and the
        overload factor when the configuration sets one."""
        if self.policy != "laser":
            return {}
        options: dict[str, Any] = {"pause_layers": layers if self.layer_pause else 0}
        if self.overload_ttft_factor is not None:
            from inference.scheduler import LaserPolicyConfig

            options["policy_config"] = LaserPolicyConfig(
                overload_ttft_factor=self.overload_ttft_factor)
        return options

    def scheduler_config(self, model_context: int) -> SchedulerConfig:
        return SchedulerConfig(
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            max_model_len=self.model_len(model_context),
            long_prefill_chunk=self.long_prefill_chunk or self.max_num_batched_tokens,
            max_waiting=self.max_waiting,
        )
