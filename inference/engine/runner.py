"""Model runner: owns the KV-cache tensors and turns a step plan into one forward pass.

The plan names, per sequence, which token positions to compute; the runner builds the flat
batch (token ids, positions, slot mapping, block tables, query starts, sequence lengths) with
numpy over whole arrays, applies the plan's copy-on-write block copies, runs the model and
returns logits only for the rows that sample.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Sequence as Seq
from dataclasses import dataclass

import numpy as np
import torch

import kernels
from inference.engine.layerwise import LayerwiseForward
from inference.engine.sides import calibrate
from inference.kv.block_manager import BlockCopy
from inference.model import AttentionMetadata, LlamaModel
from inference.scheduler.plan import StepPlan
from inference.sequence import Sequence
from kernels import _cpu
from kernels.backends import Packing
from kernels.choice import Crossover, MatmulMode, Side, SideRule, StepKind
from kernels.table import KernelTable

# Steps of at least this many tokens run on ``threads[1]`` (wide) torch threads: a second
# thread speeds up a prompt's long matmuls, but through the server steps of a few dozen tokens
# gained nothing from it; decode steps keep the narrow count, whose spare core serves the
# event loop (docs/engine.md, "On CPU").
WIDE_STEP_TOKENS = 128
# the mode that keeps both the quantized blocks and the bfloat16 packs, a side per step kind
# and band (``EngineConfig.matmul_dtype="auto"``, ``quant_max_rows``)
AUTO = MatmulMode.AUTO


@dataclass(slots=True)
class BatchInputs:
    """One step's model inputs, already on the runner's device.

    ``sample_rows`` are the flat-batch rows whose logits are needed (the last row of each
    sequence that samples), in the order of ``sample_seq_ids``. ``allowed``, when set, waits
    for the step's grammar mask (``[N, vocab]`` bool, True = allowed; None: no constrained
    row), filled while the layers run; the LM head screens allowed tokens only.
    """

    input_ids: torch.Tensor        # [T] int64
    positions: torch.Tensor        # [T] int64
    meta: AttentionMetadata
    sample_rows: torch.Tensor      # [N] int64
    sample_seq_ids: list[str]
    block_copies: tuple[BlockCopy, ...] = ()
    side: Side | None = None  # under ``AUTO``: the packs it runs on, set at its first layer
    allowed: Callable[[], torch.Tensor | None] | None = None

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])


class ModelRunner:
    """Runs ``LlamaModel`` steps over a paged KV cache.

    Args:
        model: a loaded ``LlamaModel`` (weights on ``device``).
        dtype: the KV cache dtype (it may differ from the weights': float32 on CPU).
        num_blocks, block_size: KV pool shape; per layer keys and values are
            ``[num_blocks, block_size, num_kv_heads, head_dim]``.
        matmul_mode: CPU only: what to pack the layers' projections for (``MatmulMode``:
            bfloat16 mixed precision, see ``kernels.linear``, or the GGUF's quantized blocks,
            ``kernels._cpu.quant``); ``AUTO`` keeps both the quantized blocks and the
            bfloat16 packs and runs each step on the side ``sides`` gives its kind and
            width: with ``quant_max_rows`` set, a step of at most that many tokens on the
            quantized blocks and a wider one on bfloat16 (``kernels.choice.Crossover``);
            else the table passed in (tests), else one calibrated here, at load, on this
            machine (``inference.engine.sides``) for steps of up to ``widest`` tokens
            (default: what the KV pool holds). ``OWN`` keeps the weights' dtype. The
            choices land in one ``kernels.KernelTable`` (``self.kernels``).
        threads: ``(narrow, wide)`` torch threads for steps below and from
            ``WIDE_STEP_TOKENS`` tokens; None leaves torch's setting alone.
    """

    def __init__(self, model: LlamaModel, num_blocks: int, block_size: int,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                 matmul_mode: MatmulMode | torch.dtype | None = MatmulMode.OWN,
                 threads: tuple[int, int] | None = None,
                 quant_max_rows: int | None = None, pool_spin_us: int | None = None,
                 sides: SideRule | None = None,
                 widest: Mapping[StepKind, int] | None = None) -> None:
        self.model = model
        self.threads = threads
        self.device = torch.device(device)
        self.dtype = dtype
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.kv_caches = model.allocate_kv_caches(num_blocks, block_size, dtype=dtype,
                                                  device=self.device)
        self._pin = self.device.type == "cuda"
        # threads of the C kernels' pool for every step (0: their bfloat16 matmul's own rule):
        # in the quantized and auto modes every core, decode steps included; the workers sleep
        # between calls, so the serving loop still gets a core when it needs one
        self.pool_threads = 0
        self.pool_spin_us = pool_spin_us  # set on the pool every step; None leaves it be
        mode = MatmulMode.of(matmul_mode)
        c_kernels = kernels.use_native(model.norm)
        self.kernels = KernelTable(mode, kernels.backend(), native=self._native(model, c_kernels),
                                   c_kernels=c_kernels)
        if self.device.type == "cpu":
            # glibc would mmap and page-fault every step's multi-MB temporaries afresh
            kernels.tune_cpu_allocator()
            self._pack(model, mode, threads)
        for packing in (model.pack_state(), *self.kernels.packings.values()):
            packing.native = c_kernels  # decided once: no step asks again
        self._packs_in_use = Side.BF16  # AUTO packs the bfloat16 side last
        if self.kernels.packings:
            self.kernels.sides = self._side_rule(quant_max_rows, sides, widest)

    def _native(self, model: LlamaModel, c_kernels: bool) -> bool:
        """Whether this load's layers run on the C kernels (``kernels.backends.on_c_kernels``
        asks the same of each step run without a runner)."""
        return (model.norm.dtype == torch.float32 and self.kv_caches[0][0].dtype in
                _cpu.KV_DTYPES and c_kernels)

    def _pack(self, model: LlamaModel, mode: MatmulMode,
              threads: tuple[int, int] | None) -> None:
        """Pack the model's weights for ``mode`` and record the packings in ``self.kernels``
        (oneDNN-packed or Laser's own; bfloat16 decode matmuls on one thread go to Laser's
        own kernel, ``kernels.pack_linear_weight``)."""
        narrow = threads[0] if threads is not None else torch.get_num_threads()
        both = mode is MatmulMode.AUTO
        model.pack_linears(MatmulMode.QUANT if both else mode, native_gemm=narrow == 1)
        if not model.quantized:
            return
        # the pool's workers sleep between calls: every step runs on every core
        self.pool_threads = max(threads) if threads else torch.get_num_threads()
        if both:
            quantized = model.pack_state()
            model.pack_linears(MatmulMode.BF16, native_gemm=narrow == 1)
            self.kernels.packings.update({Side.QUANT: quantized, Side.BF16: model.pack_state()})

    def _side_rule(self, quant_max_rows: int | None, sides: SideRule | None,
                   widest: Mapping[StepKind, int] | None) -> SideRule:
        """Under ``AUTO``: the pinned crossover, else the table passed in, else one calibrated
        now (the probes leave the model on the packs they ran last)."""
        if quant_max_rows is not None:
            return Crossover(quant_max_rows)
        if sides is not None:
            return sides
        pool = self.num_blocks * self.block_size
        return calibrate(self, dict(widest) if widest else dict.fromkeys(StepKind, pool))

    @property
    def _pack_sets(self) -> tuple[Packing, Packing] | None:
        """Under ``AUTO``: the (quantized, bfloat16) packings (the benchmarks read them)."""
        packings = self.kernels.packings
        return (packings[Side.QUANT], packings[Side.BF16]) if self.kernels.two_sided else None

    @property
    def packs_in_use(self) -> Side:
        """The side the last step ran on under ``AUTO`` (``BF16`` before any)."""
        return self._packs_in_use

    def select_packs(self, batch: BatchInputs) -> None:
        """Under ``AUTO``: switch the model to the packs the table gives this step's rows (or
        the side the batch names)."""
        if batch.side is None:
            kind = StepKind.DECODE if batch.meta.is_decode_only else StepKind.PROMPT
            batch.side = self.kernels.side(batch.num_tokens, kind)
        self._switch(batch.side)

    def _switch(self, side: Side | None) -> None:
        if side is not None and side != self._packs_in_use:
            self.model.set_pack_state(self.kernels.packings[side])
            self._packs_in_use = side

    def use_side(self, side: Side | None, rows: int) -> None:
        """Run the next forward on ``side``'s packs (None: the one packing) with the threads
        of a step of ``rows`` tokens (the calibration's probes)."""
        self._switch(side)
        self._set_threads_for(rows)

    # ---- batch construction --------------------------------------------------------------
    def prepare(self, plan: StepPlan, seqs: Mapping[str, Sequence]) -> BatchInputs:
        """Flatten ``plan.scheduled`` into model inputs. Reads sequence state: call it while
        the scheduler is not mutating it."""
        # decode rows first: the kernels run the rows before the first prompt chunk
        # (``AttentionMetadata.single_rows``) as a decode step's, so their tokens do not depend
        # on a prompt sharing the step, and cost what a decode step's do
        items = plan.scheduled
        if any(a.num_tokens > 1 and b.num_tokens == 1 for a, b in zip(items, items[1:])):
            items = tuple(sorted(items, key=lambda it: it.num_tokens > 1))
        num_seqs = len(items)
        bs = self.block_size
        starts = np.fromiter((it.start for it in items), np.int64, num_seqs)
        q_lens = np.fromiter((it.num_tokens for it in items), np.int64, num_seqs)
        seq_lens = starts + q_lens
        qsl = np.zeros(num_seqs + 1, np.int64)
        np.cumsum(q_lens, out=qsl[1:])
        num_tokens = int(qsl[-1])

        ids: list[int] = []
        width = int(-(-seq_lens.max() // bs))
        tables = np.zeros((num_seqs, width), np.int64)
        for i, it in enumerate(items):
            seq = seqs[it.seq_id]
            if it.num_tokens == 1:
                ids.append(seq.token_at(it.start))
            else:
                ids.extend(seq.tokens(it.start, it.start + it.num_tokens))
            need = -(-int(seq_lens[i]) // bs)
            tables[i, :need] = seq.block_ids[:need]

        # Per-token arrays from per-sequence ones, without a Python loop over tokens.
        owner = np.repeat(np.arange(num_seqs), q_lens)
        positions = np.arange(num_tokens, dtype=np.int64) + np.repeat(starts - qsl[:-1], q_lens)
        slots = tables[owner, positions // bs] * bs + positions % bs
        sample_idx = [i for i, it in enumerate(items) if it.sample]
        rows = qsl[1:][sample_idx] - 1

        meta = AttentionMetadata(
            slot_mapping=self._to_device(slots),
            block_tables=self._to_device(tables.astype(np.int32)),
            query_start_loc=self._to_device(qsl.astype(np.int32)),
            seq_lens=self._to_device(seq_lens.astype(np.int32)),
            max_query_len=int(q_lens.max()),
            max_seq_len=int(seq_lens.max()),
        )
        meta.native = self.kernels.native  # the table's choice: no step asks again
        return BatchInputs(
            input_ids=self._to_device(np.asarray(ids, dtype=np.int64)),
            positions=self._to_device(positions),
            meta=meta,
            sample_rows=self._to_device(np.asarray(rows, dtype=np.int64)),
            sample_seq_ids=[items[i].seq_id for i in sample_idx],
            block_copies=plan.block_copies,
        )

    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(array))
        if self.device.type == "cpu":
            return t
        if self._pin:
            t = t.pin_memory()
        return t.to(self.device, non_blocking=True)

    # ---- execution -----------------------------------------------------------------------
    def copy_blocks(self, copies: Seq[BlockCopy]) -> None:
        """Copy whole blocks (all layers, keys and values): copy-on-write before a write."""
        if not copies:
            return
        src = torch.tensor([s for s, _ in copies], dtype=torch.int64, device=self.device)
        dst = torch.tensor([d for _, d in copies], dtype=torch.int64, device=self.device)
        for k_cache, v_cache in self.kv_caches:
            k_cache.index_copy_(0, dst, k_cache.index_select(0, src))
            v_cache.index_copy_(0, dst, v_cache.index_select(0, src))

    def prepare_forward(self, batch: BatchInputs) -> None:
        """Before (or on resuming) a forward over ``batch``: its packs and threads."""
        self.select_packs(batch)
        self._set_threads_for(batch.num_tokens)

    def _set_threads_for(self, rows: int) -> None:
        if self.device.type == "cpu":
            _cpu.set_threads(self.pool_threads, self.pool_spin_us)
        if self.threads is not None:
            n = self.threads[rows >= WIDE_STEP_TOKENS]
            if torch.get_num_threads() != n:
                torch.set_num_threads(n)

    def execute(self, batch: BatchInputs) -> torch.Tensor:
        """Run one forward over ``batch``; returns float32 logits ``[N, vocab]`` for its
        sampling rows (``N`` may be 0 when every chunk is a mid-prompt prefill)."""
        self.prepare_forward(batch)
        with torch.inference_mode():
            self.copy_blocks(batch.block_copies)
            hidden = self.model(batch.input_ids, batch.positions, self.kv_caches, batch.meta)
            return self.sample_logits(batch, hidden)

    def begin(self, batch: BatchInputs) -> LayerwiseForward:
        """Start a forward over ``batch`` that runs layer by layer and may stop between layers
        (``LayerwiseForward.advance``); other batches may run while it waits, as long as they
        do not write its sequences' blocks (the scheduler holds those sequences)."""
        with torch.inference_mode():
            self.copy_blocks(batch.block_copies)
            hidden = self.model.embed(batch.input_ids)
        return LayerwiseForward(self, batch, hidden)

    def sample_logits(self, batch: BatchInputs, hidden: torch.Tensor) -> torch.Tensor:
        """The float32 logits of ``batch``'s sampling rows from the final ``hidden``."""
        if not batch.sample_seq_ids:
            return hidden.new_empty((0, 0), dtype=torch.float32)
        rows = hidden.index_select(0, batch.sample_rows)
        allowed = batch.allowed() if batch.allowed is not None else None
        return self.model.compute_logits(rows, exact=not batch.meta.is_decode_only,
                                         allowed=allowed).float()
