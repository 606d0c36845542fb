"""Per-architecture details of the one decoder (``inference.model.llama``), as data.

Every supported family is the same pre-norm decoder (norm -> attention -> add & norm -> gated
MLP); an :class:`ArchSpec` says what differs: biases, per-head q/k norms, the extra norms
around attention and MLP, the MLP's gate activation, how the checkpoint stores its norms and
projections, and how llama.cpp's converter wrote them. Numbers that vary per checkpoint
(soft-caps, the sliding window and which layers use it, the local rotary base) live in
``ModelConfig``; this table holds what is fixed per family.
"""

from __future__ import annotations

from dataclasses import dataclass


class UnsupportedArchitecture(ValueError):
    """A checkpoint's architecture is none of ``ARCHITECTURES``."""

    def __init__(self, name: str, where: str = "model") -> None:
        super().__init__(f"{where} architecture {name!r} is not supported; supported: "
                         f"{', '.join(sorted(ARCHITECTURES))}")
        self.name = name


@dataclass(frozen=True, slots=True)
class ArchSpec:
    """What one family changes in the decoder.

    name: Laser's name, also the GGUF ``general.architecture``.
    hf_types: Hugging Face ``model_type`` values read as this family.
    qkv_bias: q/k/v projections always carry biases (Qwen 2), whatever the config says.
    qk_norm: an RMSNorm over each head of q and k before the rotary embedding (Qwen 3, Gemma 3).
    sandwich_norms: an RMSNorm on the attention output and on the MLP output before each
        residual add (Gemma 2/3); the MLP's own pre-norm is then ``pre_feedforward_layernorm``.
    activation: the MLP gate's activation: ``silu`` (SwiGLU) or ``gelu_tanh`` (GeGLU).
    norm_offset: the checkpoint stores every norm weight minus this (Gemma's ``1 + w``): the
        loader adds it back once, so the forward multiplies by the weight as usual.
    embed_scale: embeddings are multiplied by ``sqrt(hidden)`` (Gemma).
    gguf_qk_permuted: llama.cpp's converter interleaved q/k rows for its adjacent-pair rotary
        (the ``llama`` family only; the others use the neox order the model uses).
    sliding_every: in a GGUF without a per-layer pattern, every n-th layer is global and the
        others use the sliding window (0: none slide).
    """

    name: str
    hf_types: tuple[str, ...]
    qkv_bias: bool = False
    qk_norm: bool = False
    sandwich_norms: bool = False
    activation: str = "silu"
    norm_offset: float = 0.0
    embed_scale: bool = False
    gguf_qk_permuted: bool = False
    sliding_every: int = 0

    @property
    def plain(self) -> bool:
        """Whether the layer is the Llama one the one-call C layer runs."""
        return not (self.qk_norm or self.sandwich_norms or self.activation != "silu")


ACTIVATIONS = ("silu", "gelu_tanh")
ARCHITECTURES: dict[str, ArchSpec] = {spec.name: spec for spec in (
    ArchSpec("llama", ("llama",), gguf_qk_permuted=True),
    ArchSpec("mistral", ("mistral",), gguf_qk_permuted=True),
    ArchSpec("qwen2", ("qwen2",), qkv_bias=True),
    ArchSpec("qwen3", ("qwen3",), qk_norm=True),
    ArchSpec("gemma2", ("gemma2",), sandwich_norms=True, activation="gelu_tanh",
             norm_offset=1.0, embed_scale=True, sliding_every=2),
    ArchSpec("gemma3", ("gemma3_text", "gemma3"), qk_norm=True, sandwich_norms=True,
             activation="gelu_tanh", norm_offset=1.0, embed_scale=True, sliding_every=6),
    ArchSpec("phi3", ("phi3",)),
)}
_BY_HF_TYPE = {t: spec for spec in ARCHITECTURES.values() for t in spec.hf_types}


def arch_spec(name: str) -> ArchSpec:
    """The spec of Laser architecture ``name``; :class:`UnsupportedArchitecture` otherwise."""
    spec = ARCHITECTURES.get(name)
    if spec is None:
        raise UnsupportedArchitecture(name)
    return spec


def arch_of_hf_type(model_type: str) -> ArchSpec:
    """The family of a Hugging Face ``model_type``; :class:`UnsupportedArchitecture` else."""
    spec = _BY_HF_TYPE.get(model_type)
    if spec is None:
        raise UnsupportedArchitecture(model_type, "Hugging Face")
    return spec
