"""Laser beside llama.cpp on tiny random-weight GGUFs, one per block type: the next-token
distributions over a fixed text (mean KL divergence, top-1 agreement).

    .venv/bin/python bench/oracle.py [--out DIR] [--types F32,Q8_0,...] [--modes float32,quant]
        [--fixtures]

Builds ``bench/models.py tiny`` models (128 wide for F32/F16/BF16 and the 32-wide block types,
256 wide for the K-quants, whose blocks are 256 wide), runs ``llama-perplexity -c 128 -b 128
--chunks 2 --kl-divergence-base`` on each over ``tests/oracles/data/text.txt`` (the first
lines of the US Declaration of Independence, public domain) and compares Laser's distributions
at the same positions (``tests/oracles/compare.py``) in each ``--modes`` (``float32``: exact
on the dequantised weights; ``quant``: the quantized matmul serving runs). ``--fixtures``
copies each GGUF and llama.cpp's reference into ``tests/oracles/data``, which
``tests/oracles/test_llama_cpp_oracle.py`` checks without llama.cpp. Targets (issue 47):
mean KL <= 0.01, top-1 >= 98 %. Writes ``bench/out/oracle.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import models  # noqa: E402

from tests.oracles import llama_cpp  # noqa: E402
from tests.oracles.compare import agreement, load_for, read_reference  # noqa: E402

DATA = ROOT / "tests" / "oracles" / "data"
TEXT = DATA / "text.txt"
CTX, CHUNKS = 128, 2
NARROW = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]
WIDE = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q4_K_M"]


def reference(gguf: Path, out: Path, threads: int, text: Path = TEXT) -> Path:
    """llama.cpp's distributions over ``text`` for ``gguf`` (a --kl-divergence-base file)."""
    tool = llama_cpp.tool("llama-perplexity")
    if tool is None:
        raise SystemExit("llama-perplexity is not built: run shared/peers/llama-server.sh")
    cmd = [str(tool), "-m", str(gguf), "-f", str(text), "-c", str(CTX), "-b", str(CTX),
           "--chunks", str(CHUNKS), "-t", str(threads), "--kl-divergence-base", str(out)]
    subprocess.run(cmd, check=True, capture_output=True,
                   env={**os.environ, "LD_LIBRARY_PATH": str(tool.parent)})
    return out


def build(out: Path, types: list[str]) -> dict[str, Path]:
    """Each requested type's tiny GGUF: {type: path}."""
    paths: dict[str, Path] = {}
    for width, group in ((128, NARROW), (256, WIDE)):
        wanted = [t for t in group if t in types]
        if wanted:
            built = models.tiny(out, width, wanted)
            paths.update({t: built[t] for t in wanted})
    return paths


def build_arch(out: Path, arch: str, types: list[str]) -> dict[str, Path]:
    """``arch``'s tiny model (``tests/inference/model/tiny_models.py``, its small byte-level
    vocabulary) as F32 and each of ``types``: {"arch/type": path}."""
    from tests.inference.model.tiny_gguf import write_arch_gguf
    from tests.inference.model.tiny_models import make_tiny

    out.mkdir(parents=True, exist_ok=True)
    f32 = out / f"{arch}-F32.gguf"
    write_arch_gguf(f32, make_tiny(arch), arch)
    return {f"{arch}/{t}": f32 if t == "F32" else
            models.quantize(f32, out / f"{arch}-{t}.gguf", t, pure=not t.endswith("_M"))
            for t in types}


def arch_text(out: Path) -> Path:
    """TEXT in the characters the architectures' tiny vocabulary has."""
    from tests.inference.loaders.gguf_writer import CHARS

    keep = set(CHARS) | {" "}
    path = out / "arch-text.txt"
    path.write_text("".join(c for c in TEXT.read_text(encoding="utf-8").lower() if c in keep))
    return path


def compare(gguf: Path, kld: Path, mode: str) -> dict:
    loaded = load_for(gguf, mode)
    tok = loaded.tokenizer
    bos = tok.bos_token_id if tok is not None and tok.encode("a")[0] == tok.bos_token_id \
        else None
    result = agreement(read_reference(kld), loaded.model, bos)
    return {"mean_kl": result.mean_kl, "max_kl": result.max_kl, "top1": result.top1,
            "entropy": result.entropy, "positions": result.positions}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="where to build (default: a temp dir)")
    ap.add_argument("--types", default=",".join(NARROW + WIDE))
    ap.add_argument("--modes", default="float32,quant")
    ap.add_argument("--archs", default="", help="also these tiny_models.ARCHS, e.g. qwen2,phi3")
    ap.add_argument("--arch-types", default="F32,Q8_0,Q4_K")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--fixtures", action="store_true", help="copy the pairs to tests/oracles")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="laser-oracle-"))
    rows = {}
    for qtype, gguf in build(out, args.types.split(",")).items():
        kld = reference(gguf, gguf.with_suffix(".kld"), args.threads)
        rows[qtype] = {"bytes": gguf.stat().st_size,
                       **{mode: compare(gguf, kld, mode) for mode in args.modes.split(",")}}
        if args.fixtures:
            shutil.copy(gguf, DATA / gguf.name)
            shutil.copy(kld, DATA / kld.name)
    text = arch_text(out) if args.archs else TEXT
    for arch in filter(None, args.archs.split(",")):
        for name, gguf in build_arch(out, arch, args.arch_types.split(",")).items():
            try:
                kld = reference(gguf, gguf.with_suffix(".kld"), args.threads, text)
            except subprocess.CalledProcessError as exc:
                print(f"{name}: llama-perplexity failed (rc {exc.returncode})", file=sys.stderr)
                continue
            rows[name] = {"bytes": gguf.stat().st_size,
                          **{mode: compare(gguf, kld, mode) for mode in args.modes.split(",")}}
    modes = args.modes.split(",")
    print("| type | file | " + " | ".join(f"{m} mean KL | {m} top-1" for m in modes)
          + " | entropy |")
    print("|---" * (3 + 2 * len(modes)) + "|")
    for qtype, row in rows.items():
        cells = " | ".join(f"{row[m]['mean_kl']:.2e} | {row[m]['top1']:.1%}" for m in modes)
        print(f"| {qtype} | {row['bytes'] / 1e3:.0f} kB | {cells} | "
              f"{row[modes[0]]['entropy']:.2f} |")
    (ROOT / "bench" / "out").mkdir(exist_ok=True)
    (ROOT / "bench" / "out" / "oracle.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
