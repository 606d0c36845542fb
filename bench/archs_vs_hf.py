"""Laser float32 beside transformers on tiny random models of every supported architecture:
max |Δlogit| over the logits' largest magnitude, from the HF folder and from the GGUF written
from the same weights, at every position of a chunked prefill and decode steps.

    .venv/bin/python bench/archs_vs_hf.py [ARCH ...]

The models are ``tests/inference/model/tiny_models.py``'s (hidden 256, mean next-token entropy
2.5 nats), the GGUFs ``tiny_gguf.py``'s (as llama.cpp's converter writes them), the forward
``test_archs_vs_hf.laser_logits`` (the C kernels where they build). Target (issue 47): <= 1e-3.
Prints a table, writes ``bench/out/archs_vs_hf.json``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from inference.loaders import load_model  # noqa: E402
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


def main(archs: list[str]) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in archs or sorted(ARCHS):
            rows.append(measure(arch, Path(tmp)))
    print("| arch | entropy (nats) | max abs logit | HF folder | GGUF F32 |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['arch']} | {r['entropy']:.2f} | {r['scale']:.2f} | {r['hf_folder']:.1e} "
              f"| {r['gguf']:.1e} |")
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "archs_vs_hf.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
