"""Prefill side by side with llama.cpp: one long prompt at a time, on the same GGUF.

    .venv/bin/python bench/prefill.py --peer PATH/llama-server [--lengths 512,2000,8000]
        [--rounds 3]

Each round sends, for each length, the same fresh random token ids (no cached prefix) to
llama.cpp's ``llama-server`` (``-t <cores> -c <longest + 64> -np 1``, ``/completion`` with
``n_predict`` 1 and ``cache_prompt`` false: its own ``timings.prompt_ms``) and to Laser's
engine in process, configured as the platform's defaults are (``matmul_dtype`` auto, a 2,048
token step budget, one narrow and every core as wide threads), once as a hot request and once
as a cold one (the time from ``add_request`` to the step that returns the first token). The
runs alternate, so that the load of a shared machine hits each alike. Prints per length the
median prefill tokens/s of each, the ratios Laser / llama.cpp and hot / cold, the share of the
bfloat16 matmul peak (``bench/roofline.py``; matmul and attention FLOPs) and the load average;
writes ``bench/out/prefill.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import roofline  # noqa: E402

from inference.engine import EngineConfig, LLMEngine  # noqa: E402
from inference.loaders import default_model_path  # noqa: E402
from inference.request import EngineRequest, SamplingParams, Tier  # noqa: E402

PORT = 8093


def start_peer(binary: str, context: int, threads: int) -> subprocess.Popen:
    proc = subprocess.Popen([binary, "-m", str(default_model_path()), "-t", str(threads),
                             "-c", str(context), "-np", "1", "--port", str(PORT)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=1)
            return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("llama-server did not start")


def peer_prefill_s(ids: list[int]) -> float:
    body = json.dumps({"prompt": ids, "n_predict": 1, "cache_prompt": False}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}/completion", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as resp:
        return json.load(resp)["timings"]["prompt_ms"] / 1e3


def laser_prefill_s(engine: LLMEngine, ids: list[int], tier: Tier, rid: str) -> float:
    sp = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    t0 = time.perf_counter()
    engine.add_request(EngineRequest(rid, sp, prompt_token_ids=ids, tier=tier, tenant_id=rid))
    while engine.has_unfinished():
        if any(d.token_ids for d in engine.step()):
            return time.perf_counter() - t0
    return time.perf_counter() - t0


def flops(engine: LLMEngine, n: int) -> float:
    model = engine.runner.model
    cfg = model.config
    macs = sum(p.numel() for name, p in model.named_parameters()
               if name.startswith("layers.") and p.dim() == 2) + model.head.numel() / n
    return 2 * n * macs + 2 * cfg.num_layers * cfg.num_heads * cfg.head_dim * n * (n + 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peer", required=True, help="llama-server binary")
    ap.add_argument("--lengths", default="512,2000,8000")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    cores = len(os.sched_getaffinity(0))
    limits = roofline.measure(cores, quick=True)
    engine = LLMEngine(EngineConfig(matmul_dtype="auto", kv_memory_mb=1024,
                                    max_num_batched_tokens=2048, num_threads=max(1, cores - 1),
                                    wide_threads=cores))
    peer = start_peer(args.peer, max(lengths) + 64, cores)
    times: dict[tuple[str, int], list[float]] = {}
    loads = []
    try:
        rnd = random.Random(46)
        for r in range(-1, args.rounds):  # round -1 warms both up
            for n in lengths:
                ids = [rnd.randrange(100, 40000) for _ in range(n)]
                got = {"llama.cpp": peer_prefill_s(ids),
                       "laser hot": laser_prefill_s(engine, ids, Tier.HOT, f"h{r}-{n}"),
                       "laser cold": laser_prefill_s(engine, ids, Tier.COLD, f"c{r}-{n}")}
                loads.append(os.getloadavg()[0])
                if r >= 0:
                    for k, v in got.items():
                        times.setdefault((k, n), []).append(v)
                print(f"round {r} {n}: " + ", ".join(f"{k} {n / v:.0f} tok/s"
                                                     for k, v in got.items()), flush=True)
    finally:
        peer.terminate()
        peer.wait()
    rows = []
    for n in lengths:
        med = {k: statistics.median(times[(k, n)]) for k in ("llama.cpp", "laser hot",
                                                             "laser cold")}
        rows.append({"tokens": n, **{f"{k} tok/s": n / v for k, v in med.items()},
                     "hot / llama.cpp": med["llama.cpp"] / med["laser hot"],
                     "cold / llama.cpp": med["llama.cpp"] / med["laser cold"],
                     "hot / cold": med["laser cold"] / med["laser hot"],
                     "cold of bf16 peak": flops(engine, n) / med["laser cold"]
                     / (limits["bf16_gflops"] * 1e9)})
    print(f"limits: bf16 {limits['bf16_gflops']:.0f} GFLOP/s, int8 "
          f"{limits['int8_peak_gops']:.0f} GOP/s; load average {min(loads):.1f}-{max(loads):.1f}")
    keys = list(rows[0])
    print(" | ".join(keys))
    for row in rows:
        print(" | ".join(f"{row[k]:.2f}" if isinstance(row[k], float) else str(row[k])
                         for k in keys))
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "prefill.json").write_text(json.dumps({"limits": limits, "rows": rows,
                                                  "load_average": loads}, indent=2))


if __name__ == "__main__":
    main()
