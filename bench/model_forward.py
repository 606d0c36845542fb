"""Model-only timings against the machine's limits: decode steps and prefills of the default
model, each stated as a share of ``bench/roofline.py``'s peaks.

    .venv/bin/python bench/model_forward.py [--mode quant] [--rows 1,16,64]
        [--prefill 512,2000,8000] [--chunk 512] [--threads 2] [--load]

- decode: one step of ``--rows`` sequences at a 128-token context (median of repeats);
- prefill: a prompt of each ``--prefill`` length in chunks of ``--chunk`` tokens (the steps a
  server runs for it alone), then its first token's logits;
- ``--load``: cold and warm start of the model (weights cache empty, then filled).

Each row gives its time (wall, and the process's CPU seconds over the threads: on a shared
machine the wall time counts the other processes' turns), tokens/s, and its share of the int8
dot-product peak (useful multiply-adds of the matmuls, LM head included, not the second
activation part), of the bfloat16 and float32 matmul peaks (the same FLOPs plus the
attention's) and of the read bandwidth (the weight bytes a step reads). Shares use the CPU
time. Prints a table; writes ``bench/out/model_forward.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import roofline  # noqa: E402

import kernels  # noqa: E402
from inference.loaders import load_model  # noqa: E402
from inference.model import AttentionMetadata  # noqa: E402
from kernels import _cpu  # noqa: E402

BLOCK, CONTEXT, REPEATS = 16, 128, 9


def timed(fn) -> tuple[float, float]:
    """(wall, CPU seconds over torch's threads) of one ``fn()``."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, (time.process_time() - c0) / torch.get_num_threads()


def model_work(model) -> dict[str, float]:
    """Per token: matmul multiply-adds (layers, head), weight bytes a step reads; per pair of
    positions: attention multiply-adds (QK and PV over every head, a layer each)."""
    cfg = model.config
    per_layer = sum(p.numel() for n, p in model.named_parameters()
                    if n.startswith("layers.0.") and p.dim() == 2)
    head = model.head.numel()
    state = model.pack_state()
    nbytes = (sum(p.nbytes for layer in state.layers for p in layer.decode)
              + state.head_screen.nbytes) if state.quantized else \
        (per_layer * cfg.num_layers + head) * 4
    return {"macs": per_layer * cfg.num_layers + head, "bytes": nbytes,
            "attn_macs_per_pair": 2 * cfg.num_heads * cfg.head_dim * cfg.num_layers}


def shares(limits: dict, work: dict, tokens: int, pairs: float, seconds: float,
           reads: int) -> dict[str, float]:
    mm = 2 * work["macs"] * tokens
    out = roofline.fractions(limits, int8_ops=mm, flops=mm + 2 * work["attn_macs_per_pair"]
                             * pairs, bytes_read=work["bytes"] * reads, seconds=seconds)
    return {k: round(v, 4) for k, v in out.items()}


def decode_row(model, rows: int, limits: dict, work: dict) -> dict:
    blocks = CONTEXT // BLOCK + 1
    caches = model.allocate_kv_caches(rows * blocks, BLOCK)
    tables = [[s * blocks + j for j in range(blocks)] for s in range(rows)]
    meta = AttentionMetadata.build(tables, [CONTEXT] * rows, [1] * rows, BLOCK)
    ids = torch.randint(0, model.config.vocab_size, (rows,))
    pos = torch.full((rows,), CONTEXT - 1)

    def step() -> None:
        model.compute_logits(model(ids, pos, caches, meta))
    with torch.inference_mode():
        step()
        runs = [timed(step) for _ in range(REPEATS)]
    wall, cpu = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
    return {"what": f"decode {rows} rows", "wall_ms": wall * 1e3, "cpu_ms": cpu * 1e3,
            "tok_s": rows / cpu, **shares(limits, work, rows, rows * CONTEXT, cpu, 1)}


def prefill_row(model, length: int, chunk: int, limits: dict, work: dict) -> dict:
    blocks = length // BLOCK + 1
    caches = model.allocate_kv_caches(blocks, BLOCK)
    ids = torch.randint(0, model.config.vocab_size, (length,))

    def prefill() -> None:
        for s in range(0, length, chunk):
            n = min(chunk, length - s)
            meta = AttentionMetadata.build([list(range(blocks))], [s + n], [n], BLOCK)
            hidden = model(ids[s:s + n], torch.arange(s, s + n), caches, meta)
        model.compute_logits(hidden[-1:], exact=True)
    with torch.inference_mode():
        prefill()
        wall, cpu = min((timed(prefill) for _ in range(2)), key=lambda r: r[1])
    steps = -(-length // chunk)
    return {"what": f"prefill {length} (chunk {chunk})", "wall_ms": wall * 1e3,
            "cpu_ms": cpu * 1e3, "tok_s": length / cpu,
            **shares(limits, work, length, length * (length + 1) / 2, cpu, steps)}


def load_rows() -> dict:
    with tempfile.TemporaryDirectory() as cache:
        cold = load_model(cache_dir=cache).load_seconds
        warm = load_model(cache_dir=cache).load_seconds
    return {"load_cold_s": cold, "load_warm_s": warm}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", default="quant", help="kernels.MatmulMode value (quant, q8, bf16)")
    ap.add_argument("--rows", default="1,16,64")
    ap.add_argument("--prefill", default="512,2000")
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--load", action="store_true", help="also time the model's start")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    limits = roofline.measure(args.threads, quick=True)
    model = load_model().model
    model.pack_linears(kernels.MatmulMode(args.mode))
    _cpu.set_threads(args.threads)
    work = model_work(model)
    rows = [decode_row(model, int(n), limits, work) for n in args.rows.split(",") if n]
    rows += [prefill_row(model, int(n), args.chunk, limits, work)
             for n in args.prefill.split(",") if n]
    print(f"limits ({args.threads} threads): int8 {limits['int8_peak_gops']:.0f} GOP/s, bf16 "
          f"{limits['bf16_gflops']:.0f}, f32 {limits['f32_gflops']:.0f} GFLOP/s, read "
          f"{limits['read_gbs']:.1f} GB/s; load average {os.getloadavg()[0]:.2f}")
    print(f"{'what':<26}{'wall ms':>10}{'cpu ms':>10}{'tok/s':>9}{'of int8':>9}{'of bf16':>9}"
          f"{'of f32':>8}{'of read':>9}")
    for r in rows:
        print(f"{r['what']:<26}{r['wall_ms']:>10.1f}{r['cpu_ms']:>10.1f}{r['tok_s']:>9.1f}"
              f"{r['of_int8']:>9.1%}{r['of_bf16']:>9.1%}{r['of_f32']:>8.1%}{r['of_read']:>9.1%}")
    result = {"mode": args.mode, "threads": args.threads, "limits": limits, "rows": rows,
              "load_average": os.getloadavg()[0], **(load_rows() if args.load else {})}
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "model_forward.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
