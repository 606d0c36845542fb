"""This machine's limits: peak int8 dot-product rate, matmul peak, read bandwidth.

    .venv/bin/python bench/roofline.py [--threads 1,2] [--quick]

- int8 (``roofline.c``, compiled as ``kernels/_cpu`` is, ``-O3 -march=native``): independent
  chains of VPDPBUSD on 512-bit and 256-bit registers (AVX-512 VNNI / AVX-VNNI) and of AVX2's
  VPMADDUBSW + VPMADDWD + VPADDD, on registers only, in GOP/s (2 operations per byte pair);
- bfloat16 and float32: ``torch.matmul`` of 2048 x 2048 matrices (oneDNN, all cores by
  default), in GFLOP/s;
- read bandwidth: ``torch.sum`` over a 256 MiB float32 tensor, in GB/s.

Each figure is the best of several runs, at each thread count of ``--threads`` (default 1 and
every core). The decode and prefill benchmarks (``engine_throughput.py``, ``model_forward.py``,
``peers.py``) import :func:`measure` and :func:`fractions` to state what part of each limit
they reach. Prints a table; writes ``bench/out/roofline.json``.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels._cpu import FLAGS  # noqa: E402

SOURCE = Path(__file__).with_name("roofline.c")
INT8_PATHS = ("vnni512", "vnni256", "avx2")  # roofline.c's path numbers, in order
OUT = Path(__file__).resolve().parent / "out"


@functools.cache
def _library() -> ctypes.CDLL:
    """``roofline.c`` built with the kernels' flags, cached under a hash of source and flags."""
    cc = os.environ.get("CC", "cc")
    key = hashlib.sha256("\0".join([SOURCE.read_text(), cc, *FLAGS]).encode()).hexdigest()[:16]
    base = Path(os.environ.get("LASER_NATIVE_DIR") or Path.home() / ".cache" / "laser" / "native")
    path = base / f"roofline-{key}.so"
    if not path.exists():
        base.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run([cc, *FLAGS, str(SOURCE), "-o", str(tmp)], check=True,
                       capture_output=True, text=True, timeout=120)
        os.replace(tmp, path)
    lib = ctypes.CDLL(str(path))
    lib.roofline_run.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int)
    lib.roofline_run.restype = ctypes.c_int64
    lib.roofline_pairs.argtypes = (ctypes.c_int,)
    lib.roofline_pairs.restype = ctypes.c_int64
    return lib


def _best_of(fn, repeats: int, threads: int) -> float:
    """The shortest run of ``fn`` in seconds of ``threads`` cores' own time: the process's CPU
    time over ``threads`` where that is shorter than the wall time, so that a run the other
    processes of a shared machine took cores from counts the time it held them (the
    machine's limit, not its share of it)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = time.perf_counter() - w0, (time.process_time() - c0) / threads
        best = min(best, min(wall, cpu) if cpu > 0 else wall)
    return best


def int8_gops(path: str, threads: int, repeats: int = 5, iters: int = 2_000_000) -> float:
    """Peak int8 multiply-adds of ``path`` (``INT8_PATHS``) on ``threads`` threads, GOP/s
    (0 where this CPU lacks the path)."""
    lib, number = _library(), INT8_PATHS.index(path)
    pairs = lib.roofline_pairs(number)
    if not pairs:
        return 0.0
    groups = lib.roofline_run(number, iters, threads)
    return 2 * pairs * groups / _best_of(lambda: lib.roofline_run(number, iters, threads),
                                         repeats, threads) / 1e9


def matmul_gflops(dtype: torch.dtype, threads: int, repeats: int = 5, size: int = 2048) -> float:
    """``torch.matmul`` FLOP/s of ``size``-square matrices in ``dtype`` on ``threads``."""
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
        return 2 * size**3 / _best_of(lambda: a @ b, repeats, threads) / 1e9
    finally:
        torch.set_num_threads(saved)


def read_gbs(threads: int, repeats: int = 7) -> float:
    """Bytes read per second summing a 256 MiB float32 tensor on ``threads``."""
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        src = torch.empty(64 * 2**20, dtype=torch.float32).uniform_()
        return src.numel() * 4 / _best_of(src.sum, repeats, threads) / 1e9
    finally:
        torch.set_num_threads(saved)


def measure(threads: int | None = None, quick: bool = False) -> dict[str, float]:
    """Every limit on ``threads`` (default: every core): ``int8_<path>_gops``,
    ``bf16_gflops``, ``f32_gflops``, ``read_gbs``, and ``int8_peak_gops`` (the best path)."""
    threads = threads or len(os.sched_getaffinity(0))
    repeats = 2 if quick else 5
    out = {f"int8_{p}_gops": int8_gops(p, threads, repeats) for p in INT8_PATHS}
    out["int8_peak_gops"] = max(out.values())
    out["bf16_gflops"] = matmul_gflops(torch.bfloat16, threads, repeats)
    out["f32_gflops"] = matmul_gflops(torch.float32, threads, repeats)
    out["read_gbs"] = read_gbs(threads, repeats + 2)
    out["threads"] = threads
    out["load_average"] = os.getloadavg()[0]
    return out


def fractions(limits: dict[str, float], *, int8_ops: float = 0.0, flops: float = 0.0,
              bytes_read: float = 0.0, seconds: float) -> dict[str, float]:
    """What share of each limit a piece of work reached: ``int8_ops`` (multiply-adds x 2 on
    int8), ``flops`` (float multiply-adds x 2: against bfloat16's and float32's peaks) and
    ``bytes_read`` done in ``seconds``. Keys: ``of_int8``, ``of_bf16``, ``of_f32``,
    ``of_read``."""
    def share(amount: float, peak: float, unit: float) -> float:
        return amount / seconds / (peak * unit) if peak and amount else float("nan")
    return {"of_int8": share(int8_ops, limits.get("int8_peak_gops", 0.0), 1e9),
            "of_bf16": share(flops, limits.get("bf16_gflops", 0.0), 1e9),
            "of_f32": share(flops, limits.get("f32_gflops", 0.0), 1e9),
            "of_read": share(bytes_read, limits.get("read_gbs", 0.0), 1e9)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cores = len(os.sched_getaffinity(0))
    ap.add_argument("--threads", default=",".join(sorted({"1", str(cores)})))
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    args = ap.parse_args()
    rows = [measure(int(t), args.quick) for t in args.threads.split(",")]
    keys = [k for k in rows[0] if k not in ("threads", "load_average")]
    print(f"{'limit':<20}" + "".join(f"{str(r['threads']) + ' thr':>12}" for r in rows))
    for k in keys:
        print(f"{k:<20}" + "".join(f"{r[k]:>12.1f}" for r in rows))
    print(f"{'load average':<20}" + "".join(f"{r['load_average']:>12.2f}" for r in rows))
    OUT.mkdir(exist_ok=True)
    (OUT / "roofline.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
