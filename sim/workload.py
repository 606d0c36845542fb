"""Trace records into scheduler sequences: synthetic prompt tokens, contract targets."""

from __future__ import annotations

from inference.request import ContractTargets, Profile, Tier
from inference.sequence import Sequence
from sim.config import Contracts
from sim.cost_model import CostModel
from sim.traces import TraceRequest

_STRIDE = 1 << 20  # distinct token ids of request i start at (i + 1) * _STRIDE


def prompt_tokens(index: int, n: int, prefix: tuple[int, ...]) -> list[int]:
    """Token ids for a synthetic prompt of ``n`` tokens.

    Without a shared prefix the ids are all 0 and the request gets a cache salt of its own,
    so nothing is shared and a prompt costs 8 bytes a token. With one, the prefix ids come
    first and the rest are distinct to the request, under the tenant's salt.
    """
    if not prefix:
        return [0] * n
    head = list(prefix[:n])
    start = (index + 1) * _STRIDE
    return head + list(range(start, start + n - len(head)))


class Workload:
    """Builds each trace request's sequence with the tier's contract targets."""

    def __init__(self, contracts: Contracts, cost: CostModel, chunk: int, block_size: int):
        self.c, self.cost, self.chunk, self.block_size = contracts, cost, chunk, block_size
        self._prefill: dict[int, float] = {}
        self._warm = ContractTargets(warm_rate_tps=contracts.warm_rate_tps,
                                     warm_band=contracts.warm_band,
                                     warm_mean_ttft_s=contracts.warm_mean_ttft_s)

    def isolated_prefill_s(self, prompt_tokens: int) -> float:
        """Seconds to the first token on an idle machine, chunked as the scheduler chunks."""
        t = self._prefill.get(prompt_tokens)
        if t is None:
            t, start = 0.0, 0
            while start < prompt_tokens:
                n = min(self.chunk, prompt_tokens - start)
                t += self.cost.plan_time(((start, n),))
                start += n
            self._prefill[prompt_tokens] = t
        return t

    def targets(self, req: TraceRequest) -> ContractTargets:
        c = self.c
        if req.tier is Tier.HOT:
            return ContractTargets(
                ttft_p99_s=c.hot_ttft_s + self.isolated_prefill_s(req.prompt_tokens),
                tbt_p99_s=c.hot_tbt_s, demotable=req.demotable, priority_weight=req.weight)
        if req.tier is Tier.COLD:
            return ContractTargets(cold_deadline_s=req.deadline_s or c.cold_deadline_s)
        return self._warm

    def sequence(self, index: int, req: TraceRequest) -> Sequence:
        rid = f"{req.tier}-{index}"
        prefix = tuple(h for h in req.prefix_blocks for _ in range(self.block_size))
        targets = self.targets(req)
        deadline = None
        if req.tier is Tier.COLD:
            deadline = req.arrival_s + targets.cold_deadline_s
        return Sequence(
            seq_id=f"{rid}-0", request_id=rid, index=0,
            prompt_token_ids=prompt_tokens(index, req.prompt_tokens, prefix),
            max_tokens=req.output_tokens, tier=req.tier, arrival_time=req.arrival_s,
            targets=targets,
            profile=Profile.for_tier(req.tier, req.prompt_tokens, req.output_tokens),
            salt=req.tenant if prefix else rid, tenant_id=req.tenant,
            in_contract=req.in_contract, deadline=deadline)
