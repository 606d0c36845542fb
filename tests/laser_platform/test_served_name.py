"""`/v1/models` names the model `LASER_MODEL` serves."""

from __future__ import annotations

import pytest

from laser_platform.settings.gateway import served_name


@pytest.mark.parametrize(("model", "name"), [
    ("smollm2-135m-instruct", "smollm2-135m-instruct"), ("", "smollm2-135m-instruct"),
    ("/models/Llama-3.2-1B-Instruct-Q4_K_M.gguf", "Llama-3.2-1B-Instruct-Q4_K_M"),
    ("/models/qwen2.5-0.5b/", "qwen2.5-0.5b"), ("rel/Mistral.GGUF", "Mistral"),
])
def test_served_name_follows_the_checkpoint(model, name):
    assert served_name(model) == name
