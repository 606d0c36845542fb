"""Laser's next-token distributions beside llama.cpp's on the same GGUF (test helper, and
``bench/oracle.py``'s).

llama.cpp's side is ``llama-perplexity --kl-divergence-base FILE``'s output: the text's tokens
and, for each chunk of ``n_ctx`` tokens evaluated from an empty cache (its first token
replaced by BOS where the vocabulary adds one), the log-probabilities of positions
``n_ctx/2 .. n_ctx-2``, each row stored as two float32s (scale, lowest log-probability) and a
uint16 per token (``logp = lowest + scale * q``, logits more than 16 below the best floored).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

BLOCK = 16


@dataclass(frozen=True, slots=True)
class Reference:
    n_ctx: int
    n_vocab: int
    tokens: np.ndarray    # [n_chunk * n_ctx] int32, the text as llama.cpp tokenized it
    logprobs: np.ndarray  # [n_chunk, n_ctx - 1 - n_ctx // 2, n_vocab] float64

    @property
    def chunks(self) -> list[list[int]]:
        n = len(self.tokens) // self.n_ctx
        return [self.tokens[i * self.n_ctx:(i + 1) * self.n_ctx].tolist() for i in range(n)]


def read_reference(path: str | Path) -> Reference:
    """Parse a ``--kl-divergence-base`` file."""
    data = Path(path).read_bytes()
    if data[:8] != b"_logits_":
        raise ValueError(f"{path} is not a llama-perplexity logits file")
    n_ctx, n_vocab, n_chunk = np.frombuffer(data, np.int32, 3, 8)
    start = 20
    tokens = np.frombuffer(data, np.int32, n_chunk * n_ctx, start)
    start += tokens.nbytes
    nv = 2 * ((n_vocab + 1) // 2) + 4
    rows = n_chunk * (n_ctx - 1 - n_ctx // 2)
    raw = np.frombuffer(data, np.uint16, rows * nv, start).reshape(rows, nv)
    head = raw[:, :4].copy().view(np.float32)  # [rows, 2]: scale, lowest log-probability
    logp = head[:, 1:2].astype(np.float64) + head[:, :1] * raw[:, 4:4 + n_vocab]
    return Reference(int(n_ctx), int(n_vocab), tokens,
                     logp.reshape(n_chunk, -1, n_vocab))


def laser_logprobs(model, chunk: list[int], bos: int | None) -> torch.Tensor:
    """Laser's log-probabilities (float64) at a chunk's scored positions, from one prefill of
    the chunk as llama-perplexity runs it (first token BOS where ``bos`` is given)."""
    from inference.model import AttentionMetadata

    ids = ([bos] + chunk[1:]) if bos is not None else list(chunk)
    n, first = len(ids), len(ids) // 2
    blocks = -(-n // BLOCK)
    caches = model.allocate_kv_caches(blocks, BLOCK, dtype=torch.float32)
    meta = AttentionMetadata.build([list(range(blocks))], [n], [n], BLOCK)
    with torch.inference_mode():
        hidden = model(torch.tensor(ids), torch.arange(n), caches, meta)
        logits = model.compute_logits(hidden[first:n - 1], exact=True).float()
    return torch.log_softmax(logits.double(), dim=-1)


@dataclass(frozen=True, slots=True)
class Agreement:
    mean_kl: float     # mean KL(llama.cpp || Laser) in nats
    max_kl: float
    top1: float        # share of positions whose most likely token is the same
    entropy: float     # llama.cpp's mean entropy (nats): the distributions are not trivial
    positions: int


def agreement(ref: Reference, model, bos: int | None) -> Agreement:
    """Compare Laser's ``model`` with ``ref`` at every scored position."""
    theirs = torch.from_numpy(ref.logprobs.reshape(-1, ref.n_vocab))
    ours = torch.cat([laser_logprobs(model, c, bos) for c in ref.chunks])
    p = theirs.exp()
    p = p / p.sum(-1, keepdim=True)  # the floor at -16 leaves the rows a hair off 1
    kl = (p * (p.log() - ours)).sum(-1)
    same = (theirs.argmax(-1) == ours.argmax(-1)).double()
    entropy = -(p * p.log()).sum(-1)
    return Agreement(float(kl.mean()), float(kl.max()), float(same.mean()),
                     float(entropy.mean()), len(kl))


def load_for(path: str | Path, mode: str):
    """A GGUF loaded and packed for ``mode`` (``float32``: exact on the dequantised weights;
    ``quant``: the quantized blocks, as serving runs a small step)."""
    import kernels
    from inference.loaders import load_model

    loaded = load_model(path, use_cache=False)
    loaded.model.pack_linears(kernels.MatmulMode.of(None if mode == "float32" else mode))
    return loaded
