"""Model-only timings: decode step at 1 and 16 tokens, and cold/warm load of the default model.

    .venv/bin/python bench/model_forward.py

Prints a table and writes `bench/out/model_forward.json`. Times are medians of repeated runs on
a shared machine: compare the rows with each other, not with other runs.
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inference.loaders import load_model  # noqa: E402
from inference.model import AttentionMetadata  # noqa: E402

BLOCK, CONTEXT, REPEATS = 16, 128, 15


def step_ms(model, num_seqs: int) -> float:
    blocks = CONTEXT // BLOCK + 1
    caches = model.allocate_kv_caches(num_seqs * blocks, BLOCK)
    tables = [[s * blocks + j for j in range(blocks)] for s in range(num_seqs)]
    meta = AttentionMetadata.build(tables, [CONTEXT] * num_seqs, [1] * num_seqs, BLOCK)
    ids = torch.randint(0, model.config.vocab_size, (num_seqs,))
    pos = torch.full((num_seqs,), CONTEXT - 1)
    times = []
    with torch.inference_mode():
        for i in range(REPEATS + 3):
            t0 = time.perf_counter()
            model.compute_logits(model(ids, pos, caches, meta))
            if i >= 3:
                times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        cold = load_model(cache_dir=cache).load_seconds
        warm = load_model(cache_dir=cache).load_seconds
    gc.collect()
    model = load_model().model  # the default cache under var/models
    rows = {"load_cold_s": cold, "load_warm_s": warm}
    for n in (1, 16):
        rows[f"decode_step_ms_{n}"] = step_ms(model, n)
    rows["tokens_per_s_16"] = 16 * 1000 / rows["decode_step_ms_16"]
    rows["tokens_per_s_1"] = 1000 / rows["decode_step_ms_1"]
    rows["ratio_step16_over_step1"] = rows["decode_step_ms_16"] / rows["decode_step_ms_1"]
    print(f"{'metric':<28}{'value':>10}")
    for k, v in rows.items():
        print(f"{k:<28}{v:>10.3f}")
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "model_forward.json").write_text(json.dumps(
        {"context": CONTEXT, "threads": torch.get_num_threads(), **rows}, indent=2))


if __name__ == "__main__":
    main()
