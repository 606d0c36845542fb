"""The engine's configuration: one settings table builds one ``EngineConfig``."""

from __future__ import annotations

import dataclasses
import importlib

import pytest
from django.core.exceptions import ImproperlyConfigured

from apps.gateway.engine_client import engine_config
from inference.engine import config as engine_module
from inference.engine.config import EngineConfig
from inference.scheduler import POLICIES
from laser_platform.settings import inference as table

# Defaults that differ on purpose (laser_platform/settings/inference.py says why).
PLATFORM_ONLY = {"model", "device", "matmul_dtype", "num_threads",
                 "wide_threads", "kv_memory_mb"}


def test_the_table_sets_every_field_and_builds_a_valid_config():
    fields = {f.name for f in dataclasses.fields(EngineConfig)}
    assert set(table.LASER_ENGINE_CONFIG) == fields
    config = engine_config()
    assert config.policy == "laser" and config.max_num_seqs >= 64
    # 64 streams of ~600 tokens fit SmolLM2's float32 KV (45 KiB a token)
    assert config.kv_memory_mb * 2**20 >= 64 * 600 * 30 * 2 * 3 * 64 * 4


def test_defaults_agree_with_the_bare_engine_except_on_purpose():
    bare = EngineConfig()
    differ = {name for name, value in table.LASER_ENGINE_CONFIG.items()
              if getattr(bare, name) != value}
    assert differ <= PLATFORM_ONLY


def test_the_tables_choices_are_the_engines():
    assert set(table.DTYPES) == set(engine_module.DTYPES)
    assert set(table.MATMUL_DTYPES) == set(engine_module.MATMUL_DTYPES)
    assert set(table.POLICIES) == set(POLICIES)


@pytest.mark.parametrize("name, value", [("LASER_MAX_NUM_SEQS", "0"),
                                         ("LASER_KV_MEMORY_MB", "lots"),
                                         ("LASER_MATMUL_DTYPE", "fp8"),
                                         ("LASER_OVERLOAD_TTFT_FACTOR", "0.5")])
def test_a_bad_value_fails_at_start_naming_the_variable(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    try:
        with pytest.raises(ImproperlyConfigured, match=name):
            importlib.reload(table)
    finally:
        monkeypatch.delenv(name)
        importlib.reload(table)


def test_a_variable_reaches_the_engine(monkeypatch, settings):
    monkeypatch.setenv("LASER_MAX_NUM_SEQS", "96")
    try:
        settings.LASER_ENGINE_CONFIG = importlib.reload(table).LASER_ENGINE_CONFIG
        assert engine_config().max_num_seqs == 96
    finally:
        monkeypatch.delenv("LASER_MAX_NUM_SEQS")
        importlib.reload(table)
