"""Random-weight Llama models made here (no weights are downloaded): transformers' random init,
written as a GGUF with gguf-py beside a real vocabulary from llama.cpp's tree, then quantised
with ``llama-quantize``.

    .venv/bin/python bench/models.py tiny OUT_DIR [--width 128|256] [--types F16,Q8_0,...]
    .venv/bin/python bench/models.py llama-1b [--cache DIR] [--type Q4_K_M]   # prints the path

``tiny``: one layer, a 512-token SentencePiece vocabulary cut from llama.cpp's
``ggml-vocab-llama-spm.gguf`` (``small_spm_vocab``), its init
scaled so next-token distributions are neither flat nor peaked (mean entropy 1-4 nats); each
type with ``--pure`` (every tensor in that type), ``Q4_K_M`` as llama-quantize mixes it.
``llama-1b``: Llama 3.2 1B's shape (2048 wide, 16 layers, 32/8 heads, 8192 FFN, Llama 3's
128,256-token vocabulary from ``ggml-vocab-llama-bpe.gguf``, tied embeddings), built once into
``--cache`` (default ``~/.cache/laser-models``, outside the repository) and reused.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.oracles import llama_cpp  # noqa: E402

TINY_VOCAB = 512
# Characters the tiny vocabulary has pieces for (the rest fall back to bytes)
ALPHABET = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
            ".,;:!?'\"-()[]&$%/\n")
# GGUF tensor name (after blk.N.) <- HF name (after model.layers.N.)
LAYER = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
         "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
         "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
TINY_SHAPES = {128: {"num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 256},
               256: {"num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512}}
LLAMA_1B = {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
            "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256,
            "tie_word_embeddings": True, "rope_theta": 500000.0, "max_position_embeddings": 8192,
            "bos_token_id": 128000, "eos_token_id": 128001}


def vocab_metadata(name: str) -> dict:
    """The tokenizer.* keys of llama.cpp's ``ggml-vocab-<name>.gguf``."""
    from gguf import GGUFReader

    from inference.loaders.gguf_loader import read_metadata

    path = llama_cpp.tree() / "models" / f"ggml-vocab-{name}.gguf"
    return {k: v for k, v in read_metadata(GGUFReader(str(path))).items()
            if k.startswith("tokenizer.")}


def small_spm_vocab(size: int, alphabet: str) -> dict:
    """llama-spm's vocabulary cut to ``size`` pieces, closed under its own merges (what a
    SentencePiece vocabulary of that size is): its control and byte tokens, the pieces of one
    character in ``alphabet`` (and ▁), then its best-scored pieces whose halves are already
    kept, in score order; scores and types are the original ones."""
    meta = vocab_metadata("llama-spm")
    tokens, scores, types = (meta[f"tokenizer.ggml.{k}"] for k in ("tokens", "scores",
                                                                   "token_type"))
    keep = [i for i, t in enumerate(types) if t != 1]
    chars = set(alphabet) | {"\u2581"}
    keep += [i for i, tok in enumerate(tokens) if types[i] == 1 and tok in chars]
    have = {tokens[i] for i in keep}
    for i, tok in enumerate(tokens):
        if len(keep) >= size:
            break
        if types[i] == 1 and tok not in have and any(
                tok[:c] in have and tok[c:] in have for c in range(1, len(tok))):
            keep.append(i)
            have.add(tok)
    keep.sort()
    out = dict(meta)
    for key, values in (("tokens", tokens), ("scores", scores), ("token_type", types)):
        out[f"tokenizer.ggml.{key}"] = [values[i] for i in keep]
    return out


def hf_llama(seed: int = 0, scale: float = 1.0, dtype: torch.dtype = torch.float32,
             bigram: float | None = None, **shape):
    """A random-weight ``LlamaForCausalLM`` in ``dtype``, its layers' weights times ``scale``
    (norms drawn around 1 so a wrong norm cannot hide). ``bigram``: the embeddings times that,
    and an untied head that is the embeddings in a random order, so each position has a clear
    favourite next token (a random bigram model, perturbed by the layer) as a trained model
    has, rather than near-ties that any rounding flips."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(**{"bos_token_id": 1, "eos_token_id": 2, "rms_norm_eps": 1e-5,
                         "max_position_embeddings": 2048, **shape})
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # a 1 B model made in float32 would take 5 GB
    try:
        model = LlamaForCausalLM(cfg).eval()
    finally:
        torch.set_default_dtype(default)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.8, 1.2)
            elif bigram is None or "layers" in name:
                p.mul_(scale)
        if bigram is not None:
            embed = model.model.embed_tokens.weight
            embed.mul_(bigram)
            model.lm_head.weight.copy_(embed[torch.randperm(embed.shape[0])])
    return model


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """convert_hf_to_gguf.py's q/k row order (each head's rotary halves interleaved)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2) \
        .reshape(w.shape)


def write_gguf(path: Path, model, vocab: dict, dtype=np.float32, name: str = "laser-random"):
    """``model`` as a llama GGUF (F32 or F16 matrices, F32 norms) with ``vocab``'s keys."""
    from gguf import GGUFWriter

    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    w = GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(0 if dtype == np.float32 else 1)
    for key, value in vocab.items():
        _add_field(w, key, value)
    sd = model.state_dict()

    def add(gguf_name: str, hf_name: str, heads: int = 0) -> None:
        arr = sd[hf_name].float().numpy()
        if heads:
            arr = permute(arr, heads)
        w.add_tensor(gguf_name, arr.astype(np.float32 if arr.ndim == 1 else dtype))

    add("token_embd.weight", "model.embed_tokens.weight")
    add("output_norm.weight", "model.norm.weight")
    if not cfg.tie_word_embeddings:
        add("output.weight", "lm_head.weight")
    for i in range(cfg.num_hidden_layers):
        for hf, gg in LAYER.items():
            heads = {"attn_q": cfg.num_attention_heads, "attn_k": cfg.num_key_value_heads}
            add(f"blk.{i}.{gg}.weight", f"model.layers.{i}.{hf}.weight", heads.get(gg, 0))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _add_field(w, key: str, value) -> None:
    from gguf import GGUFValueType

    if isinstance(value, list):
        sub = (GGUFValueType.STRING if value and isinstance(value[0], str) else
               GGUFValueType.FLOAT32 if value and isinstance(value[0], float) else
               GGUFValueType.INT32)
        w.add_array(key, value) if sub != GGUFValueType.INT32 else \
            w.add_key_value(key, value, GGUFValueType.ARRAY, sub_type=GGUFValueType.INT32)
    elif isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int):
        w.add_uint32(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    else:
        w.add_string(key, str(value))


def quantize(src: Path, dst: Path, qtype: str, pure: bool = True) -> Path:
    """``llama-quantize [--pure] src dst qtype``."""
    tool = llama_cpp.tool("llama-quantize")
    if tool is None:
        raise SystemExit("llama-quantize is not built: run shared/peers/llama-server.sh")
    cmd = [str(tool), *(["--pure"] if pure else []), str(src), str(dst), qtype]
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ,
                   "LD_LIBRARY_PATH": str(tool.parent)})
    return dst


def tiny(out: Path, width: int, types: list[str], seed: int = 0) -> dict[str, Path]:
    """The tiny model of ``width`` as F32 and each of ``types``: {type: path}."""
    out.mkdir(parents=True, exist_ok=True)
    model = hf_llama(seed, scale=TINY_SCALE[width], bigram=TINY_BIGRAM[width], hidden_size=width,
                     num_hidden_layers=1, vocab_size=TINY_VOCAB, tie_word_embeddings=False,
                     **TINY_SHAPES[width])
    f32 = out / f"tiny{width}-F32.gguf"
    vocab = small_spm_vocab(TINY_VOCAB, ALPHABET)
    write_gguf(f32, model, vocab, name=f"tiny{width}")
    paths = {"F32": f32}
    for qtype in types:
        if qtype != "F32":
            paths[qtype] = quantize(f32, out / f"tiny{width}-{qtype}.gguf", qtype,
                                    pure=not qtype.endswith(("_M", "_S")))
    return paths


# Layer weight scale and embedding scale (the bigram head) of each tiny width: mean next-token
# entropy 2-2.5 nats over the oracle text (tests/oracles/data/text.txt).
TINY_SCALE = {128: 1.0, 256: 0.5}
TINY_BIGRAM = {128: 3.0, 256: 1.5}


def llama_1b(cache: Path, qtype: str = "Q4_K_M") -> Path:
    """The ~1 B Llama-3-shaped model in ``qtype``, built once into ``cache``."""
    dst = cache / f"llama3-1b-random-{qtype}.gguf"
    if dst.is_file():
        return dst
    cache.mkdir(parents=True, exist_ok=True)
    f16 = cache / "llama3-1b-random-F16.gguf"
    if not f16.is_file():
        model = hf_llama(0, dtype=torch.bfloat16, **LLAMA_1B)
        write_gguf(f16.with_suffix(".part"), model, vocab_metadata("llama-bpe"),
                   dtype=np.float16, name="llama3-1b-random")
        del model
        f16.with_suffix(".part").rename(f16)
    quantize(f16, dst.with_suffix(".part"), qtype, pure=False)
    dst.with_suffix(".part").rename(dst)
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    t = sub.add_parser("tiny")
    t.add_argument("out", type=Path)
    t.add_argument("--width", type=int, default=128, choices=sorted(TINY_SHAPES))
    t.add_argument("--types", default="F16,Q8_0")
    b = sub.add_parser("llama-1b")
    b.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "laser-models")
    b.add_argument("--type", default="Q4_K_M")
    args = ap.parse_args()
    if args.what == "tiny":
        for qtype, path in tiny(args.out, args.width, args.types.split(",")).items():
            print(qtype, path, f"{path.stat().st_size / 1e6:.2f} MB")
    else:
        print(llama_1b(args.cache, args.type))


if __name__ == "__main__":
    main()
