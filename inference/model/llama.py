"""Llama-family decoder (SmolLM2, Llama 2/3, Mistral) over a flat batch of tokens."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import kernels
from kernels import _cpu

from .attention import NATIVE_CHUNK_ROWS, Attention
from .config import ModelConfig
from .metadata import AttentionMetadata

SCREEN_TOP = 64  # logits recomputed exactly after a bfloat16 screening of the vocabulary


def _param(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape), requires_grad=False)


class DecoderLayer(nn.Module):
    """Pre-norm block: RMSNorm -> attention -> add&RMSNorm -> SwiGLU MLP.

    The residual add is fused into the next norm (`kernels.rms_norm(x, w, eps, residual)`), so a
    layer returns `(hidden, residual)` and the caller adds the last residual in `norm_out`.

    On a CPU with the C kernels (`kernels.use_native`) and float32 activations and cache, the
    work between the matmuls runs as four C calls instead (`_native_act`): the same math, the
    residual stream updated in place, and with bfloat16-packed weights (mixed precision) the
    activations handed from one matmul to the next in bfloat16. With every projection on
    Laser's own matmul (`one_call`, set by `LlamaModel.pack_linears`) the whole layer is one C
    call (`_cpu.decoder_layer`) for steps whose chunks the C attention takes.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.eps = config.rms_norm_eps
        self.input_norm = _param(config.hidden_size)
        self.attn = Attention(config)
        self.post_attn_norm = _param(config.hidden_size)
        self.gate_up_weight = _param(2 * config.intermediate_size, config.hidden_size)
        self.down_weight = _param(config.hidden_size, config.intermediate_size)
        self.cos_sin_cache: torch.Tensor | None = None  # shared with the model, set by it
        self.gate_up_packed: torch.Tensor | None = None  # see LlamaModel.pack_linears
        self.down_packed: torch.Tensor | None = None
        # mixed precision: the packs (qkv, o, gate_up, down) for steps with prompt tokens:
        # float32 ones, or split views of Laser's bfloat16 ones
        self.exact_packs: tuple[torch.Tensor | None, ...] | None = None
        self.one_call = False  # every projection on Laser's matmul, no QKV bias
        # with one_call: the packs prepared for the C layer, for decode steps and the others
        self.native_weights: tuple[_cpu.LayerWeights, _cpu.LayerWeights] | None = None

    def set_native_weights(self) -> None:
        """Prepare the packs for the one-call layer (after packing; ``one_call`` set)."""
        self.native_weights = None
        if self.one_call:
            decode = (self.attn.qkv_packed, self.attn.o_packed, self.gate_up_packed,
                      self.down_packed)
            self.native_weights = (_cpu.LayerWeights(decode),
                                   _cpu.LayerWeights(self.exact_packs or decode))

    def packs(self, meta: AttentionMetadata) -> tuple[torch.Tensor | None, ...]:
        """The packed weights for this step: (qkv, o, gate_up, down). Under mixed precision a
        step with prompt tokens uses the float32 ones (``LlamaModel.pack_linears``)."""
        if self.exact_packs is not None and not meta.is_decode_only:
            return self.exact_packs
        return (self.attn.qkv_packed, self.attn.o_packed, self.gate_up_packed, self.down_packed)

    def forward(self, positions: torch.Tensor, hidden: torch.Tensor,
                residual: torch.Tensor | None, kv_cache: tuple[torch.Tensor, torch.Tensor],
                meta: AttentionMetadata) -> tuple[torch.Tensor, torch.Tensor]:
        """Args: `hidden`/`residual` `[T, hidden]` (residual None at the first layer)."""
        if self.one_call and meta.max_query_len <= NATIVE_CHUNK_ROWS and \
                self._native(hidden, kv_cache, meta):
            first = residual is None
            residual = hidden if first else residual
            attn = self.attn
            out = _cpu.decoder_layer(
                hidden, residual, first, (self.input_norm, self.post_attn_norm), self.eps,
                self.native_weights[not meta.is_decode_only],
                (attn.num_heads, attn.num_kv_heads, attn.head_dim), positions,
                self.cos_sin_cache, kv_cache, meta, attn.scale)
            return out, residual
        qkv, o, gate_up, down = self.packs(meta)
        act = self._native_act(hidden, kv_cache, down, meta)
        raw = act is not None
        hidden, residual = self._add_norm(hidden, self.input_norm, residual, act)
        hidden = self.attn(positions, hidden, self.cos_sin_cache, kv_cache, meta, (qkv, o), act)
        hidden, residual = self._add_norm(hidden, self.post_attn_norm, residual, act)
        hidden = kernels.linear(hidden, self.gate_up_weight, gate_up, raw=raw)
        hidden = _cpu.silu_and_mul(hidden, act) if raw else kernels.silu_and_mul(hidden)
        return kernels.linear(hidden, self.down_weight, down, raw=raw), residual

    def _native(self, hidden: torch.Tensor, kv_cache: tuple[torch.Tensor, torch.Tensor],
                meta: AttentionMetadata) -> bool:
        """Whether this step runs on the C kernels (float32 model and cache on a CPU where they
        build); ``kernels.use_native`` is asked once a step (``meta.native``)."""
        if kv_cache[0].dtype != torch.float32 or self.input_norm.dtype != torch.float32:
            return False
        if meta.native is None:
            meta.native = kernels.use_native(hidden)
        return meta.native

    def _native_act(self, hidden: torch.Tensor, kv_cache: tuple[torch.Tensor, torch.Tensor],
                    down: torch.Tensor | None, meta: AttentionMetadata) -> torch.dtype | None:
        """None for the PyTorch/Triton ops; on the C kernels, the dtype activations travel in
        between matmuls: bfloat16 under bfloat16-packed weights (what the matmul rounds them
        to anyway), else float32."""
        if not self._native(hidden, kv_cache, meta):
            return None
        return torch.bfloat16 if down is not None and down.dtype == torch.bfloat16 \
            else torch.float32

    def _add_norm(self, x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None,
                  act: torch.dtype | None) -> tuple[torch.Tensor, torch.Tensor]:
        """`(norm(x + residual), x + residual)`; the first layer's `x` is its own residual.
        The C kernel writes the sum into `residual` in place."""
        if act is None:
            if residual is None:
                return kernels.rms_norm(x, weight, self.eps), x
            return kernels.rms_norm(x, weight, self.eps, residual)
        out = _cpu.add_rms_norm(x, weight, self.eps, residual, act)
        return out, x if residual is None else residual


class LlamaModel(nn.Module):
    """The decoder plus embeddings and LM head.

    `forward` runs every layer; the runner may instead call `embed`, iterate `layers` and finish
    with `norm_out` to pause between layers. Weights are plain parameters in the fused layout
    (see `inference.loaders.weights`); build on the meta device and load with `assign=True`.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = _param(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
        self.norm = _param(config.hidden_size)
        self.lm_head = None if config.tie_word_embeddings else _param(config.vocab_size,
                                                                      config.hidden_size)
        self.cos_sin_cache: torch.Tensor | None = None
        self.lm_head_packed: torch.Tensor | None = None
        self.lm_head_screen: torch.Tensor | None = None  # bfloat16 head, see compute_logits
        self.quantized = False  # pack_linears(kernels.QUANT) took: see _pack_quant
        # state-dict name -> (GGML type, raw GGUF rows): set by the loader for a GGUF on CPU
        self.quant_blocks: dict[str, tuple[int, torch.Tensor]] = {}
        # (variant, pack state, caches) -> _cpu.StackWeights for run_layers' one-call stack
        self._stacks: dict[tuple[bool, int, int], _cpu.StackWeights] = {}

    def pack_linears(self, matmul_dtype: torch.dtype | str | None = None,
                     native_gemm: bool = False) -> bool:
        """Keep a packed copy of every projection and the LM head for ``kernels.linear``
        (CPU oneDNN; a no-op elsewhere). Call once the weights are final; True if packed.

        ``matmul_dtype`` (bfloat16 for a float32 model) packs the layers' projections in that
        dtype for decode steps: mixed precision, see ``kernels.linear``. Steps with prompt
        tokens keep float32 packs (``DecoderLayer.packs``) and the exact LM head: with the
        prompt's KV cache exact, the bfloat16 decode steps gave the float32 greedy answers to
        all eight prompts of ``bench/cpu_precision.py`` where bfloat16 prefills changed four
        of them (docs/benchmarks.md). The LM head keeps its own dtype for the largest logits;
        a bfloat16 copy only screens the vocabulary in decode steps (``compute_logits``).

        ``native_gemm`` packs the bfloat16 copies for Laser's own matmul
        (``kernels.pack_linear_weight(..., native=True)``) where it builds: the runner asks for
        it when decode steps run on one thread. Steps with prompt tokens then multiply the same
        bfloat16 weights with their float32 activations split in two bfloat16 parts (only the
        weights rounded; ``_cpu.PackedBF16.split_view``) instead of a float32 copy: no second
        copy of the projections, and faster than float32 oneDNN.
        """
        self._stacks.clear()
        if matmul_dtype in kernels.QUANT_MODES:
            cfg = self.config
            blocks_fit = all(k % 32 == 0 for k in (cfg.hidden_size, cfg.intermediate_size,
                                                   cfg.num_heads * cfg.head_dim))
            if kernels.quant_supported() and kernels.use_native(self.embed_tokens) and \
                    blocks_fit:
                return self._pack_quant(split_decode=matmul_dtype == kernels.QUANT)
            # no quantized matmul here (no C compiler, no AVX2, rows not in 32-blocks): what
            # ``auto`` would pick else
            matmul_dtype = torch.bfloat16 if kernels.bf16_matmul_supported() else None
        mixed = matmul_dtype is not None
        self.quantized = False
        for layer in self.layers:
            attn = layer.attn
            weights = (attn.qkv_weight, attn.o_weight, layer.gate_up_weight, layer.down_weight)
            packs = tuple(kernels.pack_linear_weight(w, matmul_dtype, native_gemm)
                          for w in weights)
            attn.qkv_packed, attn.o_packed, layer.gate_up_packed, layer.down_packed = packs
            exact = mixed and packs[0] is not None and packs[0].dtype != attn.qkv_weight.dtype
            ours = all(isinstance(p, _cpu.PackedBF16) for p in packs)
            layer.one_call = ours and attn.qkv_bias is None
            if exact and ours:
                # Laser's matmul: the same bfloat16 weights, float32 activations split in two
                layer.exact_packs = tuple(p.split_view() for p in packs)
            else:
                layer.exact_packs = (tuple(kernels.pack_linear_weight(w) for w in weights)
                                     if exact else None)
            layer.set_native_weights()
        head = self.embed_tokens if self.lm_head is None else self.lm_head
        self.lm_head_packed = kernels.pack_linear_weight(head)
        self.lm_head_screen = (kernels.pack_linear_weight(head, matmul_dtype, native_gemm)
                               if mixed and matmul_dtype != head.dtype else None)
        return self.lm_head_packed is not None

    def _pack_quant(self, split_decode: bool) -> bool:
        """``pack_linears(kernels.QUANT or Q8)``: every projection and the LM head screen on
        the quantized matmul, from the GGUF's own blocks (``quant_blocks``; a weight without
        them is quantised to Q8_0). Steps with prompt tokens quantise their activations in two
        parts (``PackedQuant.split_view``), decode steps too with ``split_decode`` (QUANT):
        with one part, 4 of bench/cpu_precision.py's 8 answers left float32's, with two none
        did. The head screens every step, prompts included: its ``SCREEN_TOP`` best logits
        are rescored in float32 on the dequantised weights, so the greedy choice is exact
        there too, and no step reads the 113 MB float32 head."""
        for i, layer in enumerate(self.layers):
            attn = layer.attn
            names = ("attn.qkv_weight", "attn.o_weight", "gate_up_weight", "down_weight")
            weights = (attn.qkv_weight, attn.o_weight, layer.gate_up_weight, layer.down_weight)
            packs = tuple(kernels.pack_quant_weight(w, self.quant_blocks.get(f"layers.{i}.{n}"))
                          for n, w in zip(names, weights))
            split = tuple(p.split_view() for p in packs)
            decode = split if split_decode else packs
            attn.qkv_packed, attn.o_packed, layer.gate_up_packed, layer.down_packed = decode
            layer.exact_packs = split
            layer.one_call = attn.qkv_bias is None
            layer.set_native_weights()
        name = "embed_tokens" if self.lm_head is None else "lm_head"
        head = self.embed_tokens if self.lm_head is None else self.lm_head
        self.lm_head_packed = kernels.pack_linear_weight(head)
        self.lm_head_screen = kernels.pack_quant_weight(head, self.quant_blocks.get(name))
        self.quantized = True
        return True

    def pack_state(self) -> tuple:
        """What ``pack_linears`` set, less the float32 LM head every mode packs alike: hand it
        to ``set_pack_state`` to switch between two packings kept side by side (the runner's
        ``auto``: the quantized blocks for small steps, bfloat16 packs for batches)."""
        layers = tuple((layer.attn.qkv_packed, layer.attn.o_packed, layer.gate_up_packed,
                        layer.down_packed, layer.exact_packs, layer.one_call,
                        layer.native_weights) for layer in self.layers)
        return self.quantized, self.lm_head_screen, layers

    def set_pack_state(self, state: tuple) -> None:
        self.quantized, self.lm_head_screen, layers = state
        for layer, packs in zip(self.layers, layers, strict=True):
            (layer.attn.qkv_packed, layer.attn.o_packed, layer.gate_up_packed,
             layer.down_packed, layer.exact_packs, layer.one_call, layer.native_weights) = packs

    def init_rotary(self, device: torch.device | str | None = None) -> None:
        """(Re)build the rotary cache on `device`; call after the weights are in place."""
        device = device if device is not None else self.embed_tokens.device
        cfg = self.config
        # float32 even for bf16 models: positions far into the context need the precision.
        self.cos_sin_cache = kernels.build_cos_sin_cache(
            cfg.head_dim, cfg.max_position, cfg.rope_theta, device, torch.float32,
            scaling=cfg.rope_scaling)
        for layer in self.layers:
            layer.cos_sin_cache = self.cos_sin_cache

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """`[T]` int64 -> `[T, hidden]`."""
        return F.embedding(input_ids, self.embed_tokens)

    def norm_out(self, hidden: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
        """Final residual add + RMSNorm after the last layer."""
        if residual is not None and residual.dtype == torch.float32 and \
                self.norm.dtype == torch.float32 and kernels.use_native(hidden):
            return _cpu.add_rms_norm(hidden.contiguous(), self.norm, self.config.rms_norm_eps,
                                     residual, torch.float32)
        if residual is None:
            return kernels.rms_norm(hidden, self.norm, self.config.rms_norm_eps)
        return kernels.rms_norm(hidden, self.norm, self.config.rms_norm_eps, residual)[0]

    def compute_logits(self, hidden: torch.Tensor, exact: bool = False) -> torch.Tensor:
        """`[N, hidden]` -> `[N, vocab]`; pass only the rows that will be sampled. `exact`
        (a step with prompt tokens) scores with the model's own head, no screening.

        With a bfloat16 screening head (mixed precision) the whole vocabulary is scored in
        bfloat16 (half the bytes of the largest matrix), then the `SCREEN_TOP` best of each row
        are scored again exactly with the model's own head: the greedy choice and the logits
        that carry the probability mass are exact, the far tail is off by bfloat16 rounding.
        """
        weight = self.embed_tokens if self.lm_head is None else self.lm_head
        if self.lm_head_screen is None or (exact and not self.quantized):
            return kernels.linear(hidden, weight, self.lm_head_packed)
        logits = kernels.linear(hidden, weight, self.lm_head_screen)  # [N, vocab]
        k = min(SCREEN_TOP, logits.shape[-1])
        if kernels.use_native(hidden) and _cpu.rescore_top(logits, hidden.contiguous(),
                                                            weight, k):
            return logits  # the same pass in C: no [N, K, hidden] gather, no topk
        top = logits.topk(min(SCREEN_TOP, logits.shape[-1]), dim=-1).indices  # [N, K]
        exact = torch.einsum("nd,nkd->nk", hidden, weight[top])
        return logits.scatter_(1, top, exact)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
                meta: AttentionMetadata) -> torch.Tensor:
        """Run all layers over a flat batch.

        Args:
            input_ids: `[T]` int64 token ids, grouped by sequence as `meta` describes.
            positions: `[T]` int64 position of each token in its sequence.
            kv_caches: one `(k_cache, v_cache)` per layer, each
                `[num_blocks, block_size, num_kv_heads, head_dim]`.
        Returns:
            `[T, hidden]` final hidden states (feed chosen rows to `compute_logits`).
        """
        hidden, residual, _ = self.run_layers(positions, self.embed(input_ids), None, kv_caches,
                                              meta)
        return self.norm_out(hidden, residual)

    def run_layers(self, positions: torch.Tensor, hidden: torch.Tensor,
                   residual: torch.Tensor | None, kv_caches: list[tuple[torch.Tensor,
                                                                        torch.Tensor]],
                   meta: AttentionMetadata, start: int = 0, stop=None,
                   min_layers: int = 0) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """Layers ``start ..`` over ``hidden``/``residual`` (None before the first layer), as
        many as run before ``stop()`` (asked before each layer from the ``min_layers``-th
        on) is true; returns ``(hidden, residual, layers run)``. Where every layer is one C
        call (``DecoderLayer.one_call``) the whole run is one (``_cpu.decoder_stack``): no
        Python between the layers."""
        stack = self._stack(hidden, kv_caches, meta)
        if stack is None:
            ran = 0
            for i in range(start, len(self.layers)):
                if ran >= min_layers and stop is not None and stop():
                    break
                hidden, residual = self.layers[i](positions, hidden, residual, kv_caches[i],
                                                  meta)
                ran += 1
            return hidden, residual, ran
        first = residual is None
        if first:
            residual = hidden
            out = torch.empty(hidden.shape, dtype=stack.act)
        elif hidden.dtype == stack.act and hidden.is_contiguous():
            out = hidden  # a layer reads its x before it writes: in place
        else:
            out = torch.empty(hidden.shape, dtype=stack.act)
        attn, cfg = self.layers[0].attn, self.config
        ran = _cpu.decoder_stack(hidden.contiguous(), residual, first, stack, start,
                                 cfg.rms_norm_eps, (attn.num_heads, attn.num_kv_heads,
                                                    attn.head_dim), positions,
                                 self.cos_sin_cache, meta, attn.scale, out, stop, min_layers)
        if not ran:
            return hidden, None if first else residual, 0
        return out, residual, ran

    def _stack(self, hidden: torch.Tensor, kv_caches: list, meta: AttentionMetadata
               ) -> _cpu.StackWeights | None:
        """The one-call stack for this step, or None where a layer would not run as one C
        call (``DecoderLayer.forward``'s test)."""
        layers = self.layers
        first = layers[0]
        if not first.one_call or meta.max_query_len > NATIVE_CHUNK_ROWS or \
                not first._native(hidden, kv_caches[0], meta) or \
                not all(layer.one_call for layer in layers):
            return None
        variant = not meta.is_decode_only
        key = (variant, id(first.native_weights), id(kv_caches))
        stack = self._stacks.get(key)
        if stack is None:
            if len(self._stacks) > 8:
                self._stacks.clear()
            stack = _cpu.StackWeights([layer.native_weights[variant] for layer in layers],
                                      [(layer.input_norm, layer.post_attn_norm)
                                       for layer in layers], kv_caches)
            self._stacks[key] = stack
        return stack

    def kv_cache_shape(self, num_blocks: int, block_size: int) -> tuple[int, int, int, int]:
        """Shape of one layer's key (or value) cache."""
        return (num_blocks, block_size, self.config.num_kv_heads, self.config.head_dim)

    def kv_bytes_per_block(self, block_size: int, dtype: torch.dtype) -> int:
        """Bytes one block takes across all layers, keys and values."""
        itemsize = torch.empty((), dtype=dtype).element_size()
        cfg = self.config
        return 2 * cfg.num_layers * block_size * cfg.num_kv_heads * cfg.head_dim * itemsize

    def allocate_kv_caches(self, num_blocks: int, block_size: int,
                           dtype: torch.dtype | None = None,
                           device: torch.device | str | None = None
                           ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Zeroed per-layer caches (convenience for tests and simple generation)."""
        dtype = dtype or self.embed_tokens.dtype
        device = device or self.embed_tokens.device
        shape = self.kv_cache_shape(num_blocks, block_size)
        return [(torch.zeros(shape, dtype=dtype, device=device),
                 torch.zeros(shape, dtype=dtype, device=device)) for _ in self.layers]
