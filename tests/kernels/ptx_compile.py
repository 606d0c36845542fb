"""Compile every Triton kernel to PTX for sm_90 (H100/H200) without a GPU.

Run as a script (``python tests/kernels/ptx_compile.py bf16 fp32``) in a process *without*
``TRITON_INTERPRET`` so the kernels are real ``JITFunction``s. It goes through Triton's own
stages (TTIR -> TTGIR -> LLVM IR -> PTX) and stops before ``ptxas`` (not shipped in the wheel),
which catches what the interpreter cannot: typing, layouts, constexpr and lowering errors.
Prints one ``ok <kernel> <dtype>`` line per compile; exits non-zero on the first failure.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from triton._C.libtriton import ir  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.compiler.compiler import make_backend  # noqa: E402

from kernels._triton import (  # noqa: E402
    activation,
    decode_attention,
    kv_cache,
    prefill_attention,
    rms_norm,
    rotary,
)

INT32_PTRS = {"block_tables_ptr", "seq_lens_ptr", "query_start_loc_ptr"}
INT64_PTRS = {"slot_ptr", "pos_ptr"}
FP32_PTRS = {"cache_ptr", "part_acc_ptr", "part_m_ptr", "part_l_ptr"}
FLOATS = {"eps", "scale_log2"}


def signature(fn, dtype: str, constexprs: dict) -> dict[str, str]:
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in INT32_PTRS:
            sig[name] = "*i32"
        elif name in INT64_PTRS:
            sig[name] = "*i64"
        elif name in FP32_PTRS:
            sig[name] = "*fp32"
        elif name.endswith("_ptr"):
            sig[name] = f"*{dtype}"
        else:
            sig[name] = "fp32" if name in FLOATS else "i32"
    return sig


def to_ptx(fn, dtype: str, constexprs: dict, num_warps: int = 4) -> str:
    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    options = backend.parse_options({"num_warps": num_warps, "ptx_version": 84})
    src = ASTSource(fn, signature(fn, dtype, constexprs), constexprs)
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = src.make_ir(target, options, backend.get_codegen_implementation(options),
                         backend.get_module_map(), context)
    stages: dict = {}
    backend.add_stages(stages, options, src.language)
    metadata: dict = {}
    for ext in ("ttir", "ttgir", "llir", "ptx"):
        module = stages[ext](module, metadata)
    return module


def cases(dtype: str) -> list[tuple[object, dict, int]]:
    precision = "ieee" if dtype == "fp32" else "tf32"
    attention = {"BLOCK_N": 64, "BLOCK_D": 128, "PAGE": 16, "DOT_PRECISION": precision}
    return [
        (rms_norm._rms_norm_kernel, {"HAS_RESIDUAL": True, "BLOCK_SIZE": 4096}, 16),
        (activation._silu_and_mul_kernel, {"BLOCK_SIZE": 1024}, 4),
        (rotary._rotary_kernel, {"BLOCK_QH": 32, "BLOCK_KH": 8, "BLOCK_HALF": 64}, 4),
        (kv_cache._write_kv_kernel, {"BLOCK_H": 8, "BLOCK_D": 128}, 4),
        (decode_attention._paged_decode_kernel, {**attention, "BLOCK_G": 16, "SPLIT": True}, 4),
        (decode_attention._paged_decode_kernel, {**attention, "BLOCK_G": 16, "SPLIT": False}, 4),
        (decode_attention._decode_merge_kernel, {"BLOCK_S": 16, "BLOCK_D": 128}, 4),
        (prefill_attention._paged_prefill_kernel, {**attention, "BLOCK_M": 64}, 4),
    ]


def main(dtypes: list[str]) -> None:
    for dtype in dtypes:
        for fn, constexprs, warps in cases(dtype):
            ptx = to_ptx(fn, dtype, constexprs, warps)
            assert ".target sm_90" in ptx
            print(f"ok {fn.__name__} {dtype} {constexprs.get('SPLIT', '')}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["bf16"])
