"""CPU linear layers: ``F.linear`` against ``kernels.linear`` with oneDNN-packed weights.

    .venv/bin/python bench/cpu_linear.py [--threads 1]
    .venv/bin/python bench/cpu_linear.py --model [--threads 1]

SmolLM2-135M's projection shapes (fused QKV, O, gate-up, down, LM head) at 1-300 rows, random
float32 weights, both paths alternating in one process; reports the median of each and the
ratio. Prints a table; writes ``bench/out/cpu_linear.json``.

``--model``: the bfloat16 matmuls of a whole decode step instead (30 layers of the four
projections, each layer its own weights, then the LM head: 134 M weights, 269 MB, so they
stream from memory as in the engine rather than sit in cache), oneDNN's packed bfloat16
against Laser's own kernel (``kernels.pack_linear_weight(..., native=True)``), bfloat16 in and
out as the decode step runs them, at 1-32 rows, alternating; writes
``bench/out/cpu_linear_model.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kernels  # noqa: E402

SHAPES = {"qkv": (960, 576), "o": (576, 576), "gate_up": (3072, 576), "down": (576, 1536),
          "lm_head": (49152, 576)}
ROWS = (1, 7, 16, 64, 300)


def timed(fn, repeats: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats * 1000


def model_step(threads: int) -> None:
    from kernels import _cpu

    if not (_cpu.gemm_supported() and kernels.bf16_matmul_supported()):
        sys.exit("needs AVX512-BF16: Laser's bfloat16 matmul and oneDNN's")
    bf16 = torch.bfloat16
    shapes = [SHAPES[k] for k in ("qkv", "o", "gate_up", "down")] * 30 + [SHAPES["lm_head"]]
    weights = []
    for n_out, n_in in shapes:
        w = torch.randn(n_out, n_in) * 0.05
        weights.append((n_in, kernels.pack_linear_weight(w, bf16),
                        kernels.pack_linear_weight(w, bf16, native=True), w))
    rows = []
    for m in (1, 4, 8, 16, 32):
        xs = {n_in: torch.randn(m, n_in).to(bf16) for n_in in (576, 1536)}
        paths = {
            "onednn": lambda: [kernels.linear(xs[k], w, p, raw=True) for k, p, _, w in weights],
            "laser": lambda: [kernels.linear(xs[k], w, p, raw=True) for k, _, p, w in weights],
        }
        times = {name: [] for name in paths}
        for _ in range(5):
            for name, fn in paths.items():
                times[name].append(timed(fn, 3))
        row = {"rows": m, **{f"{k}_ms": statistics.median(v) for k, v in times.items()}}
        row["speedup"] = row["onednn_ms"] / row["laser_ms"]
        row["laser_gflops"] = 2 * m * sum(a * b for a, b in shapes) / row["laser_ms"] / 1e6
        rows.append(row)
    print(f"whole decode step's bfloat16 matmuls, {threads} thread(s)")
    print(f"{'rows':>6}{'oneDNN ms':>11}{'laser ms':>10}{'speed-up':>10}{'laser GFLOP/s':>15}")
    for r in rows:
        print(f"{r['rows']:>6}{r['onednn_ms']:>11.2f}{r['laser_ms']:>10.2f}{r['speedup']:>10.2f}"
              f"{r['laser_gflops']:>15.0f}")
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "cpu_linear_model.json").write_text(json.dumps({"threads": threads, "rows": rows},
                                                          indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--model", action="store_true",
                    help="a whole decode step's bfloat16 matmuls: oneDNN against Laser's")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.model:
        model_step(args.threads)
        return
    rows = []
    for name, (n_out, n_in) in SHAPES.items():
        weight = torch.randn(n_out, n_in)
        packed = kernels.pack_linear_weight(weight)
        for m in ROWS:
            x = torch.randn(m, n_in)
            repeats = max(2, int(2e8 / (n_out * n_in * m + 1)))
            plain, fast = [], []
            for _ in range(5):
                plain.append(timed(lambda: F.linear(x, weight), repeats))
                fast.append(timed(lambda: kernels.linear(x, weight, packed), repeats))
            rows.append({"layer": name, "rows": m, "f_linear_ms": statistics.median(plain),
                         "packed_ms": statistics.median(fast)})
    print(f"{'layer':<10}{'rows':>6}{'F.linear ms':>13}{'packed ms':>11}{'speed-up':>10}")
    for r in rows:
        r["speedup"] = r["f_linear_ms"] / r["packed_ms"]
        print(f"{r['layer']:<10}{r['rows']:>6}{r['f_linear_ms']:>13.3f}{r['packed_ms']:>11.3f}"
              f"{r['speedup']:>10.2f}")
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "cpu_linear.json").write_text(json.dumps({"threads": args.threads, "rows": rows},
                                                    indent=2))


if __name__ == "__main__":
    main()
