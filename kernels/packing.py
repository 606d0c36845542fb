"""Packing a decoder's weights for a matmul mode, once, into a ``kernels.backends.Packing``.

``matmul_dtype`` None keeps each projection in its own dtype (oneDNN-packed on a CPU). bfloat16
(for a float32 model) packs the layers' projections in bfloat16 for decode steps: mixed
precision, see ``kernels.linear``. Steps with prompt tokens keep float32 packs and the exact LM
head: with the prompt's KV cache exact, the bfloat16 decode steps gave the float32 greedy
answers to all eight prompts of ``bench/cpu_precision.py`` where bfloat16 prefills changed four
of them (docs/benchmarks.md). The LM head keeps its own dtype for the largest logits; a
bfloat16 copy only screens the vocabulary in decode steps (``Packing.logits``).

``native_gemm`` packs the bfloat16 copies for Laser's own matmul
(``pack_linear_weight(..., native=True)``) where it builds: the runner asks for it when decode
steps run on one thread. Steps with prompt tokens then multiply the same bfloat16 weights with
their float32 activations split in two bfloat16 parts (only the weights rounded;
``_cpu.PackedBF16.split_view``) instead of a float32 copy: no second copy of the projections,
and faster than float32 oneDNN. With every projection on Laser's matmul and no QKV bias a
layer runs as one C call, and the whole stack too.

``QUANT`` / ``Q8``: every projection and the LM head screen on the quantized matmul, from the
GGUF's own blocks (a weight without them is quantised to Q8_0). Steps with prompt tokens
quantise their activations in two parts (``PackedQuant.split_view``); decode steps with
``QUANT`` keep the second part only in each row's outlier blocks but in the down projection
(``QUANT_DECODE_SPLIT``), with ``Q8`` one part (llama.cpp's arithmetic): with one part
everywhere, 4 of bench/cpu_precision.py's 8 answers once left float32's, with two none did.
In a step with prompt tokens, the decode rows before its prompt chunks keep the decode steps'
parts (``quant.PROMPT_SEL``; ``PROMPT_TWO`` beside one-part rows): their tokens do not depend
on a prompt sharing their step, and a gate-up projection in two parts made such a step
markedly dearer than its decode rows alone.
The head screens every step, prompts included: its ``SCREEN_TOP`` best logits are rescored
in float32 on the dequantised weights, so the greedy choice is exact there too, and no step
reads the 113 MB float32 head. Where the quantized matmul does not serve (no C compiler, no
AVX2, rows not in 32-blocks) the mode falls back to what ``auto`` would pick else.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels import _cpu
from kernels._cpu.quant import ONE, PROMPT_SEL, PROMPT_TWO, SEL, TWO
from kernels.backends import LayerBackend, LayerShape, Packing
from kernels.choice import MatmulMode
from kernels.dispatch import use_native
from kernels.linear import (
    Pack,
    RowSplitQuant,
    bf16_matmul_supported,
    pack_linear_weight,
    pack_quant_weight,
    quant_supported,
)

GgufBlocks = tuple[int, torch.Tensor]  # a weight's GGML type and raw GGUF rows


@dataclass(frozen=True, slots=True)
class LayerParams:
    """One decoder layer's final weights: the projections ``(qkv, o, gate_up, down)``, each
    ``[out, in]``, with their GGUF blocks where kept (GGML type, raw rows; else None), the QKV
    bias and the two norms; ``plain``: the layer is Llama's (no q/k norms, no norms around
    attention and MLP, SwiGLU, no window or soft-cap), the one the one-call C layer runs."""

    projections: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
    blocks: tuple[GgufBlocks | None, ...]
    qkv_bias: torch.Tensor | None
    norms: tuple[torch.Tensor, torch.Tensor]
    plain: bool = True


def pack_model(layers: list[LayerParams], head: torch.Tensor, head_blocks: GgufBlocks | None,
               shape: LayerShape, mode: MatmulMode = MatmulMode.OWN,
               native_gemm: bool = False) -> Packing:
    """A :class:`Packing` of ``layers`` and the LM ``head`` ``[V, D]`` for ``mode`` (module
    doc; ``AUTO`` is two packings, each side packed on its own); where nothing packs here
    (CUDA, ``LASER_KERNELS=reference``...) its packs are None and the ops multiply the plain
    weights."""
    if mode is MatmulMode.AUTO:
        raise ValueError("MatmulMode.AUTO keeps two packings: pack QUANT and BF16 in turn")
    if mode.quantized:
        blocks_fit = all(w.shape[1] % 32 == 0 for w in layers[0].projections)
        if quant_supported() and use_native(head) and blocks_fit:
            return _pack_quant(layers, head, head_blocks, shape, mode is MatmulMode.QUANT)
        mode = MatmulMode.BF16 if bf16_matmul_supported() else MatmulMode.OWN
    matmul_dtype = torch.bfloat16 if mode is MatmulMode.BF16 else None
    mixed = matmul_dtype is not None
    backends = []
    for layer in layers:
        weights = layer.projections
        packs = tuple(pack_linear_weight(w, matmul_dtype, native_gemm) for w in weights)
        exact = mixed and packs[0] is not None and packs[0].dtype != weights[0].dtype
        bf16 = [p for p in packs if isinstance(p, _cpu.PackedBF16)]
        ours = len(bf16) == len(packs)
        prompt: tuple[Pack, ...] | None
        if exact and ours:
            # Laser's matmul: the same bfloat16 weights, float32 activations split in two
            prompt = tuple(p.split_view() for p in bf16)
        else:
            prompt = tuple(pack_linear_weight(w) for w in weights) if exact else None
        backends.append(LayerBackend(packs, prompt,
                                     ours and layer.qkv_bias is None and layer.plain,
                                     layer.norms, shape))
    screen = (pack_linear_weight(head, matmul_dtype, native_gemm)
              if mixed and matmul_dtype != head.dtype else None)
    return Packing(backends, pack_linear_weight(head), screen)


# ``QUANT``'s decode steps: how each projection (qkv, o, gate_up, down) quantises its
# activations (``quant.split``). qkv, o and gate_up keep the second part only in each row's
# outlier blocks (``SEL``), down keeps both. Two parts everywhere made gate_up (half a layer's
# multiply-adds) the largest cost at 16 and 64 streams; in one part its rounding was most of
# quant's error, and mostly in a few blocks (the top 2 of 18 by scale held 37-75 % of a
# layer's): SEL there cut the decode logits' KL divergence from float32 by 57 %. SEL on qkv
# and o makes a decode step faster; on down too, but down's rounding doubled the KL divergence
# (0.00068 -> 0.00147 against 0.00101 without it, bench/perplexity.py --decode --kl) and moved
# the perplexity most (docs/engine.md).
QUANT_DECODE_SPLIT = (SEL, SEL, SEL, TWO)


# Steps with a prompt chunk longer than ``kernels.layer_ops.NATIVE_CHUNK_ROWS`` (a long prompt's
# prefill, run op by op) quantise the prompt rows' activations in one int8 part, as llama.cpp
# does, the step's decode rows as a decode step (``RowSplitQuant``): in two parts a 2,000-token
# prefill's matmuls took 2.2x the CPU time (bench/model_forward.py), for a prefill perplexity
# within 1 % of llama.cpp's either way (docs/benchmarks.md). Shorter chunks (the one-call C
# layer) keep two parts. False: every prompt step keeps two parts.
LONG_PROMPT_ONE_PART = True


def _pack_quant(layers: list[LayerParams], head: torch.Tensor, head_blocks: GgufBlocks | None,
                shape: LayerShape, split_decode: bool) -> Packing:
    backends = []
    for layer in layers:
        packs = tuple(pack_quant_weight(w, b) for w, b in zip(layer.projections, layer.blocks))
        decode = tuple(p.split_view(kind) if kind else p
                       for p, kind in zip(packs, QUANT_DECODE_SPLIT, strict=True)) \
            if split_decode else packs
        # prompt rows in two parts; decode rows beside them as in a decode step (the C layer)
        prompt = tuple(p.split_view({ONE: PROMPT_TWO, SEL: PROMPT_SEL}.get(p.split, TWO))
                       for p in decode)
        backend = LayerBackend(decode, prompt, layer.qkv_bias is None and layer.plain,
                               layer.norms, shape)
        if LONG_PROMPT_ONE_PART:
            backend.long_prompt = tuple(p if p.split == ONE else
                                        RowSplitQuant(p, p.split_view(ONE)) for p in decode)
        backends.append(backend)
    return Packing(backends, pack_linear_weight(head), pack_quant_weight(head, head_blocks),
                   quantized=True)
