"""The synchronous engine: requests in, one step at a time, deltas out.

``step()`` = schedule -> build batch -> forward -> sample -> ``scheduler.update`` -> detokenise.
It is thread-safe in the way ``AsyncEngine`` needs: ``add_request``/``abort``/``stats`` may run
on other threads while a step runs; the lock is held only while the scheduler's state is read or
changed, never during the forward pass, so adding a request waits at most a scheduling pass.

Layer pause: a step the scheduler marks pausable (``laser``: one without hot work) runs layer
by layer and stops at a layer boundary once a hot request arrives (``add_request`` raises a
flag the forward reads between layers) or a hot stream's next token falls due. Its sequences
are held by the scheduler; the next steps run the hot work, then advance the paused forward
until it completes and its tokens are sampled as if it had never stopped.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from inference.errors import InvalidParameter
from inference.kv.block_manager import BlockManager
from inference.request import Delta, EngineRequest, Tier
from inference.scheduler import SchedulingPolicy, StepPlan, layer_pausing, make_scheduler
from inference.sequence import sequences_from_request
from kernels.choice import StepKind

from .book import RequestBook
from .config import EngineConfig
from .contention import CpuContention
from .grammar import GrammarMasks, grammar_masks
from .intake import PromptEncoder
from .memory import IdleTrim, check_fits, checkpoint_bytes, pool_summary
from .outputs import abort_deltas, make_state
from .runner import BatchInputs, ModelRunner
from .sampler import Sampler, SamplingRow
from .stats import EngineStats, StepMeter, engine_stats
from .step_state import PausedForward, PlannedStep

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from inference.loaders import LoadedModel


class LLMEngine:
    """Owns the model, KV cache, scheduler and sampler.

    Args:
        config: engine limits; ``EngineConfig()`` serves the bundled SmolLM2.
        loaded: an already loaded model; None loads ``config.model``.
    """

    def __init__(self, config: EngineConfig | None = None,
                 loaded: LoadedModel | None = None) -> None:
        self.config = config = config or EngineConfig()
        narrow = config.num_threads or len(os.sched_getaffinity(0))
        torch.set_num_threads(narrow)
        if loaded is None:
            from inference.loaders import load_model

            check_fits(f"model {config.model}", {"its weights": checkpoint_bytes(config.model)})
            loaded = load_model(config.model, device=config.device, dtype=config.torch_dtype,
                                chat_template=config.chat_template)
        self.loaded = loaded
        self.model_config = loaded.config
        self.tokenizer = loaded.tokenizer
        model = loaded.model
        device = next(model.parameters()).device
        kv_dtype = config.torch_kv_dtype
        per_block = model.kv_bytes_per_block(config.block_size, kv_dtype)
        num_blocks = config.num_blocks(per_block)
        if device.type == "cpu":  # the weights are resident by now: the pool must fit beside
            check_fits("the KV cache", {f"{num_blocks} blocks of {per_block} bytes":
                                        num_blocks * per_block})
        kv = BlockManager(num_blocks, config.block_size, prefix_caching=config.prefix_caching)
        sched_config = config.scheduler_config(loaded.config.max_position)
        # A sequence longer than the whole pool could never be scheduled: cap the length.
        self.max_model_len = min(sched_config.max_model_len, num_blocks * config.block_size)
        if self.max_model_len < sched_config.max_model_len:
            sched_config = replace(sched_config, max_model_len=self.max_model_len)
        log.info(pool_summary(num_blocks, config.block_size, per_block, kv_dtype,
                              self.max_model_len, loaded.config.max_position))
        self.scheduler: SchedulingPolicy = make_scheduler(
            config.policy, sched_config, kv, **config.policy_options(len(model.layers)))
        self.pauser = layer_pausing(self.scheduler)  # its layer-pause hooks, asked once
        self.runner = ModelRunner(model, num_blocks, config.block_size, device, kv_dtype,
                                  config.matmul_mode,
                                  threads=(narrow, config.wide_threads or narrow),
                                  quant_max_rows=config.quant_max_rows,
                                  pool_spin_us=config.pool_spin_us,
                                  widest={StepKind.DECODE: config.max_num_seqs,
                                          StepKind.PROMPT: config.max_num_batched_tokens})
        self.sampler = Sampler()
        self.eos_token_ids = frozenset() if config.ignore_eos else frozenset(
            loaded.config.eos_token_ids) | loaded.stop_token_ids
        self._lock = threading.RLock()
        self._meter = StepMeter()
        self._contention = CpuContention()
        self._idle_trim = IdleTrim()
        self.last_step_empty = False  # the last step had nothing to run
        self._paused: PausedForward | None = None
        self._hot_arrived = False  # set by add_request, read between layers of a paused step
        self.grammar: GrammarMasks | None = grammar_masks(loaded)
        self._intake = PromptEncoder(loaded, self.max_model_len, self.grammar)
        self._book = RequestBook(self.grammar)
        self._requests = self._book.requests  # id -> state (the benchmarks read it)

    # ---- requests ------------------------------------------------------------------------
    def encode(self, request: EngineRequest) -> list[int]:
        """The request's prompt token ids (chat template applied), checked against the
        context. Raises ``InvalidParameter``/``PromptTooLong``; touches no engine state."""
        return self._intake.encode(request)

    def add_request(self, request: EngineRequest, prompt_ids: list[int] | None = None) -> None:
        """Queue a request, or raise (``InvalidParameter``, ``PromptTooLong``,
        ``AdmissionRefused``/``EngineOverloaded``) before any work is done."""
        ids = self.encode(request) if prompt_ids is None else prompt_ids
        seqs = sequences_from_request(request, ids, self.eos_token_ids)
        seed = request.sampling.seed
        if seed is None:  # still a function of position: reproducible within the request
            seed = random.getrandbits(63)
        state = make_state(request, ids, seqs, seed, self.tokenizer)
        matchers = [] if request.constraint is None else [
            self._intake.grammar_for(request).matcher(seq.seq_id, request.constraint)
            for seq in seqs]
        with self._lock:
            if request.request_id in self._requests:
                raise InvalidParameter("request_id", f"request {request.request_id!r} exists.")
            if self.grammar is not None:
                self.grammar.add(matchers)
            self.scheduler.add(seqs, time.time())
            self._book.add(state)
            if request.tier is Tier.HOT:
                self._hot_arrived = True

    def release_idle_memory(self) -> bool:
        """With no request left, give the allocator's free memory back (``memory.IdleTrim``:
        at most once a minute); True when it did. The async front calls it once the deltas
        of the step that emptied the engine are delivered."""
        with self._lock:
            if self._requests or self._paused is not None:
                return False
        return self._idle_trim.maybe(time.monotonic())

    def abort(self, request_id: str) -> list[Delta]:
        """Drop a request and free its blocks; returns its final ``abort`` deltas."""
        with self._lock:
            state = self._requests.get(request_id)
            if state is None:
                return []
            self.scheduler.abort(request_id)
            deltas = abort_deltas(state)
            self._book.forget(state)
            return deltas

    def abort_all(self) -> None:
        """Drop every request and a paused forward (the step loop failed midway)."""
        with self._lock:
            for request_id in list(self._requests):
                self.abort(request_id)
            if self._paused is not None:
                self._paused = None
                self.pauser.release()

    def has_unfinished(self) -> bool:
        with self._lock:
            return bool(self._requests) or self.scheduler.has_work()

    def is_active(self, request_id: str) -> bool:
        """Whether the request still has choices to finish."""
        return request_id in self._requests

    @property
    def num_requests(self) -> int:
        return len(self._requests)

    # ---- a step --------------------------------------------------------------------------
    def step(self) -> list[Delta]:
        """Run one scheduling step; returns the deltas it produced (possibly none)."""
        t0 = time.perf_counter()
        paused = self._paused
        if paused is not None and paused.resume_next is not None:
            finish, paused.resume_next = paused.resume_next, None
            self.last_step_empty = False
            return self._record(t0, self._resume(paused, finish))
        step = self._plan()
        if step.plan.is_empty and step.paused is None:
            return step.deltas
        if not step.plan.is_empty and not self._forward(step):
            return step.deltas  # paused between layers: its tokens come when it completes
        if step.paused is not None:
            if step.plan.is_empty:
                step.deltas += self._resume(step.paused, step.finish)
            else:
                # this step's tokens (a hot step's) go out now, not after the paused forward
                # has run its layers: the next call resumes it, before anything is scheduled
                step.paused.resume_next = step.finish
        return self._record(t0, step.deltas)

    def _plan(self) -> PlannedStep:
        """Schedule a step and build its batch, under the lock."""
        with self._lock:
            self._hot_arrived = False
            t_plan = time.perf_counter()
            plan = self.scheduler.schedule(time.time())
            paused = self._paused
            # finish_paused: hot needs the held blocks
            step = PlannedStep(plan, self._book.refusals(plan), t_plan, paused, plan.finish_paused)
            self.last_step_empty = plan.is_empty and paused is None
            if plan.is_empty:
                step.deltas += self._book.tier_only(plan, set())
                return step
            step.batch = batch = self.runner.prepare(plan, self.scheduler.seqs)
            if self.grammar:  # the masks fill on a worker thread while the layers run
                batch.allowed = self.grammar.begin(batch.sample_seq_ids)
            step.rows = [self._book.sampling_row(seq_id) for seq_id in batch.sample_seq_ids]
            # a pausable step stops for hot work at this time (or on a hot arrival)
            step.due = plan.pause_until if paused is None else None
            return step

    def _forward(self, step: PlannedStep) -> bool:
        """Run a planned step's forward, whole or (pausable) layer by layer, and add its
        deltas; False when it stopped between layers (then it waits in ``_paused``)."""
        plan, batch, rows = step.plan, step.batch, step.rows
        assert batch is not None
        if step.due is None:
            t_run = time.perf_counter()
            logits = self.runner.execute(batch)
            step.deltas += self._complete(plan, batch, rows, logits,
                                          time.perf_counter() - t_run, step.t_plan)
            return True
        forward = self.runner.begin(batch)
        if not forward.advance(self._stop_at(step.due)):
            with self._lock:
                self.pauser.hold(item.seq_id for item in plan.scheduled)
                # tier changes go out now; the tokens, when the forward completes
                step.deltas += self._book.tier_only(plan, set())
                self._paused = PausedForward(replace(plan, tier_changes=()), rows, forward)
            return False
        step.deltas += self._complete(plan, batch, rows, forward.logits(), forward.seconds,
                                      step.t_plan)
        return True

    def _record(self, t0: float, deltas: list[Delta]) -> list[Delta]:
        """The step meter books a step that began at ``t0`` and produced ``deltas``."""
        with self._lock:
            self._meter.record(time.time(), time.perf_counter() - t0,
                               sum(1 for d in deltas if d.token_ids))
        return deltas

    def _stop_at(self, due: float) -> Callable[[], bool]:
        """A paused-forward stop test: a hot request arrived, or ``due`` has passed."""
        return lambda: self._hot_arrived or time.time() >= due

    def _resume(self, paused: PausedForward, finish: bool) -> list[Delta]:
        """Advance a paused forward (at least one layer) until it completes or hot work
        arrives or falls due again (to completion when ``finish``: hot work waits for the
        blocks it holds); on completion sample and deliver its tokens."""
        forward = paused.forward
        if finish:
            forward.advance(lambda: False)
        else:
            with self._lock:
                due = self.pauser.pause_due_at()
            # a hot arrival during this step's hot forward runs next step: no layer before it
            if not forward.advance(self._stop_at(due),
                                   min_layers=0 if self._hot_arrived else 1):
                return []
        logits = forward.logits()
        with self._lock:
            self._paused = None
            self.pauser.release()
        # its time was split across steps with hot steps between: no sample for the cost model
        return self._complete(paused.plan, forward.batch, paused.rows, logits, None)

    def _complete(self, plan: StepPlan, batch: BatchInputs, rows: list[SamplingRow],
                  logits: torch.Tensor, run_s: float | None,
                  t_plan: float | None = None) -> list[Delta]:
        """Sample a finished forward's rows and fold the tokens back; its deltas. ``run_s``:
        the forward's seconds, ``t_plan``: when the step began planning (``perf_counter``);
        None for a forward split across steps."""
        out = self.sampler.sample(logits, rows)
        contention = self._contention.sample(time.monotonic())
        if self.grammar:
            self.grammar.consume(batch.sample_seq_ids, out.token_ids)
        with self._lock:
            now = time.time()
            if contention is not None:
                self.scheduler.observe_contention(contention)
            if run_s is not None:
                # the policy's cost model learns this machine's step time from every real step
                token_s = None if t_plan is None else time.perf_counter() - t_plan
                self.scheduler.observe_step(plan.num_batched_tokens, run_s,
                                            plan.num_prompt_tokens, token_s)
            self.scheduler.update(plan, dict(zip(batch.sample_seq_ids, out.token_ids)), now)
            new = self._book.token_deltas(plan, batch.sample_seq_ids, out, now,
                                          self.scheduler.finish)
            return new + self._book.tier_only(plan, {(d.request_id, d.index) for d in new})

    # ---- introspection -------------------------------------------------------------------
    def stats(self) -> EngineStats:
        with self._lock:
            return engine_stats(self.scheduler, self._meter, self._contention.factor)


__all__ = ["LLMEngine"]
