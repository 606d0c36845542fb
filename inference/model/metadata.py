"""Per-step attention metadata: where each token's K/V goes and which blocks each sequence reads."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from kernels.decode_attention import decode_rows


@dataclass(slots=True)
class AttentionMetadata:
    """Describes one flat batch of `T` tokens from `S` sequences.

    Tokens are grouped by sequence: sequence `i` owns rows
    `query_start_loc[i]:query_start_loc[i + 1]`, which are its *last* `q_len_i` positions
    (`seq_lens[i]` counts the new tokens too). A step may mix decode tokens (q_len 1) and prefill
    chunks.

    Attributes:
        slot_mapping: `[T]` int64, flat cache slot (`block * block_size + offset`) of each token.
        block_tables: `[S, max_blocks]` int32, physical block ids per sequence (padding unused).
        query_start_loc: `[S + 1]` int32, cumulative query lengths.
        seq_lens: `[S]` int32, context length of each sequence after this step.
        max_query_len: longest q_len in the batch.
        max_seq_len: longest seq_len in the batch.
    """

    slot_mapping: torch.Tensor
    block_tables: torch.Tensor
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    max_query_len: int
    max_seq_len: int
    _decode_index: tuple | None = field(default=None, init=False, repr=False)
    # per-step memos of the CPU path (the object lives for one step): whether the layers run
    # on the C kernels, and the checked step arguments of ``kernels._cpu.decoder_layer``
    native: bool | None = field(default=None, init=False, repr=False)
    native_args: tuple | None = field(default=None, init=False, repr=False)
    _single_rows: int | None = field(default=None, init=False, repr=False)

    def decode_index(self, block_size: int, num_kv_heads: int, head_dim: int) -> tuple:
        """``kernels.decode_attention.decode_rows`` of this step's sequences (cache rows to
        gather, additive mask, sequence chunks): the same for every layer, so computed once per
        step (the object lives for one step) instead of once per layer."""
        if self._decode_index is None:
            self._decode_index = decode_rows(self.block_tables, self.seq_lens,
                                             self.max_seq_len, block_size, num_kv_heads, head_dim)
        return self._decode_index

    @property
    def is_decode_only(self) -> bool:
        return self.max_query_len == 1

    @property
    def single_rows(self) -> int:
        """Rows before the first sequence with more than one this step (a prompt chunk's):
        its decode rows when they come first, as the runner orders them (every row in a
        decode step): ``kernels`` runs them as a decode step's rows in a prompt step."""
        if self._single_rows is None:
            lens = (self.query_start_loc[1:] - self.query_start_loc[:-1]).tolist()
            first = next((i for i, n in enumerate(lens) if n > 1), len(lens))
            self._single_rows = int(self.query_start_loc[first])
        return self._single_rows

    @property
    def num_seqs(self) -> int:
        return int(self.seq_lens.shape[0])

    @classmethod
    def build(cls, block_tables: list[list[int]], seq_lens: list[int], query_lens: list[int],
              block_size: int, device: torch.device | str = "cpu") -> AttentionMetadata:
        """Build from Python lists (tests, simple generation); the runner may build its own.

        Args:
            block_tables: physical block ids per sequence, covering at least `seq_lens[i]` slots.
            seq_lens: context length per sequence after this step (includes the new tokens).
            query_lens: number of new tokens per sequence in this step.
            block_size: tokens per KV block.
        """
        if not (len(block_tables) == len(seq_lens) == len(query_lens)):
            raise ValueError("block_tables, seq_lens and query_lens need one entry per sequence")
        slots: list[int] = []
        starts = [0]
        for table, seq_len, q_len in zip(block_tables, seq_lens, query_lens):
            if not 0 < q_len <= seq_len or len(table) * block_size < seq_len:
                raise ValueError(f"bad sequence: q_len={q_len}, seq_len={seq_len}, "
                                 f"{len(table)} blocks of {block_size}")
            for pos in range(seq_len - q_len, seq_len):
                slots.append(table[pos // block_size] * block_size + pos % block_size)
            starts.append(starts[-1] + q_len)
        width = max(len(t) for t in block_tables)
        padded = [list(t) + [0] * (width - len(t)) for t in block_tables]
        return cls(
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
            block_tables=torch.tensor(padded, dtype=torch.int32, device=device),
            query_start_loc=torch.tensor(starts, dtype=torch.int32, device=device),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
            max_query_len=max(query_lens),
            max_seq_len=max(seq_lens),
        )
