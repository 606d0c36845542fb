"""GPU benchmark of Laser's Triton kernels against their PyTorch references (and SDPA).

    python bench/gpu_kernels.py               # on a CUDA GPU (H200 target: one call < 5 min)
    python bench/gpu_kernels.py --cpu-smoke   # tiny shapes through the Triton interpreter

Measures the ceilings first (a large device-to-device copy; a large bf16 matmul), then for each
kernel the Triton time, the reference time, achieved bytes/s and FLOP/s against the ceilings,
and the bf16 error against the reference run in float32; finally a Llama-3-8B-shaped decode
step (random bf16 weights) through the Triton kernels vs the reference kernels. Needs torch
and triton only (no gguf, no network). Prints a table and writes bench/out/gpu_kernels.json.
CPU-smoke timings mean nothing; they prove the script runs end to end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny shapes, interpreter")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "gpu_kernels.json"))
    parser.add_argument("--skip-step", action="store_true", help="skip the 8B decode step")
    return parser.parse_args()


ARGS = parse_args()
if ARGS.cpu_smoke:  # must precede the first Triton kernel decoration
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kernels  # noqa: E402
from kernels._triton.decode_attention import paged_decode_attention_triton  # noqa: E402

SMOKE = ARGS.cpu_smoke
DEVICE = torch.device("cpu" if SMOKE else "cuda")
DTYPE = torch.float32 if SMOKE else torch.bfloat16  # the interpreter gets bf16 wrong
REPS = 2 if SMOKE else 20
# elementwise on tokens x hidden; decode dec_seqs x dec_ctx; prefill pre_seqs x pre_len
SMOKE_SHAPES = {"tokens": 8, "hidden": 128, "heads": 4, "kv_heads": 2, "head_dim": 64,
                "page": 16, "dec_seqs": 3, "dec_ctx": 40, "pre_seqs": 2, "pre_len": 24}
GPU_SHAPES = {"tokens": 16384, "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128,
              "page": 16, "dec_seqs": 64, "dec_ctx": 4096, "pre_seqs": 8, "pre_len": 2048}
S = SMOKE_SHAPES if SMOKE else GPU_SHAPES


@contextmanager
def backend(name: str):
    old = os.environ.get("LASER_KERNELS")
    os.environ["LASER_KERNELS"] = name
    try:
        yield
    finally:
        os.environ.pop("LASER_KERNELS") if old is None else os.environ.update(LASER_KERNELS=old)


def timed(fn, reps: int = REPS) -> float:
    """Median seconds of ``fn()`` after two warm-up calls (CUDA events on GPU)."""
    fn(), fn()
    times = []
    for _ in range(reps):
        if DEVICE.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm())


def ceilings() -> dict:
    n = (1 << 20) if SMOKE else (1 << 30)  # elements: 2 GiB of bf16 on GPU
    src = torch.randn(n, device=DEVICE, dtype=DTYPE)
    dst = torch.empty_like(src)
    t_copy = timed(lambda: dst.copy_(src))
    m = 256 if SMOKE else 8192
    a = torch.randn(m, m, device=DEVICE, dtype=DTYPE)
    b = torch.randn(m, m, device=DEVICE, dtype=DTYPE)
    t_mm = timed(lambda: a @ b)
    return {"copy_bytes_per_s": 2 * n * src.element_size() / t_copy,
            "matmul_flop_per_s": 2 * m**3 / t_mm}


def paged_cache(seqs: int, ctx: int, dtype=DTYPE):
    """Random caches with each sequence's pages shuffled over the pool."""
    page, kvh, d = S["page"], S["kv_heads"], S["head_dim"]
    per_seq = -(-ctx // page)
    shape = (seqs * per_seq, page, kvh, d)
    k_cache = torch.randn(shape, device=DEVICE, dtype=dtype)
    v_cache = torch.randn(shape, device=DEVICE, dtype=dtype)
    tables = torch.randperm(seqs * per_seq, device=DEVICE).view(seqs, per_seq).int()
    return k_cache, v_cache, tables


def row(name, shape, t_triton, t_ref, nbytes, flops, ceil, err, extra=None, target=None):
    bw = nbytes / t_triton
    result = {"kernel": name, "shape": shape, "triton_s": t_triton, "reference_s": t_ref,
              "speedup_vs_reference": t_ref / t_triton, "bytes_per_s": bw,
              "pct_copy_bw": 100 * bw / ceil["copy_bytes_per_s"],
              "flop_per_s": flops / t_triton,
              "pct_matmul": 100 * flops / t_triton / ceil["matmul_flop_per_s"],
              "rel_err_vs_fp32_reference": err}
    result.update(extra or {})
    if target is not None:
        key, bound = target
        result["target"] = f"{key} >= {bound}"
        result["target_met"] = bool(result[key] >= bound)
    return result


def compare(fn, make_args, fp32_ref) -> tuple[float, float, float]:
    """(triton seconds, reference seconds, error of triton vs the reference in fp32)."""
    args = make_args()
    with backend("triton"):
        out = fn(*args)
        t_triton = timed(lambda: fn(*args))
    with backend("reference"):
        t_ref = timed(lambda: fn(*args))
        ref = fp32_ref(make_args)
    first = out[0] if isinstance(out, tuple) else out
    return t_triton, t_ref, rel_err(first, ref[0] if isinstance(ref, tuple) else ref)


def as_fp32(make_args):
    return [a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in make_args()]


def seeded(build):
    def make():
        torch.manual_seed(0)
        return build()
    return make


def snapshot(fn):
    """Run ``fn`` and clone what it returns (in-place kernels keep mutating their inputs)."""
    def run(*args):
        out = fn(*args)
        return tuple(o.clone() for o in out) if isinstance(out, tuple) else out.clone()
    return run


def bench_elementwise(ceil: dict) -> list[dict]:
    t, h, d = S["tokens"], S["hidden"], S["head_dim"]
    size = torch.empty((), dtype=DTYPE).element_size()
    dev = {"device": DEVICE, "dtype": DTYPE}
    target = ("pct_copy_bw", 80.0)
    rows = []

    def case(name, fn, build, nbytes, flops):
        make = seeded(build)
        t_tr, t_ref, err = compare(fn, make, lambda m: snapshot(fn)(*as_fp32(m)))
        rows.append(row(name, f"{t}x{h}", t_tr, t_ref, nbytes, flops, ceil, err, target=target))

    case("rms_norm+residual", snapshot(kernels.rms_norm),
         lambda: [torch.randn(t, h, **dev), 1 + 0.1 * torch.randn(h, **dev), 1e-5,
                  torch.randn(t, h, **dev)], (4 * t * h + h) * size, 5 * t * h)
    case("silu_and_mul", snapshot(kernels.silu_and_mul), lambda: [torch.randn(t, 2 * h, **dev)],
         3 * t * h * size, 5 * t * h)
    heads = h // d
    kvh = max(1, heads // 4)
    cache = kernels.build_cos_sin_cache(d, 8192, 500000.0, DEVICE, torch.float32)
    case("rotary (q+k)", snapshot(kernels.rotary_embedding),
         lambda: [torch.randint(0, 8192, (t,), device=DEVICE), torch.randn(t, heads, d, **dev),
                  torch.randn(t, kvh, d, **dev), cache],
         2 * t * (heads + kvh) * d * size + t * (4 * d + 8), 6 * t * (heads + kvh) * d)
    page = S["page"]
    blocks = -(-t // page) + 4

    def write(key, value, k_cache, v_cache, slots):
        kernels.write_kv(key, value, k_cache, v_cache, slots)
        return k_cache.clone()

    case("write_kv", write,
         lambda: [torch.randn(t, heads, d, **dev), torch.randn(t, heads, d, **dev),
                  torch.randn(blocks, page, heads, d, **dev),
                  torch.randn(blocks, page, heads, d, **dev),
                  torch.randperm(blocks * page, device=DEVICE)[:t]],
         4 * t * h * size + 8 * t, 0)
    return rows


def bench_decode(ceil: dict) -> list[dict]:
    seqs, ctx, heads, kvh, d = S["dec_seqs"], S["dec_ctx"], S["heads"], S["kv_heads"], S["head_dim"]
    size = torch.empty((), dtype=DTYPE).element_size()

    def build():
        k_cache, v_cache, tables = paged_cache(seqs, ctx)
        q = torch.randn(seqs, heads, d, device=DEVICE, dtype=DTYPE)
        lens = torch.full((seqs,), ctx, dtype=torch.int32, device=DEVICE)
        return [q, k_cache, v_cache, tables, lens, d**-0.5]

    make = seeded(build)
    fn = kernels.paged_decode_attention
    t_tr, t_ref, err = compare(fn, make, lambda m: fn(*as_fp32(m)))
    args = make()
    q, k_cache, v_cache, tables = args[:4]
    # dense SDPA on contiguous K/V: what attention costs without paging
    k = k_cache[tables.long()].flatten(1, 2).transpose(1, 2).contiguous()
    v = v_cache[tables.long()].flatten(1, 2).transpose(1, 2).contiguous()
    t_sdpa = timed(lambda: F.scaled_dot_product_attention(
        q[:, :, None], k, v, scale=d**-0.5, enable_gqa=True))
    sweep = {}
    for block_n in (32, 64, 128):
        for splits in (None, 4, 8, 16):
            t_cfg = timed(lambda: paged_decode_attention_triton(*args, num_splits=splits,
                                                                block_n=block_n))
            sweep[f"block_n={block_n},splits={splits or 'auto'}"] = t_cfg
    best = min(sweep, key=sweep.get)
    nbytes = (2 * seqs * ctx * kvh * d + 2 * seqs * heads * d) * size
    extra = {"sdpa_dense_s": t_sdpa, "speedup_vs_sdpa": t_sdpa / t_tr, "sweep_s": sweep,
             "best_config": best, "best_pct_copy_bw":
             100 * nbytes / sweep[best] / ceil["copy_bytes_per_s"]}
    return [row("paged_decode_attention", f"{seqs}x{ctx} H{heads}/{kvh} D{d}", t_tr, t_ref,
                nbytes, 4 * seqs * heads * ctx * d, ceil, err, extra, ("pct_copy_bw", 70.0))]


def bench_prefill(ceil: dict) -> list[dict]:
    seqs, n, heads, kvh, d = S["pre_seqs"], S["pre_len"], S["heads"], S["kv_heads"], S["head_dim"]
    size = torch.empty((), dtype=DTYPE).element_size()

    def build():
        k_cache, v_cache, tables = paged_cache(seqs, n)
        q = torch.randn(seqs * n, heads, d, device=DEVICE, dtype=DTYPE)
        starts = torch.arange(0, seqs * n + 1, n, dtype=torch.int32, device=DEVICE)
        lens = torch.full((seqs,), n, dtype=torch.int32, device=DEVICE)
        return [q, k_cache, v_cache, tables, starts, lens, d**-0.5]

    make = seeded(build)
    fn = kernels.paged_prefill_attention
    t_tr, t_ref, err = compare(fn, make, lambda m: fn(*as_fp32(m)))
    q, k_cache, v_cache, tables = make()[:4]
    qd = q.view(seqs, n, heads, d).transpose(1, 2).contiguous()
    k = k_cache[tables.long()].flatten(1, 2).transpose(1, 2).contiguous()
    v = v_cache[tables.long()].flatten(1, 2).transpose(1, 2).contiguous()
    t_sdpa = timed(lambda: F.scaled_dot_product_attention(qd, k, v, is_causal=True,
                                                          scale=d**-0.5, enable_gqa=True))
    flops = 2 * d * heads * n * (n + 1) * seqs
    nbytes = (2 * seqs * n * heads * d + 2 * seqs * n * kvh * d) * size
    extra = {"sdpa_dense_s": t_sdpa, "speedup_vs_sdpa": t_sdpa / t_tr}
    return [row("paged_prefill_attention", f"{seqs}x{n} H{heads}/{kvh} D{d}", t_tr, t_ref,
                nbytes, flops, ceil, err, extra)]


LLAMA3_8B = {"hidden": 4096, "inter": 14336, "layers": 32, "heads": 32, "kv_heads": 8,
             "head_dim": 128, "vocab": 128256, "batch": 64, "ctx": 2048}
TINY = {"hidden": 128, "inter": 256, "layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 32,
        "vocab": 512, "batch": 4, "ctx": 40}
ROPE_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def build_llama_step(c: dict):
    """A decode step of a Llama-shaped model with random weights: embed, per layer (fused-add
    RMSNorm, QKV matmul, rotary, KV write, paged decode attention, O matmul, RMSNorm, gate/up
    matmul, SiLU-mul, down matmul), final norm, LM head. Returns ``step() -> logits``."""
    torch.manual_seed(0)
    dev = {"device": DEVICE, "dtype": DTYPE}
    h, d, page = c["hidden"], c["head_dim"], 16
    q_size, kv_size = c["heads"] * d, c["kv_heads"] * d

    def w(*shape):
        return torch.randn(*shape, **dev) * shape[-1] ** -0.5

    layers = [{"n1": 1 + 0.1 * torch.randn(h, **dev), "n2": 1 + 0.1 * torch.randn(h, **dev),
               "qkv": w(q_size + 2 * kv_size, h), "o": w(h, q_size),
               "gate_up": w(2 * c["inter"], h), "down": w(h, c["inter"])}
              for _ in range(c["layers"])]
    embed, lm_head, norm = w(c["vocab"], h), w(c["vocab"], h), torch.ones(h, **dev)
    per_seq = -(-c["ctx"] // page)
    blocks = c["batch"] * per_seq
    caches = [(torch.randn(blocks, page, c["kv_heads"], d, **dev),
               torch.randn(blocks, page, c["kv_heads"], d, **dev)) for _ in range(c["layers"])]
    tables = torch.randperm(blocks, device=DEVICE).view(c["batch"], per_seq).int()
    last = c["ctx"] - 1
    positions = torch.full((c["batch"],), last, device=DEVICE, dtype=torch.int64)
    slots = tables[:, last // page].long() * page + last % page
    seq_lens = torch.full((c["batch"],), c["ctx"], device=DEVICE, dtype=torch.int32)
    cos_sin = kernels.build_cos_sin_cache(d, 8192, 500000.0, DEVICE, torch.float32,
                                          scaling=ROPE_SCALING)
    ids = torch.randint(0, c["vocab"], (c["batch"],), device=DEVICE)
    n = c["batch"]

    def step() -> torch.Tensor:
        x, residual = F.embedding(ids, embed), None
        for p, (k_cache, v_cache) in zip(layers, caches):
            if residual is None:
                x, residual = kernels.rms_norm(x, p["n1"], 1e-5), x
            else:
                x, residual = kernels.rms_norm(x, p["n1"], 1e-5, residual)
            q, k, v = F.linear(x, p["qkv"]).split([q_size, kv_size, kv_size], dim=-1)
            q, k = q.view(n, -1, d), k.view(n, -1, d)
            v = v.view(n, -1, d)
            kernels.rotary_embedding(positions, q, k, cos_sin)
            kernels.write_kv(k, v, k_cache, v_cache, slots)
            attn = kernels.paged_decode_attention(q, k_cache, v_cache, tables, seq_lens, d**-0.5)
            x, residual = kernels.rms_norm(F.linear(attn.view(n, -1), p["o"]), p["n2"], 1e-5,
                                           residual)
            x = F.linear(kernels.silu_and_mul(F.linear(x, p["gate_up"])), p["down"])
        return F.linear(kernels.rms_norm(x, norm, 1e-5, residual)[0], lm_head)

    return step


def bench_step(ceil: dict) -> list[dict]:
    c = TINY if SMOKE else LLAMA3_8B
    step = build_llama_step(c)
    with backend("triton"):
        out = step()
        t_tr = timed(step, reps=max(2, REPS // 2))
    with backend("reference"):
        ref = step()
        t_ref = timed(step, reps=max(2, REPS // 2))
    size = torch.empty((), dtype=DTYPE).element_size()
    h, inter, d = c["hidden"], c["inter"], c["head_dim"]
    q_size, kv_size = c["heads"] * d, c["kv_heads"] * d
    params = c["layers"] * (h * (q_size + 2 * kv_size) + h * q_size + 3 * h * inter) + c[
        "vocab"] * h
    kv = c["layers"] * 2 * c["batch"] * c["ctx"] * kv_size
    flops = 2 * c["batch"] * params + c["layers"] * 4 * c["batch"] * c["heads"] * c["ctx"] * d
    name = "tiny" if SMOKE else "llama3-8b"
    return [row(f"decode step ({name})", f"batch {c['batch']} ctx {c['ctx']}", t_tr, t_ref,
                (params + kv) * size, flops, ceil, rel_err(out, ref),
                {"err_is": "triton path vs reference path, both in the bench dtype"},
                ("speedup_vs_reference", 1.5))]


def print_table(ceil: dict, rows: list[dict]) -> None:
    print(f"ceilings: copy {ceil['copy_bytes_per_s'] / 1e9:.0f} GB/s, "
          f"bf16 matmul {ceil['matmul_flop_per_s'] / 1e12:.0f} TFLOP/s" if not SMOKE else
          f"ceilings (cpu smoke, meaningless): {ceil}")
    head = (f"{'kernel':<24} {'shape':<22} {'triton ms':>9} {'ref ms':>9} {'x ref':>6} "
            f"{'sdpa ms':>8} {'GB/s':>7} {'%copy':>6} {'TFLOP/s':>7} {'%mm':>5} {'err':>8}  target")
    print(head)
    print("-" * len(head))
    for r in rows:
        sdpa = f"{r['sdpa_dense_s'] * 1e3:8.3f}" if "sdpa_dense_s" in r else f"{'-':>8}"
        target = (f"{r['target']}: {'met' if r['target_met'] else 'MISSED'}"
                  if "target" in r else "")
        print(f"{r['kernel']:<24} {r['shape']:<22} {r['triton_s'] * 1e3:9.3f} "
              f"{r['reference_s'] * 1e3:9.3f} {r['speedup_vs_reference']:6.2f} {sdpa} "
              f"{r['bytes_per_s'] / 1e9:7.0f} {r['pct_copy_bw']:6.1f} "
              f"{r['flop_per_s'] / 1e12:7.1f} {r['pct_matmul']:5.1f} "
              f"{r['rel_err_vs_fp32_reference']:8.1e}  {target}")
        if "best_config" in r:
            print(f"{'':<24} best decode config {r['best_config']}: "
                  f"{r['best_pct_copy_bw']:.1f} % of copy bandwidth")


def main() -> int:
    if not SMOKE and not torch.cuda.is_available():
        print("no CUDA device: run with --cpu-smoke", file=sys.stderr)
        return 2
    started = time.time()
    ceil = ceilings()
    rows = bench_elementwise(ceil) + bench_decode(ceil) + bench_prefill(ceil)
    if not ARGS.skip_step:
        rows += bench_step(ceil)
    print_table(ceil, rows)
    import triton

    meta = {"date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "smoke": SMOKE,
            "device": torch.cuda.get_device_name() if not SMOKE else "cpu (interpreter)",
            "dtype": str(DTYPE), "torch": torch.__version__, "triton": triton.__version__,
            "wall_s": time.time() - started}
    out = Path(ARGS.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "ceilings": ceil, "rows": rows}, indent=2))
    print(f"wrote {out} ({meta['wall_s']:.0f} s)")
    bad_err = [r["kernel"] for r in rows if not r["rel_err_vs_fp32_reference"] <= 2e-2]
    if bad_err:
        print(f"CORRECTNESS FAILED: {bad_err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
