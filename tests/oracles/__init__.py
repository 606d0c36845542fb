"""Oracles made here: tiny GGUFs with llama.cpp's reference distributions (tests/oracles/data)."""
