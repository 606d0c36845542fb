"""`python -m inference generate|chat` on a tiny GGUF (and, slow, on the bundled model)."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from gguf import GGMLQuantizationType as Q

from inference.cli import main
from tests.inference.loaders.gguf_writer import write_tiny_gguf
from tests.inference.model.tiny_llama import make_hf_llama


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "tiny.gguf"
    write_tiny_gguf(path, make_hf_llama("tied_mha"), Q.F32)
    return str(path)


def run(argv, stdin=""):
    out = io.StringIO()
    assert main(argv, out=out, inp=io.StringIO(stdin)) == 0
    return out.getvalue()


def test_generate_is_deterministic_greedy(tiny_gguf, monkeypatch, tmp_path):
    monkeypatch.setenv("LASER_MODEL_CACHE", str(tmp_path))
    argv = ["generate", "--model", tiny_gguf, "--prompt", "hello", "--max-tokens", "6",
            "--kv-memory-mb", "1"]
    first = run(argv)
    assert first.endswith("\n") and first == run(argv)
    assert run([*argv, "--raw"]).endswith("\n")


def test_chat_keeps_history_and_quits_on_empty_line(tiny_gguf, monkeypatch, tmp_path):
    monkeypatch.setenv("LASER_MODEL_CACHE", str(tmp_path))
    text = run(["chat", "--model", tiny_gguf, "--max-tokens", "3", "--kv-memory-mb", "1"],
               stdin="hello\nworld\n\n")
    assert text.count("> ") == 3  # two turns, then the prompt that read the empty line


@pytest.mark.slow
def test_default_model_answers_paris():
    proc = subprocess.run(
        [sys.executable, "-m", "inference", "generate", "--prompt",
         "What is the capital of France?", "--max-tokens", "24"],
        capture_output=True, text=True, timeout=300, check=True)
    assert "Paris" in proc.stdout
