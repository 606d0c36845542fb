"""Step duration of a plan: measured non-attention operators plus an attention model.

Non-attention (norms, projections, rotary, MLP, adds) comes from Vidur's profiling CSVs:
the sum of the per-layer operator medians times the layer count, by batch token count,
interpolated linearly between profiled points (roofline where no profile exists).
Attention is modelled: a prefill chunk of ``c`` tokens after ``s`` cached ones costs
``4 c (s + (c + 1) / 2) heads head_dim`` FLOP per layer at an achieved fraction of peak;
decoding reads the whole cached context of every sequence, so it costs the summed context
times the KV bytes per token over the achieved memory bandwidth.
"""

from __future__ import annotations

import bisect
import csv
from collections.abc import Iterable
from pathlib import Path

from inference.scheduler.cost import largest_fitting
from sim.profiles import GPUSpec, ModelSpec

OPS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
       "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
ATTN_FLOP_EFF = 0.5  # FlashAttention-2 reaches about half of dense peak on A100/H100
MEM_EFF = 0.7
STEP_OVERHEAD_S = 1e-3  # scheduling, sampling, launch gaps per step
TABLE_TOKENS = 8192  # linear_s is tabulated up to this many tokens (a step's budget or more)


def load_profile(path: Path, tp: int = 1) -> list[tuple[int, float]]:
    """(num_tokens, seconds per layer) at tensor parallelism ``tp``; the fastest duplicate."""
    best: dict[int, float] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if int(row["num_tensor_parallel_workers"]) != tp:
                continue
            n = int(row["num_tokens"])
            t = sum(float(row[f"time_stats.{op}.median"]) for op in OPS) / 1e3
            best[n] = min(t, best.get(n, t))
    return sorted(best.items())


class CostModel:
    """Seconds per step for one model on one GPU. Also a scheduler ``CostEstimator``."""

    def __init__(self, model: ModelSpec, gpu: GPUSpec,
                 profile: list[tuple[int, float]] | None = None) -> None:
        self.model, self.gpu = model, gpu
        self.calibrated = profile is not None
        self._xs = [n for n, _ in profile] if profile else []
        self._ys = [t * model.num_layers for _, t in profile] if profile else []
        m = model
        self._attn_flop = 4 * m.num_heads * m.head_dim * m.num_layers / (gpu.flops
                                                                         * ATTN_FLOP_EFF)
        self._kv_read = m.kv_bytes_per_token / (gpu.bandwidth * MEM_EFF)
        # the scheduler asks for the same token counts a hundred times a step (its TBT-cap
        # bisections): a table of the interpolation, the same floats, one lookup each
        self._table = [self._linear(n) for n in range(TABLE_TOKENS + 1)]

    # ---- parts ----------------------------------------------------------------------------
    def linear_s(self, num_tokens: int) -> float:
        """Non-attention time of a forward pass over ``num_tokens`` tokens."""
        if 0 <= num_tokens <= TABLE_TOKENS:
            return self._table[num_tokens]
        return self._linear(num_tokens)

    def _linear(self, num_tokens: int) -> float:
        if num_tokens <= 0:
            return 0.0
        if not self._xs:
            return self._roofline(num_tokens)
        xs, ys = self._xs, self._ys
        if num_tokens <= xs[0]:
            return ys[0]
        if num_tokens >= xs[-1]:  # extrapolate with the last segment's slope
            slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
            return ys[-1] + slope * (num_tokens - xs[-1])
        i = bisect.bisect_left(xs, num_tokens)
        if xs[i] == num_tokens:
            return ys[i]
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (num_tokens - x0) / (x1 - x0)

    def _roofline(self, num_tokens: int) -> float:
        m, g = self.model, self.gpu
        flops = 2 * m.num_params * num_tokens
        compute = flops / (g.flops * 0.6)
        memory = m.weight_bytes / (g.bandwidth * MEM_EFF)
        return max(compute, memory)

    def prefill_attn_s(self, start: int, chunk: int) -> float:
        return self._attn_flop * chunk * (start + (chunk + 1) / 2)

    def decode_attn_s(self, context_tokens: int) -> float:
        return self._kv_read * context_tokens

    # ---- whole steps ----------------------------------------------------------------------
    def plan_time(self, items: Iterable[tuple[int, int]]) -> float:
        """Seconds for a step whose items are (start, num_tokens) pairs."""
        tokens, decode_ctx, prefill = 0, 0, 0.0
        for start, n in items:
            tokens += n
            if n == 1:
                decode_ctx += start + 1
            else:
                prefill += self.prefill_attn_s(start, n)
        if not tokens:
            return 0.0
        return (STEP_OVERHEAD_S + self.linear_s(tokens) + prefill
                + self.decode_attn_s(decode_ctx))

    def step_time(self, num_tokens: int, context_tokens: int = 0,
                  prompt_tokens: int = 0) -> float:
        """``CostEstimator`` view: tokens plus summed cached context read by the batch (the
        profiles time a token alike in prompt chunks and decode rows)."""
        lin = (self._table[num_tokens] if 0 <= num_tokens <= TABLE_TOKENS
               else self._linear(num_tokens))
        return STEP_OVERHEAD_S + lin + self._kv_read * context_tokens

    def max_tokens_within(self, seconds: float, context_tokens: int, upper: int,
                          decode_rows: int | None = None) -> int:
        """``inference.scheduler.cost.max_tokens_within`` for this model: the same probes and
        the same sums as ``step_time``, without its call (the scheduler asks twice a step)."""
        if upper > TABLE_TOKENS:
            def fits(n: int) -> bool:
                return self.step_time(n, context_tokens) <= seconds
        else:
            table, decode = self._table, self._kv_read * context_tokens

            def fits(n: int) -> bool:
                return STEP_OVERHEAD_S + table[n] + decode <= seconds
        return upper if fits(upper) else largest_fitting(0, upper, fits)

    def observe_step(self, num_tokens: int, seconds: float, prompt_tokens: int = 0) -> None:
        return None


def cost_model_for(gpu: str, model: str, root: Path | None = None) -> CostModel:
    """The calibrated model where a profile CSV exists for the pair, else the roofline."""
    from sim.profiles import GPUS, MODELS, PROFILED, traces_dir

    rel = PROFILED.get((gpu, model))
    profile = load_profile((root or traces_dir()) / rel) if rel else None
    return CostModel(MODELS[model], GPUS[gpu], profile)
