"""Laser's next-token distributions match llama.cpp's on tiny GGUFs of each block type.

The fixtures in ``tests/oracles/data`` were made by ``bench/oracle.py --fixtures``: a random
one-layer Llama (``bench/models.py tiny``) in each type, and llama.cpp's own distributions over
``text.txt`` from ``llama-perplexity --kl-divergence-base``. Targets (issue 47): mean KL
divergence <= 0.01 and top-1 agreement >= 98 %, on distributions neither flat nor peaked.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.oracles import llama_cpp
from tests.oracles.compare import agreement, load_for, read_reference

DATA = Path(__file__).resolve().parent / "data"
TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
         "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q4_K_M"]
MAX_KL, MIN_TOP1 = 0.01, 0.98


def fixture(qtype: str) -> tuple[Path, Path]:
    width = 256 if "_K" in qtype else 128
    base = DATA / f"tiny{width}-{qtype}"
    return base.with_suffix(".gguf"), base.with_suffix(".kld")


def check(gguf: Path, kld: Path, mode: str) -> None:
    loaded = load_for(gguf, mode)
    result = agreement(read_reference(kld), loaded.model, loaded.tokenizer.bos_token_id)
    assert 1.0 <= result.entropy <= 4.0, result  # the comparison means something
    assert result.mean_kl <= MAX_KL and result.top1 >= MIN_TOP1, result


@pytest.mark.parametrize("mode", ["float32", "quant"])
@pytest.mark.parametrize("qtype", TYPES)
def test_same_distributions_as_llama_cpp(qtype, mode):
    check(*fixture(qtype), mode)


def test_same_tokens_as_llama_cpp():
    """The text as llama.cpp tokenized it (stored beside its distributions), BOS first: the
    cut-down SentencePiece vocabulary is the committed tokenizer fixture."""
    gguf, kld = fixture("F32")
    ref = read_reference(kld)
    tok = load_for(gguf, "float32").tokenizer
    ids = tok.encode((DATA / "text.txt").read_text(encoding="utf-8"))
    assert ids[0] == tok.bos_token_id == 1
    assert ids[:len(ref.tokens)] == ref.tokens.tolist()
    assert any(tok.id_to_token(i).startswith("<0x") for i in ids)  # byte fallback ran


@pytest.mark.slow
@pytest.mark.parametrize("qtype", ["F16", "Q4_0", "Q4_K_M"])
def test_regenerated_with_llama_cpp(qtype, tmp_path):
    """Rebuild one model and llama.cpp's reference here (needs the peer's tree: ~20 s)."""
    if llama_cpp.tool("llama-perplexity") is None or llama_cpp.tool("llama-quantize") is None:
        pytest.skip("llama.cpp is not built (shared/peers/llama-server.sh)")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import oracle

    gguf = oracle.build(tmp_path, [qtype])[qtype]
    assert gguf.stat().st_size == fixture(qtype)[0].stat().st_size
    check(gguf, oracle.reference(gguf, gguf.with_suffix(".kld"), 2), "quant")
