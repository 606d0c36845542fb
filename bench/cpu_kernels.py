"""CPU cost of the kernel references at SmolLM2-135M shapes (what the CPU engine runs).

    python bench/cpu_kernels.py [--seqs 16] [--ctx 256] [--reps 50]

A decode step of 16 sequences x 256 cached tokens (9 query heads, 3 KV heads, head dim 64,
hidden 576, MLP 1536, pages of 16): each op's median time per call and x30 (the model's
layers), first with glibc's default allocator settings, then after
``kernels.tune_cpu_allocator()`` (process-wide, so measured second in the same run), and the
ratio. Also a 256-token prefill and a mixed batch (15 decodes + one 64-token chunk). Then the
decode attention the engine ran before (whole-block gather, invalid rows zeroed, heads-first
SDPA with a boolean mask and enable_gqa) against today's, calls interleaved so both see the same
machine, each with its per-step index precomputed as the engine does, for all sequences at
``--ctx`` and for lengths drawn in 1..ctx; the index builds are timed too. Prints a table and
writes bench/out/cpu_kernels.json.
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
import torch.nn.functional as F  # noqa: E402

import kernels  # noqa: E402
from kernels.decode_attention import (  # noqa: E402
    block_index,
    decode_rows,
    gather_rows,
    paged_decode_attention_reference,
)

HEADS, KV_HEADS, DIM, HIDDEN, INTER, PAGE, LAYERS = 9, 3, 64, 576, 1536, 16, 30


def median_s(fn, reps: int) -> float:
    fn(), fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def make_cache(seqs: int, ctx: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random K/V caches with room for ``ctx`` tokens per sequence, blocks handed out shuffled."""
    per_seq = -(-ctx // PAGE)
    blocks = seqs * per_seq + 4
    k_cache = torch.randn(blocks, PAGE, KV_HEADS, DIM)
    v_cache = torch.randn(blocks, PAGE, KV_HEADS, DIM)
    tables = torch.randperm(blocks)[: seqs * per_seq].view(seqs, per_seq).int()
    return k_cache, v_cache, tables


def median_interleaved_s(fns: dict, reps: int) -> dict[str, float]:
    """Median seconds per call of each of ``fns``, called in turn every repetition."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn(), fn()
    for _ in range(reps):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}


def old_decode_attention(q, k_cache, v_cache, scale, index):
    """The decode reference as it was before the grouped-query rewrite (float32 caches)."""
    blocks, valid, invalid = index
    k = gather_rows(k_cache, blocks, invalid, q.shape[0])  # [S, KVH, P, D]
    v = gather_rows(v_cache, blocks, invalid, q.shape[0])
    out = F.scaled_dot_product_attention(q[:, :, None, :], k, v, attn_mask=valid[:, None, None, :],
                                         scale=scale, enable_gqa=True)
    return out[:, :, 0, :]


def compare_decode(seqs: int, ctx: int, reps: int) -> dict[str, dict]:
    """Old vs new decode attention, uniform and drawn lengths: seconds per call and max diff."""
    torch.manual_seed(1)
    k_cache, v_cache, tables = make_cache(seqs, ctx)
    q = torch.randn(seqs, HEADS, DIM)
    scale = DIM**-0.5
    cases = {"uniform": torch.full((seqs,), ctx, dtype=torch.int32),
             "drawn": torch.randint(1, ctx + 1, (seqs,), dtype=torch.int32)}
    results = {}
    for case, lens in cases.items():
        max_len = int(lens.max())
        old_index = block_index(tables, lens, max_len, PAGE)
        new_index = decode_rows(tables, lens, max_len, PAGE, KV_HEADS, DIM)
        old_fn = lambda: old_decode_attention(q, k_cache, v_cache, scale, old_index)  # noqa: E731
        new_fn = lambda: paged_decode_attention_reference(  # noqa: E731
            q, k_cache, v_cache, tables, lens, scale, new_index)
        r = median_interleaved_s({
            "old": old_fn, "new": new_fn,
            "old_index": lambda: block_index(tables, lens, max_len, PAGE),  # noqa: B023
            "new_index": lambda: decode_rows(tables, lens, max_len, PAGE, KV_HEADS, DIM),  # noqa: B023
        }, reps)
        r["max_abs_diff"] = float((old_fn() - new_fn()).abs().max())
        results[case] = r
    return results


def make_ops(seqs: int, ctx: int) -> dict:
    torch.manual_seed(0)
    k_cache, v_cache, tables = make_cache(seqs, ctx)
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
    with torch.inference_mode():
        compare = compare_decode(args.seqs, args.ctx, 4 * args.reps)
    print(f"decode attention, old vs new ({args.seqs} seqs, lengths {args.ctx} / drawn in "
          f"1..{args.ctx}; interleaved, {4 * args.reps} reps, tuned malloc)")
    print(f"{'lengths':<9} {'old ms':>8} {'new ms':>8} {'old/new':>8} {'x30 saved ms':>12} "
          f"{'old idx ms':>10} {'new idx ms':>10} {'max diff':>9}")
    for case, r in compare.items():
        print(f"{case:<9} {r['old'] * 1e3:8.3f} {r['new'] * 1e3:8.3f} {r['old'] / r['new']:8.2f} "
              f"{LAYERS * (r['old'] - r['new']) * 1e3:12.2f} {r['old_index'] * 1e3:10.3f} "
              f"{r['new_index'] * 1e3:10.3f} {r['max_abs_diff']:9.1e}")
    out = ROOT / "bench" / "out" / "cpu_kernels.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "threads": torch.get_num_threads(),
                               "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                               "seconds_per_call": results,
                               "decode_old_vs_new": compare}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
