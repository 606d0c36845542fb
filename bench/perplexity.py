"""Perplexity of Laser's CPU modes over a fixed public-domain text, beside llama.cpp's own.

    .venv/bin/python bench/perplexity.py [--ctx 256] [--modes float32,mixed,quant,q8,quant:ttst]
        [--decode] [--kl] [--llama-perplexity PATH/llama-perplexity] [--threads N]
        [--model PATH.gguf]

The precision gate of the quantized matmul (docs/engine.md): the bundled SmolLM2-135M GGUF (or
``--model``: any GGUF Laser loads, the peer on the same file) over
``bench/data/declaration_of_independence.txt`` (the US Declaration of Independence as the
National Archives transcribes the engrossed copy, then the Gettysburg Address; both in the
public domain), windowed as llama.cpp's ``llama-perplexity`` does: the whole text tokenized
once (BOS first only where the GGUF asks for it, and then each chunk's first token replaced by
BOS), cut into ``len(tokens) // ctx`` chunks of ``ctx`` tokens, each chunk evaluated from an
empty cache, and only the second half of each chunk scored (the logits of positions
``ctx / 2 .. ctx - 2`` against the next token); the perplexity is ``exp`` of the mean negative
log-likelihood over all chunks. Each mode keeps the KV cache the engine keeps beside it
(float32 beside ``float32``, float16 beside the others: ``EngineConfig.torch_kv_dtype``).

Each chunk runs as one prefill (as llama-perplexity runs it); with ``--decode`` the scored half
also runs as serving generates text, one decode step a token after a prefill of the first
half, and gets its own column (the decode steps are where ``quant`` and ``q8`` differ); with
``--kl`` too, each mode's mean KL divergence of those decode steps' next-token distributions
from float32's (a finer measure of an arithmetic's error than the perplexity, which moves by
a few tenths of a percent either way with the rounding of a handful of tokens). With
``--llama-perplexity`` the peer runs on the same file and text (``-c ctx -b ctx``) and each
mode's ratio to its perplexity is printed. Writes ``bench/out/perplexity.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cpu_precision import kv_dtype, pack  # noqa: E402

from inference.loaders import default_model_path, load_model  # noqa: E402
from inference.model import AttentionMetadata  # noqa: E402
from kernels import _cpu  # noqa: E402

TEXT = Path(__file__).resolve().parent / "data" / "declaration_of_independence.txt"
BLOCK = 16


MODEL: Path | None = None  # --model; None: the bundled GGUF


def load(mode: str, threads: int):
    loaded = load_model(MODEL)
    pack(loaded.model, mode, native_gemm=threads == 1)
    return loaded


def chunks(loaded, text: str, ctx: int) -> list[list[int]]:
    """llama-perplexity's chunks: the text tokenized once, BOS in front of each chunk where
    the tokenizer adds one (add_bos_token)."""
    tokens = loaded.tokenizer.encode(text, add_special_tokens=True)
    bos = loaded.tokenizer.bos_token_id
    add_bos = bool(tokens) and bos is not None and tokens[0] == bos and \
        loaded.tokenizer.encode("a", add_special_tokens=True)[0] == bos
    out = []
    for i in range(len(tokens) // ctx):
        chunk = tokens[i * ctx:(i + 1) * ctx]
        if add_bos:
            chunk[0] = bos
        out.append(chunk)
    return out


def _forward(model, caches, table, ids: list[int], start: int) -> torch.Tensor:
    n = len(ids)
    meta = AttentionMetadata.build(table, [start + n], [n], BLOCK)
    hidden = model(torch.tensor(ids), torch.arange(start, start + n), caches, meta)
    return hidden


def chunk_logprobs(model, chunk: list[int], decode: bool,
                   cache_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Log-probabilities (float64) at the chunk's scored positions: one prefill, or with
    ``decode`` a prefill of the first half and one decode step a token after it."""
    n = len(chunk)
    first = n // 2
    blocks = -(-n // BLOCK)
    caches = model.allocate_kv_caches(blocks, BLOCK, dtype=cache_dtype)
    table = [list(range(blocks))]
    with torch.inference_mode():
        if not decode:
            hidden = _forward(model, caches, table, chunk, 0)
            logits = model.compute_logits(hidden[first:n - 1], exact=True).float()
        else:
            hidden = _forward(model, caches, table, chunk[:first + 1], 0)
            rows = [model.compute_logits(hidden[-1:], exact=True).float()]
            for pos in range(first + 1, n - 1):
                hidden = _forward(model, caches, table, [chunk[pos]], pos)
                rows.append(model.compute_logits(hidden, exact=False).float())
            logits = torch.cat(rows)
    return torch.log_softmax(logits.double(), dim=-1)


def scored(model, parts: list[list[int]], decode: bool,
           cache_dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Every chunk's scored log-probabilities, and the tokens they score."""
    logp = torch.cat([chunk_logprobs(model, c, decode, cache_dtype) for c in parts])
    targets = torch.tensor([t for c in parts for t in c[len(c) // 2 + 1:]])
    return logp, targets


def perplexity(logp: torch.Tensor, targets: torch.Tensor) -> float:
    return math.exp(float(-logp[torch.arange(len(targets)), targets].mean()))


def kl_divergence(ref: torch.Tensor, logp: torch.Tensor) -> float:
    """Mean KL(ref || logp) over the scored positions (both log-probabilities)."""
    return float((ref.exp() * (ref - logp)).sum(-1).mean())


def llama_perplexity(binary: str, ctx: int, threads: int) -> float:
    env = {**os.environ, "LD_LIBRARY_PATH": str(Path(binary).parent)}
    out = subprocess.run([binary, "-m", str(MODEL or default_model_path()), "-f", str(TEXT), "-c",
                          str(ctx), "-b", str(ctx), "-t", str(threads)], capture_output=True,
                         text=True, env=env, timeout=1800, check=True)
    found = re.search(r"Final estimate: PPL = ([0-9.]+)", out.stdout + out.stderr)
    if not found:
        raise RuntimeError("llama-perplexity printed no final estimate")
    return float(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--modes", default="float32,mixed,quant,q8")
    ap.add_argument("--decode", action="store_true", help="also score the halves by decode steps")
    ap.add_argument("--kl", action="store_true",
                    help="with --decode: each mode's decode logits' KL divergence from float32's")
    ap.add_argument("--llama-perplexity", default=None, help="path of llama.cpp's binary")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--model", type=Path, default=None, help="a GGUF (default: the bundled one)")
    args = ap.parse_args()
    global MODEL
    MODEL = args.model
    torch.set_num_threads(args.threads)
    _cpu.set_threads(args.threads)
    text = TEXT.read_text(encoding="utf-8")
    result: dict = {"model": str(MODEL or default_model_path()), "text": TEXT.name,
                    "text_sha256": hashlib.sha256(text.encode()).hexdigest(),
                    "ctx": args.ctx, "threads": args.threads, "modes": {}}
    peer = llama_perplexity(args.llama_perplexity, args.ctx, args.threads) \
        if args.llama_perplexity else None
    result["llama_cpp"] = peer
    ref = ref_targets = None  # float32's decode log-probabilities, for --kl
    if args.kl and args.decode:
        exact = load("float32", args.threads)
        ref, ref_targets = scored(exact.model, chunks(exact, text, args.ctx), True,
                                  kv_dtype("float32"))
        del exact
    for mode in args.modes.split(","):
        loaded = load(mode, args.threads)
        parts = chunks(loaded, text, args.ctx)
        cache = kv_dtype(mode)
        row = {"chunks": len(parts), "kv_cache": str(cache).removeprefix("torch."),
               "prefill": perplexity(*scored(loaded.model, parts, False, cache))}
        if args.decode:
            logp, targets = (ref, ref_targets) if mode == "float32" and ref is not None \
                else scored(loaded.model, parts, True, cache)
            row["decode"] = perplexity(logp, targets)
            if ref is not None:
                row["decode_kl"] = kl_divergence(ref, logp)
        result["modes"][mode] = row
        del loaded
    print(f"{Path(result['model']).name}, "
          f"{TEXT.name} (sha256 {result['text_sha256'][:16]}), ctx {args.ctx}, "
          f"{next(iter(result['modes'].values()))['chunks']} chunks")
    if peer is not None:
        print(f"{'llama.cpp':<10}{peer:>10.4f}")
    for mode, row in result["modes"].items():
        cells = "".join(f"{row[k]:>10.4f}" + (f" ({row[k] / peer - 1:+.2%})" if peer else "")
                        for k in ("prefill", "decode") if k in row)
        kl = f"   KL from float32 {row['decode_kl']:.6f}" if "decode_kl" in row else ""
        print(f"{mode:<10}{cells}{kl}")
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "perplexity.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
