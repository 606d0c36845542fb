"""Where each query row of a packed step sits: shared by the attention references and kernels."""

from __future__ import annotations

import torch


def row_positions(query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
                  num_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sequence, position)`` of every query row, each ``[T]`` int32."""
    q_lens = (query_start_loc[1:] - query_start_loc[:-1]).long()
    seqs = torch.repeat_interleave(torch.arange(q_lens.shape[0], device=q_lens.device), q_lens,
                                   output_size=num_rows)
    offset = torch.arange(num_rows, device=q_lens.device) - query_start_loc[:-1].long()[seqs]
    first = seq_lens.long() - q_lens  # position of each sequence's first query row
    return seqs.to(torch.int32), (first[seqs] + offset).to(torch.int32)
