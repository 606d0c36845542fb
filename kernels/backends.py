"""Layer backends: how a decoder reaches its kernels, chosen once when its weights are packed.

The model describes the architecture once (norm -> attention -> add & norm -> SwiGLU MLP) and
asks, each step, its layer's :class:`LayerBackend` for the op set to run it on
(``kernels.layer_ops``), or for the whole layer as one C call where the backend can
(:meth:`LayerBackend.decoder_layer`); :class:`Packing` holds every layer's backend, runs the
whole stack as one C call where every layer can (:meth:`Packing.decoder_stack`) and scores the
vocabulary (:meth:`Packing.logits`). ``kernels.packing.pack_model`` builds a :class:`Packing`
for a matmul mode; :func:`unpacked` is the one before any packing (plain weights).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernels import _cpu
from kernels.dispatch import use_native
from kernels.layer_ops import NATIVE_CHUNK_ROWS, CpuOps, TorchOps
from kernels.linear import linear
from kernels.rms_norm import rms_norm

SCREEN_TOP = 64  # logits recomputed exactly after a bfloat16 screening of the vocabulary
NO_PACKS = (None, None, None, None)


@dataclass(frozen=True, slots=True)
class LayerShape:
    """What the one-call C layer needs of the architecture: heads (H, KVH, D), the RMSNorm
    epsilon and the attention scale."""

    heads: tuple[int, int, int]
    eps: float
    scale: float


def on_c_kernels(hidden: torch.Tensor, kv_cache: tuple[torch.Tensor, torch.Tensor],
                 norm: torch.Tensor, meta) -> bool:
    """Whether this step runs on the C kernels (float32 model, float32 or float16 cache, on a
    CPU where they build): ``meta.native``, the runner's ``KernelTable.native``, else
    ``use_native`` asked once a step."""
    if kv_cache[0].dtype not in _cpu.KV_DTYPES or norm.dtype != torch.float32:
        return False
    if meta.native is None:
        meta.native = use_native(hidden)
    return meta.native


class LayerBackend:
    """A layer's packed projections ``(qkv, o, gate_up, down)``: ``decode`` for decode steps,
    ``prompt`` (or the same) for steps with prompt tokens. ``one_call`` (every projection on
    Laser's own matmul, no QKV bias) lets a step run the whole layer as one C call; ``norms``
    and ``shape`` are then what that call reads besides the packs. ``long_prompt`` (None: as
    ``prompt``) serves steps whose prompt chunk is too long for the one-call layer
    (``kernels.packing.LONG_PROMPT_ONE_PART``)."""

    __slots__ = ("decode", "prompt", "long_prompt", "one_call", "native", "norms", "shape")

    def __init__(self, decode: tuple = NO_PACKS, prompt: tuple | None = None,
                 one_call: bool = False, norms: tuple[torch.Tensor, torch.Tensor] | None = None,
                 shape: LayerShape | None = None) -> None:
        self.decode, self.prompt = decode, prompt
        self.long_prompt: tuple | None = None
        self.norms, self.shape = norms, shape
        self.native: tuple[_cpu.LayerWeights, _cpu.LayerWeights] | None = None
        self.set_one_call(one_call)

    def set_one_call(self, one_call: bool) -> None:
        """Allow (or, for tests, forbid) the one-call layer: prepares its packs once."""
        self.one_call = one_call
        self.native = ((_cpu.LayerWeights(self.decode),
                        _cpu.LayerWeights(self.prompt or self.decode)) if one_call else None)

    def packs(self, meta) -> tuple:
        """The packed weights for this step: (qkv, o, gate_up, down)."""
        if meta.is_decode_only:
            return self.decode
        if self.long_prompt is not None and meta.max_query_len > NATIVE_CHUNK_ROWS:
            return self.long_prompt
        return self.decode if self.prompt is None else self.prompt

    def ops(self, hidden: torch.Tensor, kv_cache: tuple[torch.Tensor, torch.Tensor],
            norm: torch.Tensor, meta) -> TorchOps:
        """The op set for this step (``norm``: the layer's first norm weight, its dtype the
        model's)."""
        packs = self.packs(meta)
        one_rows = 0 if meta.is_decode_only else meta.single_rows
        if not on_c_kernels(hidden, kv_cache, norm, meta):
            return TorchOps(packs, one_rows)
        down = packs[3]
        act = torch.bfloat16 if down is not None and down.dtype == torch.bfloat16 \
            else torch.float32
        return CpuOps(packs, act, one_rows)

    def runs_whole(self, hidden: torch.Tensor, kv_cache: tuple[torch.Tensor, torch.Tensor],
                   meta) -> bool:
        """Whether this step can run the layer as one C call."""
        return (self.one_call and self.norms is not None
                and meta.max_query_len <= NATIVE_CHUNK_ROWS
                and on_c_kernels(hidden, kv_cache, self.norms[0], meta))

    def decoder_layer(self, positions: torch.Tensor, hidden: torch.Tensor,
                      residual: torch.Tensor | None, cos_sin: torch.Tensor,
                      kv_cache: tuple[torch.Tensor, torch.Tensor], meta
                      ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The whole layer as one C call (``_cpu.decoder_layer``), or None where this step
        cannot (then run it op by op)."""
        native, norms, shape = self.native, self.norms, self.shape
        if native is None or norms is None or shape is None or \
                not self.runs_whole(hidden, kv_cache, meta):
            return None
        first = residual is None
        residual = hidden if residual is None else residual
        out = _cpu.decoder_layer(hidden, residual, first, norms, shape.eps,
                                 native[not meta.is_decode_only], shape.heads, positions,
                                 cos_sin, kv_cache, meta, shape.scale)
        return out, residual


class Packing:
    """Every layer's backend and the LM head's packs of one packing: the model switches
    between two kept side by side (the runner's ``auto``) by swapping this object.

    ``head_packed`` is the head in its own dtype (or None: ``F.linear``); ``head_screen`` a
    cheaper copy that screens the vocabulary (bfloat16 or quantized), whose ``SCREEN_TOP``
    best logits per row are rescored exactly; ``quantized`` screens in steps with prompt
    tokens too (``kernels.packing``). ``native``: whether the C kernels serve this load's CPU
    tensors (the head's rescoring, the final norm), set once by whoever holds the load (the
    runner, from its ``KernelTable``); None asks ``use_native`` at each call (a model driven
    without a runner, as the kernels' tests do while they switch backends)."""

    def __init__(self, layers: list[LayerBackend], head_packed=None, head_screen=None,
                 quantized: bool = False) -> None:
        self.layers = layers
        self.head_packed, self.head_screen, self.quantized = head_packed, head_screen, quantized
        self.native: bool | None = None
        self._stacks: dict[tuple[bool, int], _cpu.StackWeights] = {}

    def on_c_kernels(self, hidden: torch.Tensor) -> bool:
        """Whether the C kernels serve ``hidden`` (``native``, else ``use_native``)."""
        return use_native(hidden) if self.native is None else self.native

    def decoder_stack(self, positions: torch.Tensor, hidden: torch.Tensor,
                      residual: torch.Tensor | None, cos_sin: torch.Tensor,
                      kv_caches: list, meta, start: int, stop: Callable[[], bool] | None,
                      min_layers: int) -> tuple[torch.Tensor, torch.Tensor | None, int] | None:
        """Layers ``start ..`` as one C call (``_cpu.decoder_stack``), stopping early where
        ``stop()`` (asked before each layer from the ``min_layers``-th on) is true; returns
        ``(hidden, residual, layers run)``, or None where a layer would not run as one call."""
        stack, shape = self._stack(hidden, kv_caches, meta), self.layers[0].shape
        if stack is None or shape is None:
            return None
        first = residual is None
        if residual is None:
            residual = hidden
            out = torch.empty(hidden.shape, dtype=stack.act)
        elif hidden.dtype == stack.act and hidden.is_contiguous():
            out = hidden  # a layer reads its x before it writes: in place
        else:
            out = torch.empty(hidden.shape, dtype=stack.act)
        ran = _cpu.decoder_stack(hidden.contiguous(), residual, first, stack, start, shape.eps,
                                 shape.heads, positions, cos_sin, meta, shape.scale, out, stop,
                                 min_layers)
        if not ran:
            return hidden, None if first else residual, 0
        return out, residual, ran

    def _stack(self, hidden: torch.Tensor, kv_caches: list, meta) -> _cpu.StackWeights | None:
        layers = self.layers
        if not layers[0].runs_whole(hidden, kv_caches[0], meta) or \
                not all(layer.one_call for layer in layers):
            return None
        variant = not meta.is_decode_only
        key = (variant, id(kv_caches))
        stack = self._stacks.get(key)
        if stack is None:
            if len(self._stacks) > 8:
                self._stacks.clear()
            # every layer runs as one call: each has its native weights and norms
            stack = _cpu.StackWeights(
                [n[variant] for layer in layers if (n := layer.native) is not None],
                [m for layer in layers if (m := layer.norms) is not None], kv_caches)
            self._stacks[key] = stack
        return stack

    def logits(self, hidden: torch.Tensor, weight: torch.Tensor, exact: bool = False,
               allowed: torch.Tensor | None = None) -> torch.Tensor:
        """``hidden`` ``[N, D]`` times the head ``weight`` ``[V, D]``: ``[N, V]``. ``exact``
        (a step with prompt tokens) scores with the head's own dtype unless ``quantized``.

        With a screening head the whole vocabulary is scored on it, then the ``SCREEN_TOP``
        best of each row again exactly: the greedy choice and the logits that carry the
        probability mass are exact, the far tail is off by the screen's rounding.
        ``allowed`` (``[N, V]`` bool, a grammar's mask) is applied before the screen, so the
        rescored tokens are the best allowed ones, and again after (a row with fewer than
        ``SCREEN_TOP`` allowed tokens had forbidden ones rescored)."""
        if self.head_screen is None or (exact and not self.quantized):
            return _forbid(linear(hidden, weight, self.head_packed), allowed)
        logits = _forbid(linear(hidden, weight, self.head_screen), allowed)  # [N, vocab]
        k = min(SCREEN_TOP, logits.shape[-1])
        if self.on_c_kernels(hidden) and _cpu.rescore_top(logits, hidden.contiguous(), weight, k):
            return _forbid(logits, allowed)  # the same pass in C: no gather, no topk
        top = logits.topk(k, dim=-1).indices  # [N, K]
        rescored = torch.einsum("nd,nkd->nk", hidden, weight[top])
        return _forbid(logits.scatter_(1, top, rescored), allowed)


def _forbid(logits: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
    """-inf where ``allowed`` is False (in place); ``logits`` as is without a mask."""
    if allowed is None:
        return logits
    return logits.masked_fill_(~allowed, float("-inf"))


def unpacked(num_layers: int) -> Packing:
    """The packing before any: plain weights, ``F.linear``, no one-call layer."""
    return Packing([LayerBackend() for _ in range(num_layers)])


def final_norm(hidden: torch.Tensor, weight: torch.Tensor, eps: float,
               residual: torch.Tensor | None, native: bool | None = None) -> torch.Tensor:
    """The last residual add and RMSNorm, after the last layer: on the C kernels where the
    residual stream is float32 and they serve ``hidden`` (``native``, the load's
    ``Packing.native``; None: ``use_native``)."""
    if residual is not None and residual.dtype == torch.float32 and \
            weight.dtype == torch.float32 and \
            (use_native(hidden) if native is None else native):
        return _cpu.add_rms_norm(hidden.contiguous(), weight, eps, residual, torch.float32)
    if residual is None:
        return rms_norm(hidden, weight, eps)
    return rms_norm(hidden, weight, eps, residual)[0]
