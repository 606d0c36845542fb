"""CPU cost of the kernel references at SmolLM2-135M shapes (what the CPU engine runs).

    python bench/cpu_kernels.py [--seqs 16] [--ctx 256] [--reps 50]

A decode step of 16 sequences x 256 cached tokens (9 query heads, 3 KV heads, head dim 64,
hidden 576, MLP 1536, pages of 16): each op's median time per call and x30 (the model's
layers), first with glibc's default allocator settings, then after
``kernels.tune_cpu_allocator()`` (process-wide, so measured second in the same run), and the
ratio. Also a 256-token prefill and a mixed batch (15 decodes + one 64-token chunk). Prints a
table and writes bench/out/cpu_kernels.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import kernels  # noqa: E402

HEADS, KV_HEADS, DIM, HIDDEN, INTER, PAGE, LAYERS = 9, 3, 64, 576, 1536, 16, 30


def median_s(fn, reps: int) -> float:
    fn(), fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def make_ops(seqs: int, ctx: int) -> dict:
    torch.manual_seed(0)
    per_seq = -(-ctx // PAGE)
    blocks = seqs * per_seq + 4
    k_cache = torch.randn(blocks, PAGE, KV_HEADS, DIM)
    v_cache = torch.randn(blocks, PAGE, KV_HEADS, DIM)
    tables = torch.randperm(blocks)[: seqs * per_seq].view(seqs, per_seq).int()
    lens = torch.full((seqs,), ctx, dtype=torch.int32)
    q = torch.randn(seqs, HEADS, DIM)
    x, res, w = torch.randn(seqs, HIDDEN), torch.randn(seqs, HIDDEN), torch.randn(HIDDEN)
    cos_sin = kernels.build_cos_sin_cache(DIM, 8192, 100000.0)
    pos = torch.full((seqs,), ctx - 1)
    qr, kr = torch.randn(seqs, HEADS, DIM), torch.randn(seqs, KV_HEADS, DIM)
    gate_up = torch.randn(seqs, 2 * INTER)
    slots = tables[:, (ctx - 1) // PAGE].long() * PAGE + (ctx - 1) % PAGE
    kv = torch.randn(seqs, KV_HEADS, DIM)
    qp = torch.randn(ctx, HEADS, DIM)
    start_p = torch.tensor([0, ctx], dtype=torch.int32)
    chunk = min(64, ctx)
    qm = torch.randn(seqs - 1 + chunk, HEADS, DIM)
    start_m = torch.tensor([*range(seqs), seqs - 1 + chunk], dtype=torch.int32)
    scale = DIM**-0.5
    return {
        "rms_norm+residual": lambda: kernels.rms_norm(x, w, 1e-5, res),
        "rotary": lambda: kernels.rotary_embedding(pos, qr, kr, cos_sin),
        "write_kv": lambda: kernels.write_kv(kv, kv, k_cache, v_cache, slots),
        "decode_attention": lambda: kernels.paged_decode_attention(
            q, k_cache, v_cache, tables, lens, scale),
        "silu_and_mul": lambda: kernels.silu_and_mul(gate_up),
        f"prefill 1x{ctx}": lambda: kernels.paged_prefill_attention(
            qp, k_cache, v_cache, tables[:1], start_p, lens[:1], scale),
        f"mixed {seqs - 1} dec + {chunk} chunk": lambda: kernels.paged_prefill_attention(
            qm, k_cache, v_cache, tables, start_m, lens, scale),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="CPU kernel references at SmolLM2 shapes")
    parser.add_argument("--seqs", type=int, default=16)
    parser.add_argument("--ctx", type=int, default=256)
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    ops = make_ops(args.seqs, args.ctx)
    results: dict[str, dict] = {name: {} for name in ops}
    with torch.inference_mode():
        for phase in ("default_malloc", "tuned_malloc"):
            if phase == "tuned_malloc" and not kernels.tune_cpu_allocator():
                print("tune_cpu_allocator() had no effect here")
            for name, fn in ops.items():
                results[name][phase] = median_s(fn, args.reps)
    print(f"{args.seqs} seqs x {args.ctx} ctx, {torch.get_num_threads()} threads "
          "(shared machine: indicative only)")
    print(f"{'op':<28} {'default ms':>10} {'tuned ms':>9} {'x30 tuned ms':>12} {'gain':>6}")
    for name, r in results.items():
        d, t = r["default_malloc"], r["tuned_malloc"]
        x30 = f"{LAYERS * t * 1e3:12.2f}" if "prefill" not in name and "mixed" not in name \
            else f"{'':>12}"
        print(f"{name:<28} {d * 1e3:10.3f} {t * 1e3:9.3f} {x30} {d / t:6.2f}")
    step = sum(r["tuned_malloc"] for n, r in results.items() if not n.startswith(("prefill",
                                                                                  "mixed")))
    print(f"per decode step, {LAYERS} layers of these ops (tuned): {LAYERS * step * 1e3:.1f} ms")
    out = ROOT / "bench" / "out" / "cpu_kernels.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "threads": torch.get_num_threads(),
                               "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                               "seconds_per_call": results}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
