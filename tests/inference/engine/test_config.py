"""EngineConfig: invariants checked on construction; no environment read (the platform's
settings table and the CLI's flags build it)."""

from __future__ import annotations

import pytest
import torch

from inference.cli import _parser, engine_config
from inference.engine.config import EngineConfig
from kernels.choice import MatmulMode


def test_defaults_are_exact_float32_on_cpu():
    cfg = EngineConfig()
    assert (cfg.torch_dtype, cfg.torch_kv_dtype, cfg.matmul_mode) == (
        torch.float32, torch.float32, MatmulMode.OWN)


def test_the_kv_cache_is_float16_on_cpu_only_beside_approximate_matmuls():
    for matmul in (None, "float32"):
        assert EngineConfig(matmul_dtype=matmul).torch_kv_dtype == torch.float32
    for matmul in ("auto", "quant", "q8", "bfloat16"):
        assert EngineConfig(matmul_dtype=matmul).torch_kv_dtype == torch.float16
    assert EngineConfig(matmul_dtype="auto", kv_cache_dtype="float32").torch_kv_dtype == \
        torch.float32
    assert EngineConfig(device="cuda", matmul_dtype="auto").torch_kv_dtype == torch.bfloat16


def test_the_environment_is_not_read(monkeypatch):
    monkeypatch.setenv("LASER_MATMUL_DTYPE", "bfloat16")
    monkeypatch.setenv("LASER_MAX_NUM_SEQS", "3")
    cfg = EngineConfig()
    assert cfg.matmul_dtype is None and cfg.max_num_seqs == 128
    assert not hasattr(EngineConfig, "from_env")


def test_matmul_dtype_is_a_cpu_setting():
    assert EngineConfig(device="cuda", matmul_dtype="bfloat16").matmul_mode is MatmulMode.OWN
    assert EngineConfig(device="cuda", matmul_dtype="auto").matmul_mode is MatmulMode.OWN


def test_auto_matmul_dtype_follows_the_cpu(monkeypatch):
    import kernels

    monkeypatch.setattr(kernels, "quant_supported", lambda: True)
    both = ((True, MatmulMode.AUTO), (False, MatmulMode.QUANT))  # AUTO: both packs
    for native, expected in both:
        monkeypatch.setattr(kernels, "bf16_matmul_supported", lambda native=native: native)
        assert EngineConfig(matmul_dtype="auto").matmul_mode is expected
    monkeypatch.setattr(kernels, "quant_supported", lambda: False)  # no AVX2: as before
    for native, expected in ((True, MatmulMode.BF16), (False, MatmulMode.OWN)):
        monkeypatch.setattr(kernels, "bf16_matmul_supported", lambda native=native: native)
        assert EngineConfig(matmul_dtype="auto").matmul_mode is expected
    # a bfloat16 model has nothing to gain
    assert EngineConfig(matmul_dtype="auto", dtype="bfloat16").matmul_mode is MatmulMode.OWN
    assert EngineConfig(matmul_dtype="bfloat16").matmul_mode is MatmulMode.BF16
    assert EngineConfig(matmul_dtype="q8").matmul_mode is MatmulMode.Q8


@pytest.mark.parametrize("bad", [{"matmul_dtype": "float16"}, {"matmul_dtype": "fp8"},
                                 {"dtype": "float64"}, {"block_size": 0},
                                 {"policy": "nope"}, {"overload_ttft_factor": 0.5},
                                 {"max_num_batched_tokens": 64, "long_prefill_chunk": 128}])
def test_bad_values_fail_on_construction(bad):
    with pytest.raises(ValueError):
        EngineConfig(**bad)


def test_the_cli_builds_the_config_from_its_flags(monkeypatch):
    monkeypatch.setenv("LASER_MAX_NUM_SEQS", "3")  # ignored: flags only
    args = _parser().parse_args(["generate", "--prompt", "x", "--matmul-dtype", "bfloat16",
                                 "--max-num-seqs", "7", "--kv-memory-mb", "12"])
    cfg = engine_config(args)
    assert (cfg.matmul_dtype, cfg.max_num_seqs, cfg.kv_memory_mb) == ("bfloat16", 7, 12.0)
    assert engine_config(_parser().parse_args(["chat"])).kv_memory_mb == 64.0
    with pytest.raises(ValueError, match="matmul_dtype"):
        engine_config(_parser().parse_args(["chat", "--matmul-dtype", "fp8"]))


def test_pool_spin_is_bounded_below():
    assert EngineConfig().pool_spin_us > 0
    assert EngineConfig(pool_spin_us=0).pool_spin_us == 0
    with pytest.raises(ValueError, match="pool_spin_us"):
        EngineConfig(pool_spin_us=-1)
