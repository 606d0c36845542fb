"""Characterisation: greedy tokens and a digest of every step's logits, per matmul mode and
forward path, against values recorded on this machine before the model's backends were
refactored (issue 21 item 4). Bit-identity, not closeness: a refactor of how a layer reaches
its kernels must not change one bit.

The digests depend on the CPU (its ISA picks oneDNN's and the C kernels' code paths), so the
data file keeps one recording per machine fingerprint and the test skips on a machine without
one; record it there, at the commit before a refactor, with
``LASER_RECORD_CHARACTERISATION=1 pytest tests/inference/model/test_characterisation.py``
(other machines' recordings are kept).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path

import pytest
import torch

import kernels
from inference.model import AttentionMetadata, LlamaModel
from kernels import _cpu
from kernels._cpu import quant
from tests.kernels.backend import use_backend
from tests.kernels.block_model import block_model

DATA = Path(__file__).with_name("data") / "characterisation.json"
BLOCK = 8
RECORD = os.environ.get("LASER_RECORD_CHARACTERISATION") == "1"
# (name, LASER_KERNELS, matmul mode passed to pack_linears or "none" for no packing,
#  native_gemm, attention_bias)
MODES = [
    ("reference", "reference", "none", False, False),
    ("c-unpacked", "auto", "none", False, False),
    ("float32-onednn", "auto", None, False, False),
    ("bf16-onednn", "auto", torch.bfloat16, False, False),
    ("bf16-ours", "auto", torch.bfloat16, True, False),
    ("bf16-ours-bias", "auto", torch.bfloat16, True, True),
    ("quant", "auto", kernels.QUANT, False, False),
    ("q8", "auto", kernels.Q8, False, False),
    ("quant-bias", "auto", kernels.QUANT, False, True),
]


def _fingerprint() -> str:
    parts = [_cpu._cpu_name(), platform.machine(), torch.__version__]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _model(bias: bool) -> LlamaModel:
    """Four layers, rows in whole 32-blocks, weights that are Q8_0 values kept as blocks."""
    return block_model(blocks=True, layers=4, seed=11, max_position=256, bias=bias)


def _forward(model, ids, positions, caches, meta, layerwise):
    if not layerwise:
        return model(ids, positions, caches, meta)
    hidden, residual, done = model.embed(ids), None, 0
    while done < len(model.layers):  # paused after every layer, resumed in place
        hidden, residual, ran = model.run_layers(positions, hidden, residual, caches, meta, done,
                                                 stop=lambda: True, min_layers=1)
        done += ran
    return model.norm_out(hidden, residual)


def _drive(model: LlamaModel, layerwise: bool) -> list:
    """Three sequences: A's 70-token prompt in chunks of 40 and 30 beside B's 5-token prompt,
    then decodes; C's 70-token prompt in one chunk (past the C attention's chunk rows); greedy.
    Returns per step the greedy tokens and the sha256 of the float32 logits."""
    torch.manual_seed(2)
    caches = model.allocate_kv_caches(40, BLOCK)
    tables = [list(range(0, 12)), list(range(12, 16)), list(range(16, 28))]
    prompts = [torch.randint(0, 96, (70,)), torch.randint(0, 96, (5,)),
               torch.randint(0, 96, (70,))]
    lens = [0, 0, 0]
    last: dict[int, int] = {}  # each sequence's latest greedy token
    steps = [[(0, prompts[0][:40]), (1, prompts[1])], [(0, prompts[0][40:])], [(2, prompts[2])]]
    steps += [[(s, None) for s in (0, 1, 2)]] * 5
    out = []
    with torch.inference_mode():
        for step in steps:
            step = [(s, torch.tensor([last[s]]) if t is None else t) for s, t in step]
            ids = torch.cat([t for _, t in step])
            positions = torch.cat([torch.arange(lens[s], lens[s] + len(t)) for s, t in step])
            meta = AttentionMetadata.build([tables[s] for s, _ in step],
                                           [lens[s] + len(t) for s, t in step],
                                           [len(t) for _, t in step], BLOCK)
            for s, t in step:
                lens[s] += len(t)
            hidden = _forward(model, ids, positions, caches, meta, layerwise)
            rows = meta.query_start_loc[1:].long() - 1
            logits = model.compute_logits(hidden[rows], exact=not meta.is_decode_only).float()
            tokens = logits.argmax(-1).tolist()
            last.update(zip([s for s, _ in step], tokens))
            digest = hashlib.sha256(logits.contiguous().numpy().tobytes()).hexdigest()[:24]
            out.append([tokens, digest])
    return out


def _case(monkeypatch, name, env, mode, native_gemm, bias, layerwise) -> list:
    use_backend(monkeypatch, env)
    model = _model(bias)
    if mode != "none":
        model.pack_linears(mode, native_gemm=native_gemm)
    return _drive(model, layerwise)


@pytest.fixture(autouse=True)
def _threads():
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    _cpu.set_threads(0)
    yield
    torch.set_num_threads(saved)
    _cpu.set_threads(0)


def _load() -> dict:
    """The data file: each machine fingerprint's recorded cases."""
    return json.loads(DATA.read_text()) if DATA.exists() else {"machines": {}}


def _recorded() -> dict:
    cases = _load()["machines"].get(_fingerprint())
    if cases is None:
        pytest.skip("no characterisation recorded on this CPU/torch (see the module doc)")
    return cases


@pytest.mark.skipif(_cpu.library() is None or not quant.supported()
                    or not _cpu.gemm_supported() or not kernels.bf16_matmul_supported(),
                    reason="needs every CPU matmul mode")
@pytest.mark.parametrize("layerwise", [False, True], ids=["whole", "paused"])
@pytest.mark.parametrize(("name", "env", "mode", "native_gemm", "bias"), MODES,
                         ids=[m[0] for m in MODES])
def test_outputs_are_bit_identical_to_the_recorded_ones(monkeypatch, name, env, mode,
                                                        native_gemm, bias, layerwise):
    key = f"{name}/{'paused' if layerwise else 'whole'}"
    got = _case(monkeypatch, name, env, mode, native_gemm, bias, layerwise)
    if RECORD:
        data = _load()
        data["machines"].setdefault(_fingerprint(), {})[key] = got
        DATA.parent.mkdir(exist_ok=True)
        DATA.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        return
    assert got == _recorded()[key]
