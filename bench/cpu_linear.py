"""CPU linear layers: ``F.linear`` against ``kernels.linear`` with oneDNN-packed weights.

    .venv/bin/python bench/cpu_linear.py [--threads 1]

SmolLM2-135M's projection shapes (fused QKV, O, gate-up, down, LM head) at 1-300 rows, random
float32 weights, both paths alternating in one process; reports the median of each and the
ratio. Prints a table; writes ``bench/out/cpu_linear.json``.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
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
