"""The model and the runner on the quantized matmul (``matmul_dtype`` ``quant`` / ``q8``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import torch

import kernels
from inference.model import LlamaModel
from kernels import _cpu
from kernels._cpu import quant
from kernels.backends import Packing
from kernels.choice import MatmulMode, Side
from tests.kernels.backend import use_backend
from tests.kernels.block_model import block_model
from tests.kernels.paged import rel_err

if TYPE_CHECKING:
    from inference.engine.runner import BatchInputs

pytestmark = pytest.mark.skipif(not quant.supported(),
                                reason="no vector path for the quantized matmul here")


def _model(blocks: bool = False, layers: int = 2) -> LlamaModel:
    return block_model(blocks=blocks, layers=layers, seed=3, max_position=128)


@pytest.fixture(autouse=True)
def _restore():
    yield
    _cpu.set_threads(0)


def _run(model, monkeypatch):
    from tests.kernels.test_model_triton_path import _run as run

    return run(model, monkeypatch, "auto")


def _outlier_model() -> LlamaModel:
    """``_model(blocks=True)`` four blocks wide, its norms six times larger in the first
    32 channels: the QKV and gate-up inputs have an outlier block in every row, as the real
    model's do in a few (docs/engine.md), so the selective split keeps a second part there."""
    model = block_model(blocks=True, layers=2, seed=3, max_position=128, hidden=128,
                        intermediate=192)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("input_norm", "post_attn_norm")):
                p[:32] *= 6
    return model


def test_quant_mode_is_close_to_float32_on_the_same_weights(monkeypatch) -> None:
    """On weights that are Q8_0 values, float32 multiplies exactly what the quantized matmul
    stores: two-part activations everywhere stay within 1e-3 of it, one part in every decode
    matmul (q8) adds its own rounding, and quant (decode steps' selective projections in one
    part but for each row's outlier blocks) lies between two parts and its split with one part
    in their place; on a model without outlier blocks it is that split, bit for bit. (The
    head's screen is rescored in float32 over the whole tiny vocabulary here: its tail has the
    one-part rounding in every mode.)"""
    from kernels import backends, packing

    monkeypatch.setattr(backends, "SCREEN_TOP", 96)
    split = packing.QUANT_DECODE_SPLIT
    assert quant.SEL in split
    as_one = tuple(quant.ONE if k == quant.SEL else k for k in split)
    for build, outliers in ((_outlier_model, True), (lambda: _model(blocks=True), False)):
        exact = _run(build(), monkeypatch)
        errs = {}
        for name, mode, decode in (("two", kernels.QUANT, (quant.TWO,) * 4),
                                   ("quant", kernels.QUANT, split),
                                   ("as_one", kernels.QUANT, as_one),
                                   ("q8", kernels.Q8, split)):
            monkeypatch.setattr(packing, "QUANT_DECODE_SPLIT", decode)
            model = build()
            assert model.pack_linears(mode) and model.quantized
            assert {type(layer.backend.decode[3]) for layer in model.layers} == \
                {quant.PackedQuant}
            assert all(p.split for layer in model.layers for p in layer.backend.prompt)
            want = decode if mode == kernels.QUANT else (quant.ONE,) * 4
            assert all(tuple(p.split for p in layer.backend.decode) == want
                       for layer in model.layers)
            errs[name] = rel_err(_run(model, monkeypatch), exact)
        assert 0 < errs["two"] <= 1e-3
        assert 3 * errs["two"] <= errs["q8"] <= 0.03
        if outliers:
            assert errs["two"] < errs["quant"] < errs["as_one"], errs
        else:
            assert errs["quant"] == errs["as_one"], errs


def test_weights_without_blocks_are_quantised_to_q8_0(monkeypatch) -> None:
    model = _model()
    assert model.pack_linears(kernels.QUANT)
    assert model.layers[0].backend.decode[3].fmt == quant.Q8_0
    assert rel_err(_run(model, monkeypatch), _run(_model(), monkeypatch)) <= 0.05


@pytest.mark.parametrize("mode", kernels.QUANT_MODES)
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_one_call_layer_equals_the_layer_op_by_op(monkeypatch, mode, threads) -> None:
    """``_cpu.decoder_layer`` on quantized packs (each with its own activation parts) runs the
    same C calls as the op-by-op path: the same bits, at any thread count."""
    model = _model()
    assert model.pack_linears(mode)
    _cpu.set_threads(threads)
    stacks, calls = [], []
    real_stack, real = _cpu.decoder_stack, _cpu.decoder_layer
    monkeypatch.setattr(_cpu, "decoder_stack",
                        lambda *a, **k: stacks.append(1) or real_stack(*a, **k))
    monkeypatch.setattr(_cpu, "decoder_layer", lambda *a, **k: calls.append(1) or real(*a, **k))
    fused = _run(model, monkeypatch)
    assert len(stacks) == 3 and not calls  # the whole stack in one C call a step
    monkeypatch.setattr(Packing, "_stack", lambda *a: None)  # one C call a layer
    assert torch.equal(_run(model, monkeypatch), fused)
    assert len(calls) == 3 * len(model.layers)
    for layer in model.layers:
        layer.backend.set_one_call(False)
    assert torch.equal(_run(model, monkeypatch), fused)
    _cpu.set_threads(1)
    for layer in model.layers:
        layer.backend.set_one_call(True)
    assert torch.equal(_run(model, monkeypatch), fused)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_stack_stops_between_layers_and_resumes_to_the_same_bits(monkeypatch, threads):
    """``LlamaModel.run_layers`` on the one-call stack, stopped by ``stop()`` after each
    possible layer count and resumed in place (as a paused step is), gives the bits of one
    uninterrupted run: over a prompt chunk (split activations) and a decode step."""
    from inference.model import AttentionMetadata

    use_backend(monkeypatch, "auto")
    model = _model(blocks=True, layers=4)
    assert model.pack_linears(kernels.QUANT)
    _cpu.set_threads(threads)
    torch.manual_seed(5)
    prompt = torch.randint(0, 96, (11,))
    steps = [(prompt, 0), (torch.tensor([3]), 11)]
    results = {}
    for chunk in (4, 1, 2, 3):  # layers a call runs before its stop() says so
        caches = model.allocate_kv_caches(4, 8)
        out = []
        with torch.inference_mode():
            for ids, start in steps:
                meta = AttentionMetadata.build([[2, 0]], [start + len(ids)], [len(ids)], 8)
                positions = torch.arange(start, start + len(ids))
                hidden = model.embed(ids)
                # stopped before its first layer: nothing ran, nothing changed
                same, residual, ran = model.run_layers(positions, hidden, None, caches, meta,
                                                       stop=lambda: True)
                assert same is hidden and residual is None and ran == 0
                done = 0
                while done < len(model.layers):
                    asked = []
                    hidden, residual, ran = model.run_layers(
                        positions, hidden, residual, caches, meta, done,
                        stop=lambda asked=asked: asked.append(1) or len(asked) >= chunk,
                        min_layers=1)
                    assert ran == min(chunk, len(model.layers) - done)
                    done += ran
                out.append(model.compute_logits(model.norm_out(hidden, residual)))
        results[chunk] = torch.cat(out)
    assert all(torch.equal(got, results[4]) for got in results.values())


def test_rows_that_are_not_whole_blocks_fall_back_to_bfloat16(monkeypatch) -> None:
    from tests.kernels.test_model_triton_path import _tiny_model  # hidden 48

    model = _tiny_model()
    model.pack_linears(kernels.QUANT)
    assert not model.quantized
    assert not isinstance(model.layers[0].backend.decode[3], quant.PackedQuant)


@pytest.mark.parametrize("mode", kernels.QUANT_MODES)
def test_the_runner_packs_the_quantized_mode_and_uses_every_thread(mode) -> None:
    from inference.engine.runner import ModelRunner

    saved = torch.get_num_threads()
    try:
        runner = ModelRunner(_model(), num_blocks=4, block_size=16, matmul_mode=mode,
                             threads=(1, 2))
    finally:
        torch.set_num_threads(saved)
    assert runner.model.quantized and runner.pool_threads == 2
    assert isinstance(runner.model.packing.head_screen, quant.PackedQuant)


def test_auto_picks_the_quantized_mode_where_it_has_a_vector_path(monkeypatch) -> None:
    from inference.engine.config import EngineConfig

    both = MatmulMode.AUTO if kernels.bf16_matmul_supported() else MatmulMode.QUANT
    assert EngineConfig(matmul_dtype="auto").matmul_mode is both
    assert EngineConfig(matmul_dtype="q8").matmul_mode is MatmulMode.Q8
    assert EngineConfig().matmul_mode is MatmulMode.OWN  # the library's default stays exact
    monkeypatch.setattr(quant, "supported", lambda: False)
    want = MatmulMode.BF16 if kernels.bf16_matmul_supported() else MatmulMode.OWN
    assert EngineConfig(matmul_dtype="auto").matmul_mode is want
    model = _model()
    model.pack_linears(kernels.QUANT)  # asked for, but not here: what auto would pick
    assert not model.quantized


def _step(rows: int, first: int = 0) -> BatchInputs:
    """A decode step of ``rows`` one-token sequences at position 0 (block ``first + i``), or,
    with ``rows`` < 0, one prompt of ``-rows`` tokens."""
    from inference.engine.runner import BatchInputs
    from inference.model import AttentionMetadata

    torch.manual_seed(rows + 10)
    n, q = (1, -rows) if rows < 0 else (rows, 1)
    meta = AttentionMetadata.build([[first + i] for i in range(n)], [q] * n, [q] * n, 16)
    tokens = n * q
    return BatchInputs(torch.randint(0, 96, (tokens,)), torch.arange(q).repeat(n), meta,
                       torch.arange(q - 1, tokens, q), [str(i) for i in range(n)])


def _runner(mode, **kw):
    from inference.engine.runner import ModelRunner

    saved = torch.get_num_threads()
    try:
        return ModelRunner(_model(blocks=True), num_blocks=8, block_size=16, matmul_mode=mode,
                           threads=(1, 2), **kw)
    finally:
        torch.set_num_threads(saved)


@pytest.mark.skipif(not kernels.bf16_matmul_supported(), reason="no native bfloat16 matmuls")
def test_auto_runs_small_steps_on_the_quantized_blocks_and_larger_ones_on_bfloat16() -> None:
    """Both packs resident; each step runs on the one for its rows, with that mode's pool
    threads, and gives the very logits a runner with only that mode gives (the one-call layer
    included), whichever side the previous step ran on."""
    from inference.engine.runner import AUTO

    auto = _runner(AUTO, quant_max_rows=2)
    alone = {Side.QUANT: _runner(kernels.QUANT), Side.BF16: _runner(torch.bfloat16)}
    cases = [(1, Side.QUANT, 2), (3, Side.BF16, 2), (2, Side.QUANT, 2), (-5, Side.BF16, 2),
             (1, Side.QUANT, 2)]
    for rows, side, pool in cases:
        got = auto.execute(_step(rows))
        assert auto.packs_in_use == side and auto.pool_threads == pool
        layer = auto.model.layers[0]
        # bfloat16 on Laser's own matmul where the CPU has AVX512-BF16, else oneDNN's pack
        want_type = (quant.PackedQuant if side == Side.QUANT else
                     _cpu.PackedBF16 if _cpu.gemm_supported() else torch.Tensor)
        assert isinstance(layer.backend.decode[3], want_type)
        assert layer.backend.one_call == (side == Side.QUANT or _cpu.gemm_supported())
        assert auto.model.quantized == (side == Side.QUANT)
        assert torch.equal(got, alone[side].execute(_step(rows))), (rows, side)


@pytest.mark.skipif(not kernels.bf16_matmul_supported(), reason="no native bfloat16 matmuls")
def test_a_paused_step_resumes_on_its_own_packs_after_a_step_on_the_others() -> None:
    """Layer pause: a 3-row step stopped after one layer, a 1-row (quantized) step in between,
    then the rest: the same logits as the 3-row step run whole."""
    from inference.engine.runner import AUTO

    auto, whole = _runner(AUTO, quant_max_rows=2), _runner(AUTO, quant_max_rows=2)
    want = whole.execute(_step(3))
    paused = auto.begin(_step(3))
    assert not paused.advance(lambda: True)
    auto.execute(_step(1, first=4))
    assert auto.packs_in_use == Side.QUANT
    assert paused.advance(lambda: False)
    assert torch.equal(paused.logits(), want) and auto.packs_in_use == Side.BF16


@pytest.mark.skipif(not kernels.bf16_matmul_supported(), reason="no native bfloat16 matmuls")
def test_auto_with_a_table_runs_the_side_it_gives_each_kind_and_band() -> None:
    """A table passed in (what the calibration records at load) decides every step: decode
    steps of one row on the blocks, wider ones and prompts on bfloat16, with that side's
    logits."""
    from inference.engine.runner import AUTO
    from tests.kernels.test_choice import make_table

    auto = _runner(AUTO, sides=make_table(kernels.Band.ONE, prompt=Side.BF16))
    alone = {Side.QUANT: _runner(kernels.QUANT), Side.BF16: _runner(torch.bfloat16)}
    for rows, side in ((1, Side.QUANT), (3, Side.BF16), (1, Side.QUANT), (-5, Side.BF16)):
        got = auto.execute(_step(rows))
        assert auto.packs_in_use == side
        assert torch.equal(got, alone[side].execute(_step(rows))), (rows, side)


@pytest.mark.skipif(not kernels.bf16_matmul_supported(), reason="no native bfloat16 matmuls")
def test_auto_calibrates_a_side_for_every_kind_and_band_at_load() -> None:
    """Unpinned and without a table, the runner times both sides at load and records a side
    per kind and band (which one wins is this machine's business, not the test's)."""
    from inference.engine.runner import AUTO

    auto = _runner(AUTO)
    sides = auto.kernels.sides
    assert isinstance(sides, kernels.SideTable)
    assert {(kind, band) for kind, band, _ in sides.rows} == {
        (kind, band) for kind in kernels.StepKind for band in kernels.Band}
    want = sides.side(3, kernels.StepKind.DECODE)
    auto.execute(_step(3))
    assert auto.packs_in_use == want


def test_the_threshold_is_a_config_field() -> None:
    from inference.engine.config import EngineConfig

    assert EngineConfig().quant_max_rows is None  # calibrated at load (docs/engine.md)
    with pytest.raises(ValueError, match="quant_max_rows"):
        EngineConfig(quant_max_rows=-1)


@pytest.mark.parametrize("one_call", [True, False])
def test_decode_rows_beside_a_prompt_chunk_get_the_decode_steps_logits(one_call) -> None:
    """quant mode: a step with a prompt chunk after its decode rows runs those rows as a
    decode step does (selective activations), so their logits are a decode step's,
    bit for bit, on the one-call layer and op by op; the prompt's own rows keep two parts."""
    from inference.engine.runner import BatchInputs
    from inference.model import AttentionMetadata

    runner = _runner(kernels.QUANT)
    for layer in runner.model.layers:
        layer.backend.set_one_call(one_call)

    def step(tables, seq_lens, q_lens, ids, positions) -> torch.Tensor:
        meta = AttentionMetadata.build(tables, seq_lens, q_lens, 16)
        ends = torch.tensor(q_lens).cumsum(0) - 1
        return runner.execute(BatchInputs(torch.tensor(ids), torch.tensor(positions), meta,
                                          ends, [str(i) for i in range(len(q_lens))]))

    prompt = [5, 9, 14, 3, 27]
    step([[0], [1]], [5, 5], [5, 5], prompt * 2, list(range(5)) * 2)  # two prefilled
    decode = step([[0], [1]], [6, 6], [1, 1], [40, 41], [5, 5])
    mixed = step([[0], [1], [2]], [6, 6, 7], [1, 1, 7], [40, 41, *prompt, 8, 60],
                 [5, 5, *range(7)])
    assert torch.equal(mixed[:2], decode)
    alone = step([[2]], [7], [7], [*prompt, 8, 60], list(range(7)))
    assert torch.equal(mixed[2:], alone)
