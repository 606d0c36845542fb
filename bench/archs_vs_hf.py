"""Laser float32 beside transformers on tiny random models of every supported architecture:
max |Δlogit| over the logits' largest magnitude, from the HF folder and from the GGUF written
from the same weights, at every position of a chunked prefill and decode steps.

    .venv/bin/python bench/archs_vs_hf.py [--speed] [ARCH ...]

The models are ``tests/inference/model/tiny_models.py``'s (hidden 256, mean next-token entropy
2.5 nats), the GGUFs ``tiny_gguf.py``'s (as llama.cpp's converter writes them), the forward
``test_archs_vs_hf.laser_logits`` (the C kernels where they build). Target (issue 47): <= 1e-3.
Prints a table, writes ``bench/out/archs_vs_hf.json``. ``--speed`` adds each family's decode
step time a layer beside llama3's in the same run (16 sequences at context 64, quantized packs, one
thread, median of 30): what running op by op costs the families the one-call C layer does not
take.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import kernels  # noqa: E402
from inference.loaders import load_model  # noqa: E402
from inference.model import AttentionMetadata  # noqa: E402
from tests.inference.model.test_archs_vs_hf import IDS, laser_logits, rel_diff  # noqa: E402
from tests.inference.model.tiny_gguf import write_arch_gguf  # noqa: E402
from tests.inference.model.tiny_models import ARCHS, mean_entropy, save_tiny  # noqa: E402


def measure(arch: str, tmp: Path) -> dict:
    hf = save_tiny(arch, tmp / arch)
    with torch.no_grad():
        want = hf(torch.tensor([IDS])).logits[0]
    write_arch_gguf(tmp / f"{arch}.gguf", hf, arch)
    folder = laser_logits(load_model(tmp / arch, use_cache=False).model)
    gguf = laser_logits(load_model(tmp / f"{arch}.gguf", use_cache=False).model)
    return {"arch": arch, "entropy": mean_entropy(hf), "scale": float(want.abs().max()),
            "hf_folder": rel_diff(folder, want), "gguf": rel_diff(gguf, want)}


def step_seconds(folder: Path, seqs: int = 16, context: int = 64, block: int = 16) -> float:
    """Median time of a decode step of ``seqs`` sequences at ``context``, quantized packs."""
    model = load_model(folder, use_cache=False).model
    model.pack_linears(kernels.QUANT)
    per_seq = context // block + 1
    caches = model.allocate_kv_caches(seqs * per_seq, block)
    tables = [list(range(i * per_seq, (i + 1) * per_seq)) for i in range(seqs)]
    ids, pos = torch.randint(3, 200, (seqs,)), torch.full((seqs,), context - 1)
    times = []
    with torch.inference_mode():
        for _ in range(30):
            meta = AttentionMetadata.build(tables, [context] * seqs, [1] * seqs, block)
            start = time.perf_counter()
            model.compute_logits(model(ids, pos, caches, meta))
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(archs: list[str]) -> None:
    speed = "--speed" in archs
    archs = [a for a in archs if a != "--speed"] or sorted(ARCHS)
    if speed and "llama3" not in archs:
        archs = ["llama3", *archs]
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in archs:
            rows.append(measure(arch, Path(tmp)))
            if speed:
                layers = json.loads((Path(tmp) / arch / "config.json").read_text())
                rows[-1]["layer_ms"] = (step_seconds(Path(tmp) / arch) * 1e3
                                        / layers["num_hidden_layers"])
    print("| arch | entropy (nats) | max abs logit | HF folder | GGUF F32 | per layer vs llama3 |")
    print("| --- | --- | --- | --- | --- | --- |")
    base = next(r for r in rows if r["arch"] == "llama3").get("layer_ms") if speed else None
    for r in rows:
        ratio = f"{r['layer_ms'] / base:.2f}x" if base else "-"
        print(f"| {r['arch']} | {r['entropy']:.2f} | {r['scale']:.2f} | {r['hf_folder']:.1e} "
              f"| {r['gguf']:.1e} | {ratio} |")
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "archs_vs_hf.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
