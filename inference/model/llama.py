"""The decoder of every supported family (``inference.model.arch``: Llama 2/3, Mistral,
Qwen 2/3, Gemma 2/3, Phi-3) over a flat batch of tokens; what differs per family is data in
``config.spec`` read once here, not a forward of its own."""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

import kernels
from kernels import DOWN, GATE_UP, LayerBackend, LayerParams, LayerShape, Packing

from .attention import Attention
from .config import ModelConfig
from .metadata import AttentionMetadata


def _param(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape), requires_grad=False)


def _rotary(cache: torch.Tensor | None) -> torch.Tensor:
    """The rotary cache, built by ``LlamaModel.init_rotary`` before the first forward."""
    if cache is None:
        raise RuntimeError("no rotary cache: call LlamaModel.init_rotary first")
    return cache


class DecoderLayer(nn.Module):
    """Pre-norm block: RMSNorm -> attention -> add&RMSNorm -> gated MLP (SwiGLU, or GeGLU
    where ``spec.activation`` says). With ``spec.sandwich_norms`` (Gemma) the attention
    output and the MLP output are RMSNormed (``attn_out_norm``, ``mlp_out_norm``) before
    their residual adds, and ``post_attn_norm`` is the MLP's pre-norm.

    The residual add is fused into the next norm (`ops.add_norm(x, w, eps, residual)`), so a
    layer returns `(hidden, residual)` and the caller adds the last residual in `norm_out`.

    The layer only describes the architecture: its `backend` (`kernels.backends.LayerBackend`,
    set by `LlamaModel` when the weights are packed) owns the packed weights and gives, each
    step, the op set it runs on (the `kernels.*` ops, or the C kernels), or runs the whole layer
    as one C call where it can.
    """

    def __init__(self, config: ModelConfig, layer: int = 0) -> None:
        super().__init__()
        spec = config.spec
        self.eps = config.rms_norm_eps
        self.activation = spec.activation
        self.input_norm = _param(config.hidden_size)
        self.attn = Attention(config, layer)
        self.post_attn_norm = _param(config.hidden_size)
        self.attn_out_norm: nn.Parameter | None = None
        self.mlp_out_norm: nn.Parameter | None = None
        if spec.sandwich_norms:
            self.attn_out_norm = _param(config.hidden_size)
            self.mlp_out_norm = _param(config.hidden_size)
        self.gate_up_weight = _param(2 * config.intermediate_size, config.hidden_size)
        self.down_weight = _param(config.hidden_size, config.intermediate_size)
        self.cos_sin_cache: torch.Tensor | None = None  # shared with the model, set by it
        self.backend = LayerBackend()  # see LlamaModel.pack_linears

    def params(self, blocks: tuple = (None,) * 4) -> LayerParams:
        """This layer's final weights, for `kernels.pack_model`."""
        attn = self.attn
        plain = attn.q_norm is None and self.attn_out_norm is None and \
            self.activation == "silu" and not attn.window and not attn.softcap
        return LayerParams((attn.qkv_weight, attn.o_weight, self.gate_up_weight,
                            self.down_weight), blocks, attn.qkv_bias,
                           (self.input_norm, self.post_attn_norm), plain)

    def forward(self, positions: torch.Tensor, hidden: torch.Tensor,
                residual: torch.Tensor | None, kv_cache: tuple[torch.Tensor, torch.Tensor],
                meta: AttentionMetadata) -> tuple[torch.Tensor, torch.Tensor]:
        """Args: `hidden`/`residual` `[T, hidden]` (residual None at the first layer)."""
        cos_sin = _rotary(self.cos_sin_cache)
        whole = self.backend.decoder_layer(positions, hidden, residual, cos_sin, kv_cache, meta)
        if whole is not None:
            return whole
        ops = self.backend.ops(hidden, kv_cache, self.input_norm, meta)
        hidden, residual = ops.add_norm(hidden, self.input_norm, self.eps, residual)
        hidden = self.attn(positions, hidden, cos_sin, kv_cache, meta, ops)
        if self.attn_out_norm is not None:
            hidden = ops.norm(hidden, self.attn_out_norm, self.eps)
        hidden, residual = ops.add_norm(hidden, self.post_attn_norm, self.eps, residual)
        hidden = ops.gate_and_mul(ops.linear(hidden, self.gate_up_weight, GATE_UP),
                                  self.activation)
        hidden = ops.linear(hidden, self.down_weight, DOWN)
        if self.mlp_out_norm is not None:
            hidden = ops.norm(hidden, self.mlp_out_norm, self.eps)
        return hidden, residual


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
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = _param(config.hidden_size)
        self.lm_head = None if config.tie_word_embeddings else _param(config.vocab_size,
                                                                      config.hidden_size)
        self.cos_sin_cache: torch.Tensor | None = None
        # state-dict name -> (GGML type, raw GGUF rows): set by the loader for a GGUF on CPU
        self.quant_blocks: dict[str, tuple[int, torch.Tensor]] = {}
        self.packing: Packing
        self.set_pack_state(kernels.unpacked(config.num_layers))

    @property
    def head(self) -> torch.Tensor:
        """The LM head's weight `[vocab, hidden]` (the embeddings when tied)."""
        return self.embed_tokens if self.lm_head is None else self.lm_head

    @property
    def quantized(self) -> bool:
        """Whether the packing in use is the quantized matmul's (`pack_linears(kernels.QUANT)`)."""
        return self.packing.quantized

    def pack_linears(self, mode: kernels.MatmulMode | torch.dtype | None = None,
                     native_gemm: bool = False) -> bool:
        """Pack every projection and the LM head for ``mode`` (``kernels.MatmulMode``; None:
        each in its own dtype; ``torch.bfloat16``: ``BF16``, mixed precision; ``QUANT``/``Q8``:
        the GGUF's quantized blocks, see ``kernels.packing``), choosing each layer's backend
        once. Call once the weights are final; True if the head packed (CPU oneDNN; a no-op
        elsewhere)."""
        names = ("attn.qkv_weight", "attn.o_weight", "gate_up_weight", "down_weight")
        decoder = self._decoder_layers()
        layers = [layer.params(tuple(self.quant_blocks.get(f"layers.{i}.{n}") for n in names))
                  for i, layer in enumerate(decoder)]
        attn, cfg = decoder[0].attn, self.config
        shape = LayerShape(attn.heads, cfg.rms_norm_eps, attn.scale)
        head_name = "embed_tokens" if self.lm_head is None else "lm_head"
        self.set_pack_state(kernels.pack_model(layers, self.head, self.quant_blocks.get(head_name),
                                       shape, kernels.MatmulMode.of(mode), native_gemm))
        return self.packing.quantized or self.packing.head_packed is not None

    def pack_state(self) -> Packing:
        """What ``pack_linears`` set: hand it to ``set_pack_state`` to switch between two
        packings kept side by side (the runner's ``auto``: the quantized blocks for small
        steps, bfloat16 packs for batches)."""
        return self.packing

    def set_pack_state(self, state: Packing) -> None:
        self.packing = state
        for layer, backend in zip(self._decoder_layers(), state.layers, strict=True):
            layer.backend = backend

    def _decoder_layers(self) -> list[DecoderLayer]:
        return [cast(DecoderLayer, layer) for layer in self.layers]

    def init_rotary(self, device: torch.device | str | None = None) -> None:
        """(Re)build the rotary cache on `device`; call after the weights are in place."""
        device = device if device is not None else self.embed_tokens.device
        cfg = self.config
        # float32 even for bf16 models: positions far into the context need the precision.
        self.cos_sin_cache = kernels.build_cos_sin_cache(
            cfg.head_dim, cfg.max_position, cfg.rope_theta, device, torch.float32,
            scaling=cfg.rope_scaling)
        local = self.cos_sin_cache
        if cfg.rope_local_theta is not None:
            # the sliding layers' own base (Gemma 3), without the global layers' scaling
            local = kernels.build_cos_sin_cache(cfg.head_dim, cfg.max_position,
                                                cfg.rope_local_theta, device, torch.float32)
        for i, layer in enumerate(self.layers):
            layer.cos_sin_cache = local if i in cfg.sliding_layers else self.cos_sin_cache

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """`[T]` int64 -> `[T, hidden]` (times `sqrt(hidden)` where ``spec.embed_scale``,
        the factor rounded to the weights' dtype as Hugging Face's Gemma does)."""
        hidden = F.embedding(input_ids, self.embed_tokens)
        if self.config.spec.embed_scale:
            hidden = hidden * torch.tensor(self.config.hidden_size ** 0.5, dtype=hidden.dtype)
        return hidden

    def norm_out(self, hidden: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
        """Final residual add + RMSNorm after the last layer."""
        return kernels.final_norm(hidden, self.norm, self.config.rms_norm_eps, residual,
                                  self.packing.native)

    def compute_logits(self, hidden: torch.Tensor, exact: bool = False,
                       allowed: torch.Tensor | None = None) -> torch.Tensor:
        """`[N, hidden]` -> `[N, vocab]`; pass only the rows that will be sampled. `exact`
        (a step with prompt tokens) scores with the model's own head, no screening;
        `allowed` (`[N, vocab]` bool) leaves -inf on the tokens a grammar forbids
        (`kernels.backends.Packing.logits`). A final soft-cap (Gemma 2) maps each logit to
        `cap * tanh(logit / cap)`: monotone, so the screen's top logits stay the top."""
        logits = self.packing.logits(hidden, self.head, exact, allowed)
        cap = self.config.final_softcap
        if cap:
            logits = logits.div_(cap).tanh_().mul_(cap)
            if allowed is not None:
                logits.masked_fill_(~allowed, float("-inf"))
        return logits

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
        on) is true; returns ``(hidden, residual, layers run)``. Where the packing runs every
        layer as one C call the whole run is one (``Packing.decoder_stack``): no Python
        between the layers."""
        whole = self.packing.decoder_stack(positions, hidden, residual,
                                           _rotary(self.cos_sin_cache), kv_caches, meta, start,
                                           stop, min_layers)
        if whole is not None:
            return whole
        ran = 0
        for i in range(start, len(self.layers)):
            if ran >= min_layers and stop is not None and stop():
                break
            hidden, residual = self.layers[i](positions, hidden, residual, kv_caches[i], meta)
            ran += 1
        return hidden, residual, ran

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
        if torch.device(device).type == "cpu":  # blocks read scattered: huge pages (kernels)
            return [(kernels.zeros_in_huge_pages(shape, dtype),
                     kernels.zeros_in_huge_pages(shape, dtype)) for _ in self.layers]
        return [(torch.zeros(shape, dtype=dtype, device=device),
                 torch.zeros(shape, dtype=dtype, device=device)) for _ in self.layers]
