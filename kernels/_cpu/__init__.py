"""Laser's C kernels for the CPU (``laser_cpu.c``, the attention ``laser_attention.c``, the
quantized matmul ``laser_quant.c`` and the thread pool ``laser_pool.c``): build once per machine,
load with ctypes.

The library is compiled on first use with the machine's C compiler (``CC``, default ``cc``)
into ``LASER_NATIVE_DIR`` (default ``~/.cache/laser/native``), under a name that hashes the
source, the flags and the CPU, so a changed source or another CPU builds afresh; a build writes
a temporary file and renames it, so processes starting together do not see half a library.
Where no compiler works, :func:`library` returns None and the model keeps the PyTorch path (a
warning says why); ``LASER_KERNELS=native`` makes that an error instead.

The wrappers take and return torch tensors; they check what the C code assumes (CPU,
contiguous, dtypes) and raise ``ValueError`` otherwise.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import subprocess
import tempfile
from pathlib import Path

import torch

log = logging.getLogger(__name__)

SOURCES = tuple(Path(__file__).with_name(n) for n in
                ("laser_cpu.c", "laser_attention.c", "laser_quant.c", "laser_qtiles.c",
                 "laser_qpack.c", "laser_pool.c", "laser_cpu.h", "laser_quant.h"))
# -fno-trapping-math: fast_exp's clamps become selects, so its loops vectorise (the same
# operations on each lane: the same bits); without it the SiLU and softmax loops ran scalar
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off",
         "-std=c11", "-fPIC", "-shared", "-pthread")
BUILD_TIMEOUT_S = 900  # a compiler process's limit
DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}  # float16: KV caches
KV_DTYPES = (torch.float32, torch.float16)

_i64, _f32, _ptr, _int = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p, ctypes.c_int
SIGNATURES = {
    "laser_add_rms_norm": (_ptr, _int, _ptr, _ptr, _f32, _i64, _i64, _ptr, _int),
    "laser_rope_write_kv": (_ptr, _int, _i64, _i64, _i64, _i64, _ptr, _ptr, _ptr, _ptr, _ptr,
                            _int, _ptr),
    "laser_paged_attention": (_ptr, _ptr, _ptr, _int, _ptr, _i64, _ptr, _ptr, _i64, _i64, _i64,
                              _i64, _i64, _f32, _ptr, _int, _int),
    "laser_silu_and_mul": (_ptr, _int, _i64, _i64, _ptr, _int, _int),
    "laser_pack_bf16": (_ptr, _i64, _i64, _ptr),
    "laser_gemm_bf16": (_ptr, _int, _i64, _i64, _ptr, _i64, _ptr, _int, _int),
    "laser_gemm_bf16_supported": (),
    "laser_decoder_layer": (_ptr, _int, _ptr, _int, _ptr, _ptr, _f32, _ptr, _ptr, _int,
                            _i64, _i64, _i64, _i64, _i64, _i64, _ptr, _ptr, _ptr, _ptr, _int,
                            _ptr, _i64, _ptr, _i64, _ptr, _ptr, _i64, _i64, _f32, _ptr, _int),
    "laser_decoder_stack": (_int, _int, ctypes.c_void_p, _ptr, _int, _ptr, _int, _ptr, _ptr,
                            _f32, _int, _i64, _i64, _i64, _i64, _i64, _i64, _ptr, _ptr, _int,
                            _ptr, _i64, _ptr, _i64, _ptr, _ptr, _i64, _i64, _f32, _ptr, _int),
    "laser_rescore_top": (_ptr, _i64, _i64, _int, _ptr, _i64, _ptr, _int),
    "laser_argmax_rows": (_ptr, _i64, _i64, _ptr, _int),
    "laser_gemm_q": (_ptr, _int, _i64, _i64, _ptr, _int, _i64, _ptr, _int, _int, _int, _i64),
    "laser_pack_q": (_ptr, _int, _i64, _i64, _ptr),
    "laser_q_block_bytes": (_int,),
    "laser_q_packed_bytes": (_int, _i64, _i64),
    "laser_quantize_q8_0": (_ptr, _i64, _i64, _ptr),
    "laser_dequantize_q": (_ptr, _int, _i64, _i64, _ptr),
    "laser_quant_isa": (_int,),
    "laser_pool_size": (),
    "laser_pool_reserve": (_int,),
    "laser_pool_set_spin": (_int,),
    "laser_pool_spin": (),
}
RESTYPES = {"laser_decoder_stack": _int, "laser_gemm_bf16_supported": _int,
            "laser_pack_q": _int, "laser_q_block_bytes": _int, "laser_q_packed_bytes": _i64,
            "laser_dequantize_q": _int, "laser_quant_isa": _int,
            "laser_pool_size": _int, "laser_pool_spin": _int}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags")):
                return line
    except OSError:
        pass
    return platform.processor()


def _library_path(compiler: str) -> Path:
    base = os.environ.get("LASER_NATIVE_DIR") or Path.home() / ".cache" / "laser" / "native"
    parts = [*(p.read_text() for p in SOURCES), compiler, *FLAGS, platform.machine(), _cpu_name()]
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    return Path(base) / f"laser_cpu-{key}.so"


def build(path: Path, compiler: str) -> None:
    """Compile the C sources into ``path`` (atomically: a temporary file, then a rename), each
    source in its own compiler process at once (the quantized tiles alone take most of a
    minute of CPU; on a loaded machine one process for all ran past a two-minute limit)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as work:
        objects = [str(Path(work) / f"{p.stem}.o") for p in SOURCES if p.suffix == ".c"]
        jobs = [subprocess.Popen([compiler, *FLAGS, "-c", str(p), "-o", o],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for p, o in zip((p for p in SOURCES if p.suffix == ".c"), objects)]
        for job in jobs:
            _, err = job.communicate(timeout=BUILD_TIMEOUT_S)
            if job.returncode:
                raise subprocess.CalledProcessError(job.returncode, job.args, stderr=err)
        tmp = str(Path(work) / "laser_cpu.so")
        subprocess.run([compiler, *FLAGS, *objects, "-o", tmp, "-lm"], check=True,
                       capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        os.replace(tmp, path)


@functools.cache
def library() -> ctypes.CDLL | None:
    """The loaded kernels, built first if needed; None where they cannot be built here."""
    compiler = os.environ.get("CC", "cc")
    try:
        path = _library_path(compiler)
        if not path.exists():
            build(path, compiler)
        lib = ctypes.CDLL(str(path))
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or exc
        log.warning("CPU kernels unavailable (%s); using the PyTorch path", detail)
        return None
    for name, args in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, RESTYPES.get(name)
    return lib


def loaded() -> ctypes.CDLL:
    """:func:`library` for a wrapper whose caller chose the C kernels (they build here)."""
    lib = library()
    if lib is None:
        raise RuntimeError("the CPU kernels do not build here (see the warning above)")
    return lib


def _check(t: torch.Tensor, name: str, *dtypes: torch.dtype) -> None:
    if t.device.type != "cpu" or not t.is_contiguous() or t.dtype not in dtypes:
        raise ValueError(f"{name}: expected a contiguous CPU tensor of {dtypes}, "
                         f"got {t.dtype} on {t.device} (contiguous={t.is_contiguous()})")


def _check_all(dtype: torch.dtype, **tensors: torch.Tensor) -> None:
    for name, t in tensors.items():
        _check(t, name, dtype)


def _check_kv(k_cache: torch.Tensor, v_cache: torch.Tensor) -> int:
    """Both caches float32 or both float16; the dtype's code for the C calls."""
    _check(k_cache, "k_cache", *KV_DTYPES)
    _check(v_cache, "v_cache", k_cache.dtype)
    return DTYPES[k_cache.dtype]


_ACTS = (torch.float32, torch.bfloat16)


def add_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
                 residual: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
    """RMSNorm of ``x`` (+ ``residual``) ``[T, H]`` as ``kernels.rms_norm``, except that the
    sum is written back into ``residual`` (float32) in place and the result is ``out_dtype``."""
    _check(x, "x", *_ACTS)
    _check(weight, "weight", torch.float32)
    if residual is not None:
        _check(residual, "residual", torch.float32)
        if residual.shape != x.shape:
            raise ValueError(f"residual {tuple(residual.shape)} != x {tuple(x.shape)}")
    num_tokens, hidden = x.shape
    out = torch.empty((num_tokens, hidden), dtype=out_dtype)
    loaded().laser_add_rms_norm(
        x.data_ptr(), DTYPES[x.dtype], None if residual is None else residual.data_ptr(),
        weight.data_ptr(), eps, num_tokens, hidden, out.data_ptr(), DTYPES[out_dtype])
    return out


def rope_write_kv(qkv: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor,
                  k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                  num_heads: int) -> torch.Tensor:
    """Split ``qkv`` ``[T, (H + 2 KVH) D]``, rotate q and k (``kernels.rotary_embedding``),
    write k and v into the caches (float32 or float16) at ``slots`` (``kernels.write_kv``);
    returns q ``[T, H, D]`` float32."""
    _check(qkv, "qkv", *_ACTS)
    kv_dtype = _check_kv(k_cache, v_cache)
    _check(cos_sin, "cos_sin", torch.float32)
    _check_all(torch.int64, positions=positions, slots=slots)
    num_tokens = qkv.shape[0]
    _, _, num_kv_heads, head_dim = k_cache.shape
    if qkv.shape[1] != (num_heads + 2 * num_kv_heads) * head_dim:
        raise ValueError(f"qkv width {qkv.shape[1]} does not fit {num_heads} + 2 x "
                         f"{num_kv_heads} heads of {head_dim}")
    q = torch.empty((num_tokens, num_heads, head_dim), dtype=torch.float32)
    loaded().laser_rope_write_kv(
        qkv.data_ptr(), DTYPES[qkv.dtype], num_tokens, num_heads, num_kv_heads, head_dim,
        positions.data_ptr(), cos_sin.data_ptr(), q.data_ptr(), k_cache.data_ptr(),
        v_cache.data_ptr(), kv_dtype, slots.data_ptr())
    return q


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float,
                    out_dtype: torch.dtype,
                    query_start_loc: torch.Tensor | None = None) -> torch.Tensor:
    """Causal attention of float32 ``q`` ``[T, H, D]`` over paged caches (float32 or float16)
    read in place:
    ``kernels.paged_prefill_attention``'s contract, or, without ``query_start_loc``,
    ``kernels.paged_decode_attention``'s (one row per sequence); the result ``[T, H, D]`` in
    ``out_dtype``. Each query row is a decode-style pass over its keys: the quadratic work of
    a long prompt belongs to SDPA (``kernels.layer_ops.CpuOps`` sends only short chunks here)."""
    _check(q, "q", torch.float32)
    kv_dtype = _check_kv(k_cache, v_cache)
    _check_all(torch.int32, block_tables=block_tables, seq_lens=seq_lens)
    num_rows, num_heads, head_dim = q.shape
    num_seqs = seq_lens.shape[0]
    if query_start_loc is not None:
        _check(query_start_loc, "query_start_loc", torch.int32)
    elif num_rows != num_seqs:
        raise ValueError(f"{num_rows} query rows for {num_seqs} sequences without "
                         "query_start_loc")
    _, block_size, num_kv_heads, _ = k_cache.shape
    if num_heads % num_kv_heads:
        raise ValueError(f"{num_heads} query heads do not group over {num_kv_heads} kv heads")
    out = torch.empty((num_rows, num_heads, head_dim), dtype=out_dtype)
    loaded().laser_paged_attention(
        q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), kv_dtype, block_tables.data_ptr(),
        block_tables.shape[1], seq_lens.data_ptr(),
        None if query_start_loc is None else query_start_loc.data_ptr(), num_seqs, num_heads,
        num_kv_heads, head_dim, block_size, scale, out.data_ptr(), DTYPES[out_dtype],
        _gemm_threads(num_rows))
    return out


def silu_and_mul(x: torch.Tensor, out_dtype: torch.dtype, gelu: bool = False) -> torch.Tensor:
    """``kernels.silu_and_mul`` of ``x`` ``[T, 2 I]`` (``gelu``: ``kernels.gelu_and_mul``),
    the result ``[T, I]`` in ``out_dtype``."""
    _check(x, "x", *_ACTS)
    num_tokens, width = x.shape
    if width % 2:
        raise ValueError(f"silu_and_mul: last dim {width} is odd")
    out = torch.empty((num_tokens, width // 2), dtype=out_dtype)
    loaded().laser_silu_and_mul(x.data_ptr(), DTYPES[x.dtype], num_tokens, width // 2,
                                 out.data_ptr(), DTYPES[out_dtype], int(gelu))
    return out


GEMM_BLOCK = 32  # outputs per block of the packed layout (laser_cpu.c)
THREADED_ROWS = 64  # from this many rows the matmul starts threads (torch's count) for the
# call: a prefill's matmuls last long enough to pay for starting them, a decode step's do not


_POOL_THREADS = [0]


def set_threads(threads: int, spin_us: int | None = None) -> None:
    """Threads of the pool (``laser_pool.c``) for every matmul and attention call from now on;
    0 restores the rule for Laser's bfloat16 matmul: torch's count from ``THREADED_ROWS`` rows,
    else one. The runner sets it per step for the quantized mode (the workers sleep between
    calls, so every core can serve decode steps too). ``spin_us``: how long each worker polls
    for the next call before it sleeps (None: unchanged; 0: it sleeps at once)."""
    _POOL_THREADS[0] = max(0, int(threads))
    if spin_us is not None and (lib := library()) is not None:
        lib.laser_pool_set_spin(int(spin_us))


def _gemm_threads(num_rows: int) -> int:
    if _POOL_THREADS[0]:
        return _POOL_THREADS[0]
    return torch.get_num_threads() if num_rows >= THREADED_ROWS else 1


@functools.cache
def gemm_supported() -> bool:
    """Whether the kernels built here have the bfloat16 matmul (AVX512-BF16 CPUs)."""
    lib = library()
    return lib is not None and bool(lib.laser_gemm_bf16_supported())


class PackedBF16:
    """A float32 weight ``[N, K]`` in bfloat16, laid out for :func:`gemm_bf16`.

    Stands where ``kernels.linear`` takes a packed weight. ``split`` (a view sharing the data,
    :meth:`split_view`) multiplies float32 activations split into two bfloat16 parts: only the
    weights are rounded, so its ``dtype`` (what the activations around it keep) is float32;
    otherwise the activations are rounded to bfloat16 too and ``dtype`` is bfloat16, as a
    oneDNN-packed bfloat16 tensor's."""

    __slots__ = ("data", "out_features", "in_features", "split")

    def __init__(self, data: torch.Tensor, out_features: int, in_features: int,
                 split: bool = False) -> None:
        self.data, self.out_features, self.in_features = data, out_features, in_features
        self.split = split

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32 if self.split else torch.bfloat16

    def split_view(self) -> PackedBF16:
        return PackedBF16(self.data, self.out_features, self.in_features, split=True)


def pack_bf16(weight: torch.Tensor) -> PackedBF16:
    """``weight`` ``[N, K]`` (float32, K even) rounded to bfloat16 and packed."""
    _check(weight, "weight", torch.float32)
    n, k = weight.shape
    if k % 2:
        raise ValueError(f"pack_bf16: in_features {k} is odd")
    blocks = -(-n // GEMM_BLOCK)
    data = torch.empty((blocks, k // 2, GEMM_BLOCK, 2), dtype=torch.bfloat16)
    loaded().laser_pack_bf16(weight.data_ptr(), n, k, data.data_ptr())
    return PackedBF16(data, n, k)


def gemm_bf16(x: torch.Tensor, packed: PackedBF16, out_dtype: torch.dtype,
              threads: int | None = None) -> torch.Tensor:
    """``x`` ``[M, K]`` times the packed weight transposed, summed in float32; ``[M, N]`` in
    ``out_dtype``. A ``split`` weight takes ``x`` as float32 (hi + lo bfloat16 parts); otherwise
    a float32 ``x`` is rounded to bfloat16 first (as oneDNN's matmul does). ``threads`` > 1
    splits the output blocks over that many threads started for the call (default: torch's
    count from ``THREADED_ROWS`` rows, else one)."""
    dtype = packed.dtype
    x = x.to(dtype).contiguous()
    num_rows, k = x.shape
    if k != packed.in_features:
        raise ValueError(f"gemm_bf16: x has {k} features, the weight {packed.in_features}")
    _check(x, "x", dtype)
    out = torch.empty((num_rows, packed.out_features), dtype=out_dtype)
    threads = _gemm_threads(num_rows) if threads is None else threads
    loaded().laser_gemm_bf16(x.data_ptr(), DTYPES[dtype], num_rows, k, packed.data.data_ptr(),
                              packed.out_features, out.data_ptr(), DTYPES[out_dtype], threads)
    return out


def rescore_top(logits: torch.Tensor, hidden: torch.Tensor, weight: torch.Tensor,
                k: int) -> bool:
    """``kernels.Packing.logits``' exact pass in C (``laser_rescore_top``): each row's
    ``k`` (at most 256) largest screened ``logits`` ``[N, V]`` replaced in place by
    ``hidden`` ``[N, D]`` times ``weight`` ``[V, D]`` in float32. False (nothing done) where
    a tensor is not a contiguous float32 CPU one of those shapes."""
    for t in (logits, hidden, weight):
        if t.device.type != "cpu" or t.dtype != torch.float32 or not t.is_contiguous():
            return False
    num_rows, vocab = logits.shape
    if hidden.shape[0] != num_rows or weight.shape != (vocab, hidden.shape[1]) or k > 256:
        return False
    loaded().laser_rescore_top(logits.data_ptr(), num_rows, vocab, k, hidden.data_ptr(),
                                hidden.shape[1], weight.data_ptr(), _gemm_threads(num_rows))
    return True


def argmax_rows(x: torch.Tensor) -> torch.Tensor:
    """``kernels.argmax`` in C (``laser_argmax_rows``): ``x`` a contiguous float32 CPU
    ``[rows, n]``, rows over the pool."""
    rows, n = x.shape
    out = torch.empty(rows, dtype=torch.int64)
    loaded().laser_argmax_rows(x.data_ptr(), rows, n, out.data_ptr(), _gemm_threads(rows))
    return out


# the decoder layer and stack calls live in their own module; callers keep ``_cpu.<name>``
from .layers import LayerWeights as LayerWeights  # noqa: E402
from .layers import StackWeights as StackWeights  # noqa: E402
from .layers import decoder_layer as decoder_layer  # noqa: E402
from .layers import decoder_stack as decoder_stack  # noqa: E402
