"""EngineConfig: invariants checked on construction, LASER_* variables read loudly."""

from __future__ import annotations

import pytest
import torch

from inference.engine.config import EngineConfig


def test_defaults_are_exact_float32_on_cpu():
    cfg = EngineConfig()
    assert (cfg.torch_dtype, cfg.torch_kv_dtype, cfg.torch_matmul_dtype) == (
        torch.float32, torch.float32, None)


@pytest.mark.parametrize("value, expected", [("bfloat16", torch.bfloat16), ("float32", None)])
def test_matmul_dtype_from_the_environment(value, expected):
    cfg = EngineConfig.from_env({"LASER_MATMUL_DTYPE": value})
    assert cfg.matmul_dtype == value and cfg.torch_matmul_dtype == expected


def test_matmul_dtype_is_a_cpu_setting():
    assert EngineConfig(device="cuda", matmul_dtype="bfloat16").torch_matmul_dtype is None
    assert EngineConfig(device="cuda", matmul_dtype="auto").torch_matmul_dtype is None


def test_auto_matmul_dtype_follows_the_cpu(monkeypatch):
    import kernels

    monkeypatch.setattr(kernels, "quant_supported", lambda: True)
    assert EngineConfig(matmul_dtype="auto").torch_matmul_dtype == kernels.QUANT
    monkeypatch.setattr(kernels, "quant_supported", lambda: False)  # no AVX2: as before
    for native, expected in ((True, torch.bfloat16), (False, None)):
        monkeypatch.setattr(kernels, "bf16_matmul_supported", lambda native=native: native)
        assert EngineConfig(matmul_dtype="auto").torch_matmul_dtype == expected
    # a bfloat16 model has nothing to gain
    assert EngineConfig(matmul_dtype="auto", dtype="bfloat16").torch_matmul_dtype is None


@pytest.mark.parametrize("bad", [{"matmul_dtype": "float16"}, {"matmul_dtype": "int8"},
                                 {"dtype": "float64"}, {"block_size": 0},
                                 {"policy": "nope"}, {"overload_ttft_factor": 0.5},
                                 {"max_num_batched_tokens": 64, "long_prefill_chunk": 128}])
def test_bad_values_fail_on_construction(bad):
    with pytest.raises(ValueError):
        EngineConfig(**bad)


def test_bad_environment_names_the_variable():
    with pytest.raises(ValueError, match="LASER_THREADS"):
        EngineConfig.from_env({"LASER_THREADS": "two"})
    with pytest.raises(ValueError, match="matmul_dtype"):
        EngineConfig.from_env({"LASER_MATMUL_DTYPE": "fp8"})


def test_layer_pause_is_on_unless_the_environment_turns_it_off():
    assert EngineConfig.from_env({}).layer_pause
    assert not EngineConfig.from_env({"LASER_LAYER_PAUSE": "false"}).layer_pause
    with pytest.raises(ValueError, match="LASER_LAYER_PAUSE"):
        EngineConfig.from_env({"LASER_LAYER_PAUSE": "sometimes"})
