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

``--auto``: the bundled model's whole decode step (``ModelRunner.execute``) under
``matmul_dtype=auto``, on the quantized blocks against the bfloat16 packs, at 1-32 rows (one
decode batch of that many streams, re-run on each side alternately); picks the crossover for
``EngineConfig.quant_max_rows``; writes ``bench/out/cpu_linear_auto.json``.
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
ROWS_AUTO = (1, 2, 4, 6, 8, 16, 32)


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


def _pack_mb(state) -> float:
    """MB of the distinct buffers a ``LlamaModel.pack_state`` holds (views counted once),
    less the float32 LM head every mode packs alike."""
    seen: dict[int, int] = {}
    state = [[(layer.decode, layer.prompt) for layer in state.layers], state.head_screen]

    def walk(x) -> None:
        if isinstance(x, (tuple, list)):
            for y in x:
                walk(y)
        elif isinstance(x, torch.Tensor) and x.is_mkldnn:  # oneDNN's packs: opaque
            seen[id(x)] = x.numel() * x.element_size()
        elif isinstance(x, torch.Tensor):
            seen[x.untyped_storage().data_ptr()] = x.untyped_storage().nbytes()
        elif hasattr(x, "data") and isinstance(x.data, torch.Tensor):
            walk(x.data)

    walk(state)
    return sum(seen.values()) / 1e6


def auto_step(threads: int, rounds: int, wide: int | None = None) -> None:
    from inference.engine import EngineConfig, LLMEngine
    from inference.request import EngineRequest, SamplingParams

    engine = LLMEngine(EngineConfig(matmul_dtype="auto", num_threads=threads, max_num_seqs=64,
                                    kv_memory_mb=256, wide_threads=wide))
    runner = engine.runner
    if runner._pack_sets is None:
        sys.exit("auto keeps one pack set here (needs the quantized and bfloat16 matmuls)")
    quant_state, bf16_state = runner._pack_sets
    mb = {"quant_packs_mb": _pack_mb(quant_state), "bfloat16_packs_mb": _pack_mb(bf16_state)}
    print(f"resident packs: quantized {mb['quant_packs_mb']:.0f} MB, "
          f"bfloat16 {mb['bfloat16_packs_mb']:.0f} MB", flush=True)
    prepare, seen = runner.prepare, []
    runner.prepare = lambda plan, seqs: seen.append(prepare(plan, seqs)) or seen[-1]
    sp = SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True)
    rows = []
    for m in ROWS_AUTO:
        for i in range(m):
            engine.add_request(EngineRequest(f"{m}-{i}", sp, prompt="The capital of France"))
        seen.clear()
        while not any(b.meta.is_decode_only and b.num_tokens == m for b in seen):
            if not engine.has_unfinished():
                sys.exit(f"no decode step of {m} rows")
            engine.step()
        batch = seen[-1]
        times = {"quant": [], "bfloat16": []}
        for _ in range(rounds):
            for name, side in (("quant", kernels.Side.QUANT), ("bfloat16", kernels.Side.BF16)):
                batch.side = side  # the step runs on this side whatever the table's bands say
                times[name].append(timed(lambda: runner.execute(batch), 3))
                assert runner.packs_in_use is side
        while engine.has_unfinished():
            engine.step()
        row = {"rows": m, **{f"{k}_ms": statistics.median(v) for k, v in times.items()}}
        row["quant_speedup"] = row["bfloat16_ms"] / row["quant_ms"]
        rows.append(row)
        print(row, flush=True)
    print(f"decode step under auto, {threads} thread(s), pool {runner.pool_threads}, "
          f"median of {rounds} alternations")
    print(f"{'rows':>6}{'quant ms':>10}{'bf16 ms':>10}{'bf16/quant':>12}")
    for r in rows:
        print(f"{r['rows']:>6}{r['quant_ms']:>10.2f}{r['bfloat16_ms']:>10.2f}"
              f"{r['quant_speedup']:>12.2f}")
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    report = {"threads": threads, **mb, "rows": rows}
    (out / "cpu_linear_auto.json").write_text(json.dumps(report, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--model", action="store_true",
                    help="a whole decode step's bfloat16 matmuls: oneDNN against Laser's")
    ap.add_argument("--auto", action="store_true",
                    help="a whole decode step under matmul_dtype=auto: quant against bfloat16")
    ap.add_argument("--wide-threads", type=int, default=None,
                    help="--auto: the engine's wide (and pool) threads; the platform's default "
                         "is every core with --threads one fewer")
    ap.add_argument("--rounds", type=int, default=5, help="--auto: alternations per row count")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.auto:
        auto_step(args.threads, args.rounds, args.wide_threads)
        return
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
