"""Why the CPU engine defaults to float32: bfloat16's speed against what it does to the answers.

    .venv/bin/python bench/cpu_precision.py [--tokens 32]

The bundled SmolLM2-135M, greedy, four chat prompts, run in float32 (the exact mode, equal to
``transformers`` on the same GGUF) and in bfloat16 (weights and activations; the KV cache stays
float32 as the engine keeps it on CPU). Reports per prompt the first-step logit error of
bfloat16 relative to float32, how many leading greedy tokens agree, both answers' text, and a
16-sequence decode step's time in each dtype (same process, alternating). Prints a table; writes
``bench/out/cpu_precision.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inference.loaders import load_model  # noqa: E402
from inference.model import AttentionMetadata  # noqa: E402

PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.",
           "Explain photosynthesis briefly.", "List three prime numbers."]
BLOCK = 16


def greedy(model, ids: list[int], tokens: int) -> tuple[list[int], torch.Tensor]:
    """Greedy tokens (EOS ignored) and the first step's float32 logits."""
    blocks = -(-(len(ids) + tokens) // BLOCK)
    caches = model.allocate_kv_caches(blocks, BLOCK, dtype=torch.float32)
    table = [list(range(blocks))]
    out: list[int] = []
    first = None
    cur, done = list(ids), 0
    with torch.inference_mode():
        for _ in range(tokens):
            n = len(cur)
            meta = AttentionMetadata.build(table, [done + n], [n], BLOCK)
            hidden = model(torch.tensor(cur), torch.arange(done, done + n), caches, meta)
            logits = model.compute_logits(hidden[-1:]).float()
            first = logits if first is None else first
            out.append(int(logits.argmax()))
            done, cur = done + n, [out[-1]]
    return out, first


def step_ms(model, seqs: int = 16, context: int = 128, repeats: int = 7) -> list[float]:
    blocks = context // BLOCK + 1
    caches = model.allocate_kv_caches(seqs * blocks, BLOCK, dtype=torch.float32)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args()
    exact = load_model(dtype=torch.float32)
    fast = load_model(dtype=torch.bfloat16)
    rows = []
    for prompt in PROMPTS:
        ids = exact.encode_chat([{"role": "user", "content": prompt}],
                                add_generation_prompt=True)
        ref, ref_logits = greedy(exact.model, ids, args.tokens)
        low, low_logits = greedy(fast.model, ids, args.tokens)
        agree = next((i for i, (a, b) in enumerate(zip(ref, low)) if a != b), len(ref))
        rows.append({"prompt": prompt, "logit_rel_err": float(
            (low_logits - ref_logits).norm() / ref_logits.norm()), "agree_tokens": agree,
            "float32": exact.tokenizer.decode(ref), "bfloat16": exact.tokenizer.decode(low)})
    f32, b16 = [], []
    for _ in range(3):  # alternate so that machine noise hits both alike
        f32 += step_ms(exact.model)
        b16 += step_ms(fast.model)
    timing = {"float32_ms": statistics.median(f32), "bfloat16_ms": statistics.median(b16)}
    print(f"{'prompt':<34}{'logit err':>10}{'agree':>8}")
    for r in rows:
        print(f"{r['prompt']:<34}{r['logit_rel_err']:>10.4f}{r['agree_tokens']:>5}/{args.tokens}")
        print(f"    float32 : {r['float32'][:70]!r}\n    bfloat16: {r['bfloat16'][:70]!r}")
    print(f"16-sequence decode step: float32 {timing['float32_ms']:.1f} ms, bfloat16 "
          f"{timing['bfloat16_ms']:.1f} ms (x{timing['float32_ms'] / timing['bfloat16_ms']:.2f})")
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "cpu_precision.json").write_text(json.dumps({"rows": rows, **timing}, indent=2))


if __name__ == "__main__":
    main()
