"""CPU precision modes: their speed against what they do to the answers.

    .venv/bin/python bench/cpu_precision.py [--tokens 32] [--torch-ops] [--threads N]
        [--seqs 1,16,64] [--peer PATH/llama-server] [--modes mixed,quant,q8,bfloat16]

The bundled SmolLM2-135M, greedy (EOS ignored), eight chat prompts, run in float32 (the exact
mode, equal to ``transformers`` on the same GGUF), in ``mixed`` (``matmul_dtype=bfloat16``: the
layers' projections on the CPU's bfloat16 units, the LM head and everything between the
matmuls float32), in ``quant`` (``matmul_dtype=quant``: the GGUF's Q4_1/Q8_0 blocks times
int8-quantised activations in two parts, decode steps keeping the second only in each row's
outlier blocks: ``kernels._cpu.quant``, ``kernels.packing.QUANT_DECODE_SPLIT``), in ``q8``
(the same blocks, decode steps' activations in one part: llama.cpp's arithmetic), ``quant``
with other decode splits if ``--modes`` names them (``quant-two``, ``quant:ttst``:
``SPLIT_LETTERS``) and in bfloat16 (weights and activations). Each mode's KV cache is the engine's
default for it: float32 beside the exact matmuls, float16 beside ``mixed`` and ``quant``
(``EngineConfig.torch_kv_dtype``). Reports per prompt and mode the
first-step logit error relative to float32, how many leading greedy tokens agree, where
float32's answer ends (its first end-of-turn token), whether the mode's answer equals
float32's (all tokens up to that end agree) and, where not, float32's top-2 logit margin at
the first token that differs; then the answers' text, and a decode step's time at 1 and 16
(``--seqs``) sequences in each mode (same process, alternating). With ``--peer`` (a ``llama-server``
binary, e.g. the one ``../shared/peers/llama-server.sh`` prints) the peer's own greedy answers
to the same prompt token ids on the same GGUF (``/completion``, temperature 0, EOS ignored,
``-t 2``) are compared with float32's in the same way (no logits: no error column; its EOS
ban makes it part at float32's end-of-turn, so an answer equal up to there counts). Prints a
table; writes ``bench/out/cpu_precision.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine_throughput import torch_layer_ops  # noqa: E402

from inference.engine.config import EngineConfig  # noqa: E402
from inference.loaders import load_model  # noqa: E402
from inference.model import AttentionMetadata  # noqa: E402
from kernels import _cpu, packing  # noqa: E402
from kernels._cpu import quant  # noqa: E402

PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.",
           "Explain photosynthesis briefly.", "List three prime numbers.",
           "Name the largest planet in the solar system.",
           "Translate 'good morning' into French.", "What is 12 times 7?",
           "Give me a tip for learning to cook."]
BLOCK = 16


MODES = ("float32", "mixed", "quant", "q8", "bfloat16")
# quant with other decode splits (``kernels.packing.QUANT_DECODE_SPLIT``: qkv, o, gate_up,
# down; o one part, t two, s selective): quant-two keeps both parts everywhere, "quant:...."
# names any split ("quant:ttst" was quant's own until 2026-12-06); q8 is one part everywhere
SPLIT_LETTERS = {"o": quant.ONE, "t": quant.TWO, "s": quant.SEL}
NAMED_SPLITS = {"quant-two": (quant.TWO,) * 4,
                # quant with a long prompt's rows in two parts (kernels.packing), as before
                "quant-ptwo": packing.QUANT_DECODE_SPLIT}


def decode_split(mode: str) -> tuple[int, ...] | None:
    """The decode split a quant mode name asks for (None: quant's own, or not quant)."""
    if mode.startswith("quant:"):
        letters = mode.removeprefix("quant:")
        if len(letters) != 4 or set(letters) - set(SPLIT_LETTERS):
            raise SystemExit(f"{mode}: quant: takes four of o/t/s (qkv, o, gate_up, down)")
        return tuple(SPLIT_LETTERS[c] for c in letters)
    return NAMED_SPLITS.get(mode)


def base_mode(mode: str) -> str:
    """quant for quant's split variants, else ``mode``."""
    return "quant" if decode_split(mode) is not None else mode


def kv_dtype(mode: str) -> torch.dtype:
    """The KV cache the engine keeps beside ``mode``'s matmuls (``float32``, ``mixed``,
    ``quant`` and its split variants, ``q8``, ``bfloat16``: bfloat16 weights, their own
    matmuls)."""
    mode = base_mode(mode)
    matmul = {"mixed": "bfloat16", "bfloat16": None}.get(mode, mode)
    return EngineConfig(dtype="bfloat16" if mode == "bfloat16" else None,
                        matmul_dtype=matmul).torch_kv_dtype


def greedy(model, ids: list[int], tokens: int, margins: list[float] | None = None,
           cache_dtype: torch.dtype = torch.float32) -> tuple[list[int], torch.Tensor]:
    """Greedy tokens (EOS ignored) and the first step's float32 logits; each step's top-2
    logit margin is appended to ``margins`` if given."""
    blocks = -(-(len(ids) + tokens) // BLOCK)
    caches = model.allocate_kv_caches(blocks, BLOCK, dtype=cache_dtype)
    table = [list(range(blocks))]
    out: list[int] = []
    first = None
    cur, done = list(ids), 0
    with torch.inference_mode():
        for _ in range(tokens):
            n = len(cur)
            meta = AttentionMetadata.build(table, [done + n], [n], BLOCK)
            hidden = model(torch.tensor(cur), torch.arange(done, done + n), caches, meta)
            logits = model.compute_logits(hidden[-1:], exact=n > 1).float()
            first = logits if first is None else first
            if margins is not None:
                top = logits[0].topk(2).values
                margins.append(float(top[0] - top[1]))
            out.append(int(logits.argmax()))
            done, cur = done + n, [out[-1]]
    return out, first


def step_ms(model, seqs: int = 16, context: int = 128, repeats: int = 7,
            cache_dtype: torch.dtype = torch.float32) -> list[float]:
    blocks = context // BLOCK + 1
    caches = model.allocate_kv_caches(seqs * blocks, BLOCK, dtype=cache_dtype)
    tables = [[s * blocks + j for j in range(blocks)] for s in range(seqs)]
    meta = AttentionMetadata.build(tables, [context] * seqs, [1] * seqs, BLOCK)
    ids = torch.randint(0, model.config.vocab_size, (seqs,))
    pos = torch.full((seqs,), context - 1)
    times = []
    with torch.inference_mode():
        for i in range(repeats + 2):
            t0 = time.perf_counter()
            model.compute_logits(model(ids, pos, caches, meta))
            if i >= 2:
                times.append((time.perf_counter() - t0) * 1000)
    return times


def peer_answers(binary: str, prompts: list[list[int]], tokens: int) -> list[list[int]]:
    """llama.cpp's greedy tokens (EOS ignored) after each prompt's token ids."""
    import httpx
    from peers import free_port, peer_command, peer_server

    cmd = peer_command(binary, 1, tokens, free_port(), 2)
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    with peer_server(cmd, out / "cpu_precision_peer.log") as url:
        body = {"n_predict": tokens, "temperature": 0, "ignore_eos": True,
                "cache_prompt": False, "return_tokens": True}
        return [httpx.post(f"{url}/completion", json={**body, "prompt": ids}, timeout=120,
                           headers={"Authorization": "Bearer peer"}).json()["tokens"]
                for ids in prompts]


def compare(ref: list[int], got: list[int], end: int, margins: list[float], name: str, *,
            end_banned: bool = False) -> dict:
    """``name``'s greedy tokens against float32's ``ref``: leading tokens that agree, whether
    the answer (the tokens before float32's end-of-turn at ``end``) is the same, and
    float32's top-2 margin where they part. ``end_banned``: ``got`` could not end there (the
    peer's EOS ban), so an answer equal up to ``end`` counts."""
    agree = next((i for i, (a, b) in enumerate(zip(ref, got)) if a != b), len(ref))
    same = agree >= end if end_banned else agree > end or agree == len(ref)
    return {f"{name}_agree": agree, f"{name}_same_answer": same,
            f"{name}_margin": None if agree == len(ref) else margins[agree]}


MATMUL = {"mixed": torch.bfloat16, "quant": "quant", "q8": "q8"}


def pack(model, mode: str, native_gemm: bool) -> None:
    """Pack ``model``'s projections for ``mode`` (float32, bfloat16: their own dtype)."""
    saved = packing.QUANT_DECODE_SPLIT, packing.LONG_PROMPT_ONE_PART
    packing.QUANT_DECODE_SPLIT = decode_split(mode) or saved[0]
    packing.LONG_PROMPT_ONE_PART = saved[1] and not mode.endswith("-ptwo")
    try:
        model.pack_linears(MATMUL.get(base_mode(mode)), native_gemm=native_gemm)
    finally:
        packing.QUANT_DECODE_SPLIT, packing.LONG_PROMPT_ONE_PART = saved


def load(mode: str):
    loaded = load_model(dtype=torch.bfloat16 if mode == "bfloat16" else torch.float32)
    # as the engine does: one decode thread gives the bfloat16 matmuls to Laser's own kernel
    pack(loaded.model, mode, native_gemm=torch.get_num_threads() == 1)
    if MATMUL.get(base_mode(mode)) == "quant":
        _cpu.set_threads(torch.get_num_threads())  # as the runner does in that mode
    return loaded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--torch-ops", action="store_true",
                    help="the layers on PyTorch ops instead of the C kernels (kernels/_cpu)")
    ap.add_argument("--peer", default=None, help="llama-server binary: its answers too")
    ap.add_argument("--seqs", type=lambda v: [int(n) for n in v.split(",")], default=[1, 16],
                    help="sequences of the timed decode steps")
    ap.add_argument("--threads", type=int, default=max(1, len(os.sched_getaffinity(0)) - 1),
                    help="torch threads (default: the platform's LASER_THREADS default)")
    ap.add_argument("--modes", default=",".join(MODES[1:]),
                    help="modes compared with float32 (quant-two, quant:ttst: module doc)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with torch_layer_ops(args.torch_ops):
        run(args)


def run(args: argparse.Namespace) -> None:
    compared = [m for m in args.modes.split(",") if m != "float32"]
    modes = {m: load(m) for m in ("float32", *compared)}
    exact = modes["float32"]
    prompt_ids = [exact.encode_chat([{"role": "user", "content": p}], add_generation_prompt=True)
                  for p in PROMPTS]
    peer = peer_answers(args.peer, prompt_ids, args.tokens) if args.peer else None
    rows = []
    for n, (prompt, ids) in enumerate(zip(PROMPTS, prompt_ids)):
        margins: list[float] = []
        ref, ref_logits = greedy(exact.model, ids, args.tokens, margins)
        end = next((i for i, t in enumerate(ref) if t in exact.stop_token_ids), len(ref))
        row = {"prompt": prompt, "answer_tokens": end, "float32": exact.tokenizer.decode(ref)}
        for mode in compared:
            got, logits = greedy(modes[mode].model, ids, args.tokens,
                                 cache_dtype=kv_dtype(mode))
            row[mode] = exact.tokenizer.decode(got)
            row.update(compare(ref, got, end, margins, mode))
            row[f"{mode}_logit_rel_err"] = float((logits - ref_logits).norm() / ref_logits.norm())
        if peer is not None:
            row["llama.cpp"] = exact.tokenizer.decode(peer[n])
            row.update(compare(ref, peer[n], end, margins, "llama.cpp", end_banned=True))
        rows.append(row)
    timing = {}
    for seqs in args.seqs:
        times = {m: [] for m in modes}
        for _ in range(3):  # alternate so that machine noise hits every mode alike
            for m, loaded in modes.items():
                times[m] += step_ms(loaded.model, seqs=seqs, cache_dtype=kv_dtype(m))
        timing[seqs] = {m: statistics.median(t) for m, t in times.items()}
    shown = (*compared, *(("llama.cpp",) if peer else ()))
    print(f"{'prompt':<34}{'answer':>7}" + "".join(f"{m[:5] + ' err':>10}{'agree':>6}{'margin':>7}"
                                               for m in compared))
    for r in rows:
        cells = "".join(
            f"{r[f'{m}_logit_rel_err']:>10.4f}{r[f'{m}_agree']:>6}"
            f"{'' if r[f'{m}_same_answer'] else format(r[f'{m}_margin'], '.3f'):>7}"
            for m in compared)
        print(f"{r['prompt'][:33]:<34}{r['answer_tokens']:>7}{cells}")
        for mode in ("float32", *shown):
            print(f"    {mode:<9}: {r[mode][:70]!r}")
        if peer:
            print(f"    llama.cpp agrees for {r['llama.cpp_agree']} tokens"
                  + ("" if r["llama.cpp_same_answer"]
                     else f", parts at float32's margin {r['llama.cpp_margin']:.3f}"))
    for mode in shown:
        same = sum(r[f"{mode}_same_answer"] for r in rows)
        print(f"{mode}: {same} of {len(rows)} answers equal float32's")
    for seqs, t in timing.items():
        print(f"{seqs:>2}-sequence decode step, ms: " + ", ".join(
            f"{m} {v:.1f} (x{t['float32'] / v:.2f})" for m, v in t.items()))
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "cpu_precision.json").write_text(json.dumps(
        {"rows": rows, "step_ms": timing, "threads": torch.get_num_threads()}, indent=2))


if __name__ == "__main__":
    main()
