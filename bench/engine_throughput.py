"""Engine decode throughput side by side with ``transformers.generate`` on the same model.

    .venv/bin/python bench/engine_throughput.py [--tokens 128] [--dtypes float32,mixed,bfloat16]
        [--streams 1,16,64] [--threads 1,2] [--rounds 2] [--skip-hf]

Same bundled SmolLM2-135M GGUF, same chat prompts, greedy, ``--tokens`` new tokens per
request (EOS ignored so every row produces the same count), 1 stream and 16 concurrent:

- Laser: ``LLMEngine.step()`` until every request finishes (continuous batching, paged KV);
- transformers: one batched ``generate`` (left padding, ``min_new_tokens`` = ``max_new_tokens``).

Laser modes: ``float32`` (the default, exact), ``mixed`` (``matmul_dtype=bfloat16``: the layers'
projections on the CPU's bfloat16 units, everything else float32) and ``bfloat16`` (weights
and activations); a mode with ``-torch`` appended (``mixed-torch``) runs the model's layers on
PyTorch ops instead of the C kernels of ``kernels/_cpu``, for the before/after of those; with
``-onednn`` (``mixed-onednn``) the bfloat16 decode matmuls stay on oneDNN where one thread would
give them to Laser's own matmul (``kernels.pack_linear_weight(..., native=True)``); ``quant``
and ``q8`` (``matmul_dtype=quant``/``q8``: the GGUF's Q4_1/Q8_0 blocks times int8-quantised
activations, in two parts or one, ``kernels._cpu.quant``); ``auto`` (``matmul_dtype=auto``:
both packs, the quantized ones for steps of at most ``quant_max_rows`` tokens).
``--threads`` sets the engines' threads, a list runs each mode at each count (default: every
core). Every (mode, threads) engine is built first, then ``--rounds`` rounds run them in turn
(A B A B), so that machine noise hits every mode alike; each row is a round.

Per-step overhead: each row also reports the share of the engine's step time spent outside
the C kernels (``laser_*`` calls, timed around each ctypes call: the scheduler, batch
preparation, Python between the layers, sampling and detokenising are what is left) and the
share outside ``ModelRunner.execute`` (the engine's own work around the forward).

It also measures the machine's ceilings (``bench/roofline.py``: read bandwidth, matmul FLOP/s
in each dtype, the int8 dot-product peak) and reports each throughput as a fraction of them
(``of int8``, ``of bf16``: the decode rows' useful multiply-adds over each peak), and as a
fraction of its bound: the weight bytes a decode step must read over the bandwidth (1 stream),
the step's FLOPs over the matmul rate (16). Start-up: a second ``LLMEngine`` start (weights
cached) against ``transformers`` loading the GGUF. Prints a table; writes
``bench/out/engine_throughput.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import time
from pathlib import Path

# torch's OpenMP threads sleep between ops, as in the server (inference/__init__.py sets this
# before torch loads; here torch loads first): spinning, they take CPU the C kernels' pool needs
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import roofline  # noqa: E402

import kernels  # noqa: E402
from inference.engine import EngineConfig, LLMEngine  # noqa: E402
from inference.engine.runner import LayerwiseForward  # noqa: E402
from inference.loaders import default_model_path, load_model  # noqa: E402
from inference.request import EngineRequest, SamplingParams  # noqa: E402
from kernels import _cpu  # noqa: E402

QUESTIONS = [
    "Write a long story about a dragon who learns to bake bread.",
    "Explain in detail how a steam engine works.",
    "Describe the history of the Roman Empire.",
    "List the steps to plant a vegetable garden and explain each one.",
    "Why is the sky blue? Give a thorough explanation.",
    "Write a letter to a friend about your summer holiday.",
    "Explain how computers store numbers.",
    "Describe a day in the life of a lighthouse keeper.",
]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
MODES = {"float32": ("float32", None), "mixed": ("float32", "bfloat16"),
         "bfloat16": ("bfloat16", None), "quant": ("float32", "quant"),
         "q8": ("float32", "q8"), "auto": ("float32", "auto")}  # mode: (dtype, matmul_dtype)


def messages(i: int) -> list[dict]:
    return [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]


# ---- Laser ---------------------------------------------------------------------------------
@contextlib.contextmanager
def torch_layer_ops(enabled: bool = True):
    """While active, the model's CPU layers run on PyTorch ops (``kernels.use_native`` off)
    instead of the C kernels of ``kernels/_cpu``."""
    if not enabled:
        yield
        return
    saved = kernels.use_native
    kernels.use_native = lambda tensor: False
    try:
        yield
    finally:
        kernels.use_native = saved


def base_mode(mode: str) -> str:
    return mode.removesuffix("-torch").removesuffix("-onednn")


def laser_engine(mode: str, threads: int, policy: str = "laser") -> tuple[LLMEngine, float]:
    dtype, matmul_dtype = MODES[base_mode(mode)]
    saved = _cpu.gemm_supported
    if mode.endswith("-onednn"):
        _cpu.gemm_supported = lambda: False  # the weights are packed as the engine starts
    t0 = time.perf_counter()
    try:
        engine = LLMEngine(EngineConfig(dtype=dtype, matmul_dtype=matmul_dtype,
                                        max_num_seqs=64, num_threads=threads,
                                        kv_memory_mb=768, overload_ttft_factor=1e9,
                                        policy=policy))
    finally:
        _cpu.gemm_supported = saved
    return engine, time.perf_counter() - t0


class KernelClock:
    """Seconds spent inside the C kernels' ctypes calls (each ``laser_*`` entry point wrapped
    with a timer while active)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._saved: dict[str, object] = {}

    def __enter__(self) -> KernelClock:
        lib = _cpu.library()
        if lib is not None:
            for name in _cpu.SIGNATURES:
                fn = getattr(lib, name)
                self._saved[name] = fn
                setattr(lib, name, self._timed(fn))
        return self

    def _timed(self, fn):
        def call(*args):
            t0 = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.seconds += time.perf_counter() - t0
        return call

    def __exit__(self, *exc) -> None:
        lib = _cpu.library()
        for name, fn in self._saved.items():
            setattr(lib, name, fn)


class Breakdown:
    """Where a step's time goes: each part's seconds, timed by wrapping the engine's own
    methods on the instance (the C kernels' ctypes calls as ``KernelClock``). ``glue`` is
    the forward's time outside the C kernels (Python between the layers, torch ops:
    embedding, the LM head's rescoring, row selection); ``other`` what the step spends
    outside every named part (sampling rows, deltas, the engine's bookkeeping)."""

    PARTS = ("kernels", "glue", "schedule", "prepare", "sample", "update", "detokenise",
             "other")

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.seconds = dict.fromkeys(("forward", "schedule", "prepare", "sample", "update",
                                      "detokenise"), 0.0)
        self._undo: list = []

    def _wrap(self, obj, name: str, part: str) -> None:
        fn = getattr(obj, name)
        seconds = self.seconds

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds[part] += time.perf_counter() - t0

        if isinstance(obj, type):
            self._undo.append(lambda: setattr(obj, name, fn))
        else:
            self._undo.append(lambda: delattr(obj, name))
        setattr(obj, name, timed)

    def __enter__(self) -> Breakdown:
        from inference.tokenizer import Detokenizer

        eng = self.engine
        for name in ("execute", "begin"):
            self._wrap(eng.runner, name, "forward")
        self._wrap(LayerwiseForward, "advance", "forward")
        self._wrap(LayerwiseForward, "logits", "forward")
        self._wrap(eng.runner, "prepare", "prepare")
        self._wrap(eng.sampler, "sample", "sample")
        self._wrap(eng.scheduler, "schedule", "schedule")
        self._wrap(eng.scheduler, "update", "update")
        self._wrap(Detokenizer, "push", "detokenise")
        self._wrap(Detokenizer, "finish", "detokenise")
        return self

    def __exit__(self, *exc) -> None:
        for undo in reversed(self._undo):
            undo()

    def shares(self, total: float, kernels_s: float) -> dict[str, float]:
        s = self.seconds
        parts = {"kernels": kernels_s, "glue": s["forward"] - kernels_s,
                 **{k: s[k] for k in ("schedule", "prepare", "sample", "update",
                                      "detokenise")}}
        parts["other"] = total - sum(parts.values())
        return {k: v / total for k, v in parts.items()}


def laser_run(engine: LLMEngine, streams: int, tokens: int, tag: str) -> dict:
    sp = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    for i in range(streams):
        engine.add_request(EngineRequest(f"{tag}-{i}", sp, messages=messages(i), tenant_id="b"))
    first: float | None = None
    produced = 0
    t0 = time.perf_counter()
    with KernelClock() as clock, Breakdown(engine) as parts:
        while engine.has_unfinished():
            n = sum(len(d.token_ids) for d in engine.step())
            produced += n
            if first is None and n:
                first = time.perf_counter()
    end = time.perf_counter()
    total = end - t0
    shares = parts.shares(total, clock.seconds)
    return {"tokens": produced, "seconds": total, "tok_s": produced / total,
            "decode_tok_s": (produced - streams) / (end - first),
            "outside_kernels": 1 - clock.seconds / total,
            "outside_execute": 1 - parts.seconds["forward"] / total,
            "shares": shares}


# ---- transformers --------------------------------------------------------------------------
def hf_load():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = default_model_path()
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                 dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return model, tok, time.perf_counter() - t0


def hf_run(model, tok, streams: int, tokens: int) -> dict:
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    texts = [tok.apply_chat_template(messages(i), tokenize=False, add_generation_prompt=True)
             for i in range(streams)]
    batch = tok(texts, return_tensors="pt", padding=True)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(**batch, max_new_tokens=tokens, min_new_tokens=tokens,
                             do_sample=False, pad_token_id=tok.pad_token_id)
    seconds = time.perf_counter() - t0
    produced = (out.shape[1] - batch["input_ids"].shape[1]) * streams
    return {"tokens": produced, "seconds": seconds, "tok_s": produced / seconds}


# ---- report --------------------------------------------------------------------------------
def bounds(engine: LLMEngine, mode: str, bw: float, gflops: dict[str, float]) -> dict:
    """Tokens/s ceilings: one stream reads every weight per token; 16 streams are FLOP-bound.
    In ``mixed`` mode every matmul weight is read in bfloat16 (the LM head's float32 rescoring
    of 64 rows per token is left out) and runs at the bfloat16 rate."""
    model = engine.runner.model
    params = sum(p.numel() for p in model.parameters())
    dtype, matmul_dtype = MODES[base_mode(mode)]
    state = model.pack_state()
    both = matmul_dtype == "auto" and engine.runner._pack_sets is not None
    if both:  # each side's bound where it runs: 1 stream quant, 16 bfloat16
        state = engine.runner._pack_sets[0]
        mixed = bounds(engine, "mixed", bw, gflops)
    if state.quantized:  # the packed blocks a decode step reads
        weight_bytes = (sum(p.nbytes for layer in state.layers for p in layer.decode)
                        + state.head_screen.nbytes)
        one = bw * 1e9 / weight_bytes
        many = mixed["bound_16_tok_s"] if both else 16 * one
        return {"params": params, "weight_bytes": weight_bytes, "bound_1_tok_s": one,
                "bound_16_tok_s": many}
    work = DTYPES[matmul_dtype or dtype]
    weight_bytes = params * torch.empty((), dtype=work).element_size()
    one = bw * 1e9 / weight_bytes
    many = gflops[matmul_dtype or dtype] * 1e9 / (2 * params)
    return {"params": params, "weight_bytes": weight_bytes, "bound_1_tok_s": one,
            "bound_16_tok_s": min(16 * one, many)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--dtypes", default="float32,mixed,bfloat16",
                    help=f"Laser modes, comma-separated: {','.join(MODES)}")
    ap.add_argument("--streams", default="1,16")
    ap.add_argument("--skip-hf", action="store_true", help="Laser rows only")
    ap.add_argument("--skip-ceilings", action="store_true",
                    help="no bandwidth/FLOP/s measurement (minutes where bfloat16 matmuls "
                         "are emulated); rows report no fraction of the bound")
    ap.add_argument("--policy", default="laser",
                    help="scheduler (fcfs: every running stream in every step, whatever the "
                         "hot tier's pacing on a slow machine would hold back)")
    ap.add_argument("--threads", default=str(len(os.sched_getaffinity(0))),
                    help="engine threads, comma-separated (each mode runs at each)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds over all engines (A B A B)")
    ap.add_argument("--engines", default=None,
                    help="mode:threads pairs instead of --dtypes x --threads (mixed:1,quant:2)")
    args = ap.parse_args()
    streams = [int(s) for s in args.streams.split(",")]
    thread_counts = [int(t) for t in args.threads.split(",")]
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    limits = {} if args.skip_ceilings else roofline.measure()
    bw = limits.get("read_gbs", 0.0)
    rows: list[dict] = []
    result: dict = {"tokens": args.tokens, "threads": thread_counts,
                    "bandwidth_gbs": bw, "limits": limits, "rows": rows}
    gflops = {"float32": limits.get("f32_gflops", 0.0),
              "bfloat16": limits.get("bf16_gflops", 0.0)}
    result.update({f"matmul_gflops_{name}": v for name, v in gflops.items()})
    pairs = ([(m, int(t)) for m, t in (e.split(":") for e in args.engines.split(","))]
             if args.engines else [(m, t) for m in args.dtypes.split(",") for t in thread_counts])
    engines = []
    for name, threads in pairs:
        load_model(dtype=DTYPES[MODES[base_mode(name)][0]])  # fills the cache
        gc.collect()
        engine, start_s = laser_engine(name, threads, args.policy)
        engines.append((name, threads, engine, start_s, bounds(engine, name, bw, gflops)))
    for rnd in range(args.rounds):
        for name, threads, engine, start_s, lim in engines:
            for n in streams:
                with torch_layer_ops(name.endswith("-torch")):
                    r = laser_run(engine, n, args.tokens, f"{name}-{threads}-{n}-{rnd}")
                bound = lim["bound_1_tok_s"] if n == 1 else lim["bound_16_tok_s"] * n / 16
                bound = bound or float("nan")
                rows.append({"system": f"laser {name} t{threads}", "streams": n, "round": rnd,
                             **r, "start_s": start_s, "bound_tok_s": bound,
                             "fraction_of_bound": r["decode_tok_s"] / bound,
                             **roofline.fractions(limits, int8_ops=2 * lim["params"] * n,
                                                  flops=2 * lim["params"] * n,
                                                  seconds=n / r["decode_tok_s"])})
                print(f"round {rnd} {name} t{threads} {n:>3} streams: {r['tok_s']:.1f} tok/s, "
                      f"decode {r['decode_tok_s']:.1f}, outside C {r['outside_kernels']:.0%}, "
                      f"outside execute {r['outside_execute']:.0%}; "
                      + " ".join(f"{k} {v:.1%}" for k, v in r["shares"].items()), flush=True)
    del engines
    gc.collect()
    if not args.skip_hf:
        model, tok, hf_start = hf_load()
        for n in streams:
            rows.append({"system": "transformers float32", "streams": n,
                         **hf_run(model, tok, n, args.tokens), "start_s": hf_start})
    by = {(r["system"], r["streams"]): r for r in rows}
    for r in rows:
        base = by.get(("transformers float32", r["streams"]))
        r["x_transformers"] = r["tok_s"] / base["tok_s"] if base else None
    print("limits: " + ", ".join(f"{k} {v:.1f}" for k, v in limits.items())
          + f"; load average now {os.getloadavg()[0]:.2f}")
    print(f"{'system':<22}{'streams':>8}{'tok/s':>9}{'decode':>9}{'x hf':>7}"
          f"{'of bound':>10}{'of int8':>9}{'of bf16':>9}{'start s':>9}{'not C':>7}"
          f"{'not fwd':>8}")
    for r in rows:
        ratio = f"{r['x_transformers']:.2f}" if r["x_transformers"] else "-"
        frac = f"{r['fraction_of_bound']:.0%}" if "fraction_of_bound" in r else "-"
        dec = f"{r['decode_tok_s']:.1f}" if "decode_tok_s" in r else "-"
        shares = (f"{r['outside_kernels']:>7.0%}{r['outside_execute']:>8.0%}"
                  if "outside_kernels" in r else "")
        peaks = "".join(f"{r[k]:>9.0%}" if r.get(k, float("nan")) == r.get(k) else f"{'-':>9}"
                        for k in ("of_int8", "of_bf16"))
        print(f"{r['system']:<22}{r['streams']:>8}{r['tok_s']:>9.1f}{dec:>9}{ratio:>7}"
              f"{frac:>10}{peaks}{r['start_s']:>9.2f}{shares}")
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "engine_throughput.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
