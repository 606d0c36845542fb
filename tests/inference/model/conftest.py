"""Fixtures: tiny random Llama checkpoints in Hugging Face form."""

from __future__ import annotations

import pytest

from tests.inference.model.tiny_llama import VARIANTS, make_hf_llama


@pytest.fixture(params=sorted(VARIANTS))
def hf_dir(request, tmp_path_factory):
    """(directory, transformers model) for each config variant."""
    model = make_hf_llama(request.param)
    path = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(path, safe_serialization=True)
    return path, model
