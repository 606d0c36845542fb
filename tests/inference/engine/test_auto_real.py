"""``matmul_dtype=auto`` on the bundled SmolLM2: both packs, chosen per step by its rows."""

from __future__ import annotations

from collections import defaultdict

import pytest

import kernels
from inference.engine import EngineConfig, LLMEngine
from inference.request import EngineRequest, SamplingParams
from kernels.choice import Side

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (kernels.quant_supported() and kernels.bf16_matmul_supported()),
                       reason="auto keeps both packs only with both matmuls"),
]
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


def test_auto_keeps_the_france_answer_on_either_side_of_the_threshold():
    """One stream decodes on the quantized blocks, six at once on the bfloat16 packs (the
    prompts, more rows than the threshold, on bfloat16 too): Paris every time."""
    engine = LLMEngine(EngineConfig(matmul_dtype="auto", quant_max_rows=4, num_threads=1,
                                    kv_memory_mb=64))
    assert engine.runner._pack_sets is not None
    sp = SamplingParams(max_tokens=24, temperature=0.0)
    for streams, side in ((1, Side.QUANT), (6, Side.BF16)):
        for i in range(streams):
            engine.add_request(EngineRequest(f"{streams}-{i}", sp, messages=FRANCE))
        texts, sides = defaultdict(str), set()
        while engine.has_unfinished():
            for delta in engine.step():
                texts[delta.request_id] += delta.text
            sides.add(engine.runner.packs_in_use)
        assert side in sides
        assert len(texts) == streams
        assert all("Paris" in t for t in texts.values()), dict(texts)
