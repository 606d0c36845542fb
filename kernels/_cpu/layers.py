"""The C decoder layer and the whole decoder stack in one call (``laser_decoder_layer``,
``laser_decoder_stack``): their weights, prepared once, and the per-step checks."""

from __future__ import annotations

import ctypes

import torch

from . import _ACTS, DTYPES, _check, _check_all, _check_kv, _gemm_threads, loaded


class LayerWeights:
    """The four packed projections of a layer (qkv, o, gate_up, down) as
    ``laser_decoder_layer`` takes them, prepared once: all :class:`PackedBF16` (plain:
    bfloat16 activations in decode steps; ``split``: float32 ones in steps with prompt tokens)
    or all ``quant.PackedQuant`` (float32 activations, each pack with its own ``split``)."""

    __slots__ = ("packs", "act", "pointers", "formats", "intermediate")

    def __init__(self, packs: tuple) -> None:
        self.packs = packs  # keeps the data alive
        self.act = packs[0].dtype
        self.pointers = (ctypes.c_void_p * 4)(*(p.data.data_ptr() for p in packs))
        self.formats = (ctypes.c_int32 * 4)(*(p.fmt + 256 * p.split if hasattr(p, "fmt") else 0
                                              for p in packs))
        self.intermediate = packs[3].in_features


def _step_args(positions: torch.Tensor, cos_sin: torch.Tensor, meta) -> tuple:
    """What ``laser_decoder_layer`` takes from the step, checked once per step."""
    if meta.native_args is None or meta.native_args[0] is not positions:
        _check(cos_sin, "cos_sin", torch.float32)
        _check_all(torch.int64, positions=positions, slot_mapping=meta.slot_mapping)
        _check_all(torch.int32, block_tables=meta.block_tables, seq_lens=meta.seq_lens,
                   query_start_loc=meta.query_start_loc)
        qsl = None if meta.is_decode_only else meta.query_start_loc.data_ptr()
        meta.native_args = (positions, positions.data_ptr(), cos_sin.data_ptr(),
                            meta.slot_mapping.data_ptr(), meta.block_tables.data_ptr(),
                            meta.block_tables.shape[1], meta.seq_lens.data_ptr(), qsl,
                            meta.num_seqs, meta.single_rows)
    return meta.native_args


def decoder_layer(x: torch.Tensor, residual: torch.Tensor, first: bool,
                  norms: tuple[torch.Tensor, torch.Tensor], eps: float,
                  weights: LayerWeights, heads: tuple[int, int, int],
                  positions: torch.Tensor, cos_sin: torch.Tensor,
                  kv_cache: tuple[torch.Tensor, torch.Tensor], meta,
                  scale: float) -> torch.Tensor:
    """A whole Llama layer (``laser_decoder_layer``): ``DecoderLayer.forward`` over
    ``kernels.layer_ops.CpuOps`` and Laser's matmuls in one call; ``heads`` is (H, KVH, D).
    ``residual`` (float32) is updated in place; the first layer passes ``x`` itself. Returns
    the down projection's product, the next layer's ``x``.

    The weights and norms are the model's own (float32, packed once); the tensors that change
    from step to step are checked here, the step's metadata once a step (``_step_args``)."""
    act = weights.act
    _check(x, "x", *_ACTS)
    _check(residual, "residual", torch.float32)
    kv_dtype = _check_kv(*kv_cache)
    _, pos, cs, slots, tables, stride, lens, qsl, num_seqs, single = _step_args(
        positions, cos_sin, meta)
    num_tokens, hidden = x.shape
    num_heads, num_kv_heads, head_dim = heads
    k_cache, v_cache = kv_cache
    out = torch.empty((num_tokens, hidden), dtype=act)
    loaded().laser_decoder_layer(
        x.data_ptr(), DTYPES[x.dtype], residual.data_ptr(), int(first), norms[0].data_ptr(),
        norms[1].data_ptr(), eps, weights.pointers, weights.formats, DTYPES[act], num_tokens,
        hidden, num_heads, num_kv_heads, head_dim, weights.intermediate, pos, cs,
        k_cache.data_ptr(), v_cache.data_ptr(), kv_dtype, slots, k_cache.shape[1], tables,
        stride, lens, qsl, num_seqs, single, scale, out.data_ptr(), _gemm_threads(num_tokens))
    return out


STOP_FN = ctypes.CFUNCTYPE(ctypes.c_int)


class StackWeights:
    """Every layer's :class:`LayerWeights`, norms and KV caches as ``laser_decoder_stack``
    takes them (one pointer table for the whole model), prepared once per packing and cache.
    All layers share one activation dtype and intermediate size."""

    __slots__ = ("keep", "act", "pointers", "formats", "intermediate", "num_layers", "kv_dtype")

    def __init__(self, weights: list[LayerWeights],
                 norms: list[tuple[torch.Tensor, torch.Tensor]],
                 caches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        if len({(w.act, w.intermediate) for w in weights}) != 1:
            raise ValueError("layers differ in activation dtype or intermediate size")
        for n in norms:
            _check_all(torch.float32, input_norm=n[0], post_norm=n[1])
        kv_dtypes = {_check_kv(*c) for c in caches}
        if len(kv_dtypes) != 1:
            raise ValueError("layers' caches differ in dtype")
        self.kv_dtype = kv_dtypes.pop()
        self.keep = (weights, norms, caches)
        self.act, self.intermediate = weights[0].act, weights[0].intermediate
        self.num_layers = len(weights)
        ptrs = []
        for w, n, c in zip(weights, norms, caches, strict=True):
            ptrs += [*w.pointers, n[0].data_ptr(), n[1].data_ptr(), c[0].data_ptr(),
                     c[1].data_ptr()]
        self.pointers = (ctypes.c_void_p * len(ptrs))(*ptrs)
        self.formats = (ctypes.c_int32 * (4 * len(weights)))(*(f for w in weights
                                                              for f in w.formats))


def decoder_stack(x: torch.Tensor, residual: torch.Tensor, first: bool, stack: StackWeights,
                  start: int, eps: float, heads: tuple[int, int, int], positions: torch.Tensor,
                  cos_sin: torch.Tensor, meta, scale: float, out: torch.Tensor,
                  stop=None, min_layers: int = 0) -> int:
    """Layers ``start ..`` of ``stack`` in one call (``laser_decoder_stack``): each as
    :func:`decoder_layer`, the first reading ``x``, the rest ``out`` in place (``out`` may
    be ``x`` unless ``first``: then ``x`` is the residual). ``stop()``, asked before each
    layer from the ``min_layers``-th on, ends it early when true. Returns the layers run."""
    act = stack.act
    _check(x, "x", *_ACTS)
    _check(out, "out", act)
    _check(residual, "residual", torch.float32)
    num_tokens, hidden = x.shape
    if residual.shape != x.shape or out.shape != x.shape or (first and out.data_ptr() ==
                                                              x.data_ptr()):
        raise ValueError("decoder_stack: x, residual and out must be [T, hidden], out not x "
                         "on the first layer")
    _, pos, cs, slots, tables, stride, lens, qsl, num_seqs, single = _step_args(
        positions, cos_sin, meta)
    num_heads, num_kv_heads, head_dim = heads
    layers = ctypes.cast(ctypes.byref(stack.pointers, 8 * start * ctypes.sizeof(ctypes.c_void_p)),
                         ctypes.c_void_p)
    formats = ctypes.cast(ctypes.byref(stack.formats, 4 * start * 4), ctypes.c_void_p)
    callback = STOP_FN(lambda: int(bool(stop()))) if stop is not None else None
    block_size = stack.keep[2][0][0].shape[1]
    return loaded().laser_decoder_stack(
        stack.num_layers - start, min_layers, callback, x.data_ptr(), DTYPES[x.dtype],
        residual.data_ptr(), int(first), layers, formats, eps, DTYPES[act], num_tokens, hidden,
        num_heads, num_kv_heads, head_dim, stack.intermediate, pos, cs, stack.kv_dtype, slots,
        block_size, tables, stride, lens, qsl, num_seqs, single, scale, out.data_ptr(),
        _gemm_threads(num_tokens))
