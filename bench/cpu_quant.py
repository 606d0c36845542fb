"""The quantized matmul (``laser_quant.c``) per projection of SmolLM2-135M, side by side.

    .venv/bin/python bench/cpu_quant.py [--vs /tmp/old.so] [--rows 1,16,64] [--threads 1,2]
                                        [--isa avx2] [--parts 2] [--rounds 5]
    .venv/bin/python bench/cpu_quant.py --step [--vs /tmp/old.so] [--rows 1,16,64]
                                        [--threads 2] [--spin 25]
    .venv/bin/python bench/cpu_quant.py --formats Q8_0,Q4_1,Q4_K,Q5_K,Q6_K,Q5_0,Q5_1
                                        [--rows 1,16] [--threads 1,2] [--parts 1]

The bundled model's shapes and formats (fused QKV, O, gate-up, down as Q4_1; the LM head as
Q8_0), random weights in those blocks, float32 activations in and out, as the engine calls
``laser_gemm_q``. ``--vs`` names another build of the kernels (e.g. main's, compiled into
/tmp) loaded beside this tree's in the same process: each case alternates the two ``rounds``
times and reports each one's median and old/new (> 1: this tree faster). ``--isa`` caps the
path in both (``avx2`` forces the AVX2 path on an AVX-512 machine; ``--lib`` a build with
``-march=x86-64-v3`` has an AVX2-only machine's 16 registers); ``--parts`` 2 is the two-part
activations of ``quant`` decode steps and prompts, 1 is ``q8``'s decode (the LM head screens
on one part always). Writes
``bench/out/cpu_quant.json``.

``--step``: a whole decode step's matmuls instead (30 layers of the four projections, each
layer its own weights, 50 MB of Q4_1, then the 28 MB Q8_0 head: they stream from memory as in
the engine), one thread (CPU time) or, with ``--threads N``, the pool's N (wall time; its
workers poll ``--spin`` microseconds after each call, the engine's ``LASER_POOL_SPIN_US``), each
build in turn per round; writes ``bench/out/cpu_quant_step.json``.

``--formats``: every named block format on one shape (a ~1B Llama's gate-up, 8 copies each
so that they stream from memory), the formats side by side in each round: ms a pass, GB/s of
packed weights read, bits a weight as packed and the time against Q8_0's and Q4_1's; writes
``bench/out/cpu_quant_formats.json``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels import _cpu  # noqa: E402
from kernels._cpu import quant  # noqa: E402

Q4_1, Q8_0 = quant.Q4_1, quant.Q8_0
SHAPES = {"qkv": (960, 576, Q4_1), "o": (576, 576, Q4_1), "gate_up": (3072, 576, Q4_1),
          "down": (576, 1536, Q4_1), "lm_head": (49152, 576, Q8_0)}
ONE_PART = {"lm_head"}  # the head screens on one part in every mode


def load(path: str | None) -> ctypes.CDLL:
    lib = _cpu.library() if path is None else ctypes.CDLL(path)
    for name, args in _cpu.SIGNATURES.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes, fn.restype = args, _cpu.RESTYPES.get(name)
    return lib


# where a GGUF block keeps its float16 scale(s): d (and m / dmin)
SCALE_AT = {quant.Q4_0: (0,), quant.Q4_1: (0, 2), quant.Q5_0: (0,), quant.Q5_1: (0, 2),
            quant.Q8_0: (0,), quant.Q4_K: (0, 2), quant.Q5_K: (0, 2), quant.Q6_K: (208,)}


def random_blocks(n: int, k: int, fmt: int, rng: np.random.Generator) -> np.ndarray:
    """GGUF rows of random values with sane float16 scales."""
    width, size = quant.GGUF_BLOCKS[fmt]
    nb = k // width
    raw = rng.integers(0, 256, (n * nb, size), dtype=np.uint8)
    for i, at in enumerate(SCALE_AT[fmt]):
        scale = (rng.random((n * nb, 1)) * 0.01 + 0.001) * (-5 if i else 1)
        raw[:, at:at + 2] = scale.astype(np.float16).view(np.uint8)
    return raw


def packed(lib: ctypes.CDLL, raw: np.ndarray, fmt: int, n: int, k: int) -> torch.Tensor:
    src = torch.from_numpy(raw.reshape(-1))
    size = (lib.laser_q_packed_bytes(fmt, n, k) if hasattr(lib, "laser_q_packed_bytes")
            else lib.laser_q_block_bytes(fmt) * (-(-n // 16)) * (k // 32))
    data = torch.empty(size, dtype=torch.uint8)
    lib.laser_pack_q(src.data_ptr(), fmt, n, k, data.data_ptr())
    return data


def timed(fn, clock, budget_s: float = 0.05) -> float:
    fn()
    reps, t0 = 0, clock()
    while (elapsed := clock() - t0) < budget_s or reps < 3:
        fn()
        reps += 1
    return elapsed / reps * 1e3


def step(libs: dict[str, ctypes.CDLL], rows_list: list[int], rounds: int, parts: int,
         threads: int = 1) -> None:
    """The decode step's 121 calls on ``threads`` (one: CPU time, more: wall time), each build
    in turn per round. The packed layout is the same in both builds: one set of weights
    serves both."""
    rng = np.random.default_rng(0)
    first = next(iter(libs.values()))
    calls = []
    for name in ("qkv", "o", "gate_up", "down") * 30 + ("lm_head",):
        n, k, fmt = SHAPES[name]
        w = packed(first, random_blocks(n, k, fmt, rng), fmt, n, k)
        calls.append((n, k, fmt, w, 0 if name in ONE_PART else parts - 1))
    print(f"{'rows':>4} " + " ".join(f"{n:>8}" for n in libs) + "  old/new  (ms a step)")
    results = []
    for rows in rows_list:
        xs = {k: torch.randn(rows, k) for k in (576, 1536)}
        outs = {n: torch.empty(rows, n) for n in (960, 576, 3072, 49152)}

        def run(lib: ctypes.CDLL) -> None:
            for n, k, fmt, w, split in calls:
                lib.laser_gemm_q(xs[k].data_ptr(), 0, rows, k, w.data_ptr(), fmt, n,
                                 outs[n].data_ptr(), 0, threads, split, 0)

        clock = time.thread_time if threads == 1 else time.perf_counter
        times: dict[str, list[float]] = {key: [] for key in libs}
        for _ in range(rounds):
            for key, lib in libs.items():
                times[key].append(timed(lambda lib=lib: run(lib), clock, 0.3))
        med = {key: statistics.median(v) for key, v in times.items()}
        ratio = med["old"] / med["new"] if "old" in libs else None
        print(f"{rows:>4} " + " ".join(f"{med[k]:8.2f}" for k in libs)
              + (f"  {ratio:7.3f}" if ratio else ""), flush=True)
        results.append({"rows": rows, "ms": med, "ratio": ratio, "all_ms": times})
    out_dir = Path(__file__).resolve().parent / "out"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "cpu_quant_step.json").write_text(json.dumps(
        {"parts": parts, "rounds": rounds, "results": results}, indent=1))


# --formats: a Llama-3-1B-shaped gate-up projection (16384 x 2048), LAYERS distinct copies
# per format (over 100 MB in every format: they stream from memory, as in a decode step)
FORMAT_SHAPE, LAYERS = (16384, 2048), 8


def formats(libs: dict[str, ctypes.CDLL], fmts: list[int], rows_list: list[int],
            threads_list: list[int], rounds: int, parts: int) -> list[dict]:
    """Each format's LAYERS matmuls in turn, every format (and build) once per round, side by
    side: ms a pass, GB/s of packed weight bytes read, and time against Q8_0's and Q4_1's."""
    rng = np.random.default_rng(0)
    n, k = FORMAT_SHAPE
    first = next(iter(libs.values()))  # one packed layout serves every build
    weights = {f: [packed(first, random_blocks(n, k, f, rng), f, n, k) for _ in range(LAYERS)]
               for f in fmts}
    results = []
    print(f"{'build':>5} {'format':>6} {'rows':>4} {'thr':>3} {'ms':>8} {'GB/s':>6} "
          f"{'bits/w':>6} {'xQ8_0':>6} {'xQ4_1':>6}")
    for rows in rows_list:
        x, out = torch.randn(rows, k), torch.empty(rows, n)
        for threads in threads_list:
            clock = time.thread_time if threads == 1 else time.perf_counter
            cases = [(key, f) for f in fmts for key in libs]
            times: dict[tuple[str, int], list[float]] = {c: [] for c in cases}
            for _ in range(rounds):
                for key, f in cases:
                    def run(lib: ctypes.CDLL = libs[key], f: int = f) -> None:
                        for w in weights[f]:
                            lib.laser_gemm_q(x.data_ptr(), 0, rows, k, w.data_ptr(), f, n,
                                             out.data_ptr(), 0, threads, parts - 1, 0)
                    times[key, f].append(timed(run, clock, 0.2))
            med = {c: statistics.median(v) for c, v in times.items()}
            for key, f in cases:
                nbytes = sum(w.numel() for w in weights[f])
                rel = [med[key, f] / med[key, b] if (key, b) in med else float("nan")
                       for b in (quant.Q8_0, quant.Q4_1)]
                print(f"{key:>5} {quant.FORMATS[f]:>6} {rows:>4} {threads:>3} "
                      f"{med[key, f]:8.2f} {nbytes / med[key, f] / 1e6:6.1f} "
                      f"{8 * nbytes / LAYERS / n / k:6.2f} {rel[0]:6.2f} {rel[1]:6.2f}",
                      flush=True)
                results.append({"build": key, "fmt": quant.FORMATS[f], "rows": rows,
                                "threads": threads, "ms": med[key, f], "bytes": nbytes,
                                "all_ms": times[key, f]})
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vs", help="another build of the kernels (.so) to alternate with")
    parser.add_argument("--lib", help="this side's build (default: this tree's, built here)")
    parser.add_argument("--rows", default="1,16,64")
    parser.add_argument("--threads", default=None, help="default: 1,2 (--step: 1)")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--isa", choices=quant.ISAS, help="cap the path (both builds)")
    parser.add_argument("--parts", type=int, choices=(1, 2), default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--step", action="store_true", help="a whole decode step's matmuls")
    parser.add_argument("--formats", help="each of these formats side by side (e.g. "
                        "Q8_0,Q4_1,Q4_K,Q5_K,Q6_K,Q5_0,Q5_1) on a 1B model's gate-up shape")
    parser.add_argument("--spin", type=int, default=25,
                        help="microseconds the pool's workers poll after a call")
    args = parser.parse_args()
    libs = {"new": load(args.lib)}
    if args.vs:
        libs = {"old": load(args.vs), **libs}
    for lib in libs.values():
        lib.laser_quant_isa(quant.ISAS.index(args.isa) if args.isa else len(quant.ISAS))
        lib.laser_pool_reserve(2)
        if hasattr(lib, "laser_pool_set_spin"):
            lib.laser_pool_set_spin(args.spin)
    isa = quant.ISAS[libs["new"].laser_quant_isa(-1)]
    rng = np.random.default_rng(0)
    rows_list = [int(r) for r in args.rows.split(",")]
    if args.step:
        threads = max(int(t) for t in (args.threads or "1").split(","))
        print(f"path {isa}, parts {args.parts}, rounds {args.rounds}, " + (
            "one thread, CPU time" if threads == 1 else f"{threads} threads, wall time"))
        return step(libs, rows_list, args.rounds, args.parts, threads)
    if args.formats:
        names = {v: f for f, v in quant.FORMATS.items()}
        threads_list = [int(t) for t in (args.threads or "1").split(",")]
        print(f"path {isa}, parts {args.parts}, rounds {args.rounds}, {LAYERS} x "
              f"{FORMAT_SHAPE} per format; ms a pass, median (1 thread: CPU time)")
        found = formats(libs, [names[f] for f in args.formats.split(",")], rows_list,
                        threads_list, args.rounds, args.parts)
        out_dir = Path(__file__).resolve().parent / "out"
        out_dir.mkdir(exist_ok=True)
        (out_dir / "cpu_quant_formats.json").write_text(json.dumps(
            {"isa": isa, "parts": args.parts, "results": found}, indent=1))
        return None
    results = []
    print(f"path {isa}, parts {args.parts}, rounds {args.rounds}; ms, median (1 thread: CPU "
          "time of the caller; 2: wall time)")
    head = f"{'shape':>8} {'rows':>4} {'thr':>3} " + " ".join(f"{n:>8}" for n in libs)
    print(head + ("  old/new" if args.vs else ""))
    for name in args.shapes.split(","):
        n, k, fmt = SHAPES[name]
        raw = random_blocks(n, k, fmt, rng)
        split = 0 if name in ONE_PART else args.parts - 1
        weights = {key: packed(lib, raw, fmt, n, k) for key, lib in libs.items()}
        for rows in rows_list:
            x = torch.randn(rows, k)
            for threads in (int(t) for t in (args.threads or "1,2").split(",")):
                # one thread: the caller's CPU time (what other processes on the machine take
                # does not count); more: wall time (the pool's workers run beside it)
                clock = time.thread_time if threads == 1 else time.perf_counter
                times: dict[str, list[float]] = {key: [] for key in libs}
                outs = {}
                for _ in range(args.rounds):
                    for key, lib in libs.items():
                        out = torch.empty(rows, n)
                        outs[key] = out

                        def call(lib=lib, w=weights[key], out=out) -> None:
                            lib.laser_gemm_q(x.data_ptr(), 0, rows, k, w.data_ptr(), fmt, n,
                                             out.data_ptr(), 0, threads, split, 0)

                        times[key].append(timed(call, clock))
                med = {key: statistics.median(v) for key, v in times.items()}
                same = all(torch.equal(outs["new"], o) for o in outs.values())
                line = f"{name:>8} {rows:>4} {threads:>3} " + " ".join(
                    f"{med[key]:8.3f}" for key in libs)
                ratio = med["old"] / med["new"] if args.vs else None
                if ratio is not None:
                    line += f"  {ratio:7.2f}" + ("" if same else "  DIFFERENT BITS")
                print(line, flush=True)
                results.append({"shape": name, "n": n, "k": k, "fmt": quant.FORMATS[fmt],
                                "rows": rows, "threads": threads, "ms": med, "ratio": ratio,
                                "identical": same})
    out_dir = Path(__file__).resolve().parent / "out"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "cpu_quant.json").write_text(json.dumps(
        {"isa": isa, "parts": args.parts, "rounds": args.rounds, "vs": args.vs,
         "results": results}, indent=1))


if __name__ == "__main__":
    main()
