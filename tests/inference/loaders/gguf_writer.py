"""Write tiny GGUF files the way llama.cpp's converter does (test helper)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFWriter
from gguf.quants import quantize

# A 97-token byte-level vocabulary: 3 control tokens, then single characters, then merges.
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHARS = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789") + ["Ġ", "Ċ", "!", "?", ".", ","]
MERGES = ["h e", "l l", "Ġ w", "o r", "he ll", "hell o", "Ġw or", "Ġwor l", "Ġworl d"]
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tiny_vocab(size: int) -> list[str]:
    merged = ["".join(m.split(" ")) for m in MERGES]
    tokens = SPECIALS + CHARS + merged
    filler = [f"<pad{i}>" for i in range(size - len(tokens))]
    assert len(tokens) <= size, (len(tokens), size)
    return tokens + filler


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """What convert_hf_to_gguf.py does to q/k rows (interleave the rotary halves per head)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def add_array(writer: GGUFWriter, name: str, array: np.ndarray, qtype: Q) -> None:
    if qtype == Q.F32:
        writer.add_tensor(name, array.astype(np.float32))
    elif qtype == Q.F16:
        writer.add_tensor(name, array.astype(np.float16))
    else:
        writer.add_tensor(name, quantize(array.astype(np.float32), qtype), raw_dtype=qtype)


def write_one_tensor(path, data: np.ndarray, qtype: Q):
    """A GGUF holding `data` (values for F32/F16, block bytes otherwise) as tensor "w", read
    back: the reader's tensor."""
    writer = GGUFWriter(str(path), "llama")
    if qtype in (Q.F32, Q.F16):
        writer.add_tensor("w", data)
    else:
        writer.add_tensor("w", data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    (tensor,) = GGUFReader(str(path)).tensors
    assert tensor.tensor_type == qtype
    return tensor


def add_tiny_tokenizer(writer: GGUFWriter, vocab_size: int) -> None:
    """The tiny byte-level BPE vocabulary, its specials (BOS 1, EOS 2) and chat template."""
    tokens = tiny_vocab(vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(TEMPLATE)


def write_tiny_gguf(path, hf_model, qtype: Q = Q.F32, with_tokenizer: bool = True,
                    raw: Mapping[str, tuple[np.ndarray, Q]] | None = None) -> None:
    """`hf_model` (a transformers LlamaForCausalLM) -> GGUF at `path`; matrices in `qtype`.

    `raw` maps GGUF tensor names to (stored array, its type) written as given in place of the
    model's tensor (block bytes for quantized types); names the model lacks are added too.
    """
    raw = dict(raw or {})

    def add(writer: GGUFWriter, name: str, array: np.ndarray, qtype: Q) -> None:
        if name not in raw:
            add_array(writer, name, array, qtype)
            return
        stored, stored_type = raw.pop(name)
        if stored_type in (Q.F32, Q.F16):
            writer.add_tensor(name, stored)
        else:
            writer.add_tensor(name, stored, raw_dtype=stored_type)

    cfg = hf_model.config
    sd = {k: v.detach().float().numpy() for k, v in hf_model.state_dict().items()}
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    w = GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    if with_tokenizer:
        add_tiny_tokenizer(w, cfg.vocab_size)
    add(w, "token_embd.weight", sd["model.embed_tokens.weight"], qtype)
    add(w, "output_norm.weight", sd["model.norm.weight"], Q.F32)
    if not cfg.tie_word_embeddings:
        add(w, "output.weight", sd["lm_head.weight"], qtype)
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for i in range(cfg.num_hidden_layers):
        for hf_name, gg_name in names.items():
            arr = sd[f"model.layers.{i}.{hf_name}.weight"]
            if gg_name == "attn_q":
                arr = llama_cpp_permute(arr, heads)
            elif gg_name == "attn_k":
                arr = llama_cpp_permute(arr, kv_heads)
            add(w, f"blk.{i}.{gg_name}.weight", arr, Q.F32 if arr.ndim == 1 else qtype)
    for name, (stored, stored_type) in list(raw.items()):
        add(w, name, stored, stored_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def crafted_block_llama(intermediate_size: int):
    """A seeded 2-layer float32 Llama 256 wide (K-quant blocks fit a row) whose projections the
    K-quant tests overwrite with crafted blocks; untied head, vocabulary of 97."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=97, hidden_size=256, intermediate_size=intermediate_size, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        rms_norm_eps=1e-5, tie_word_embeddings=False)).float().eval()
