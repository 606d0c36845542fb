"""Triton kernels and their launchers, one file per op. Importing any module here imports
Triton and decorates its kernels, so ``kernels`` imports them only on first use."""
