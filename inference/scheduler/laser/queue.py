"""The ``laser`` policy's waiting queue in key order, kept from one step to the next.

Under overload the queue grows to thousands of sequences, and sorting it, and taking the
least hot slack over it, every step made a step's cost grow with the queue (an hour's run
with the square of its length). ``WaitingIndex`` keeps one sorted list of ``(key, seq)``
per class instead; a sequence whose key moved (``LaserScheduler._moved``) leaves its list and
is put back at the next ``sync``. The keys are the policy's cached ones, as the fill read
them before. For the least hot slack, class 0 is also kept by band of TTFT targets in
deadline order, so that the scan stops once no later deadline can hold a smaller slack
(``min_hot_slack``).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Callable, Iterable

from inference.scheduler.laser.keys import SchedClass, SortKey
from inference.scheduler.laser.slack import Speeds, min_hot_slack_frac, ttft_slack_frac
from inference.sequence import Sequence

Entry = tuple[SortKey, Sequence]
_BULK = 16  # more dirty sequences than this: append and sort instead of one insort each
_RATIO = 1.25  # TTFT targets within this factor share a band (``min_hot_slack``)
_C_HOT = SchedClass.HOT  # (an enum member read off its class is slow)
_NO_BAND = -(1 << 30)  # a target not positive and finite: its band is scanned whole


def _band(target: float) -> int:
    if not 0 < target < math.inf:  # (NaN too)
        return _NO_BAND
    return math.floor(math.log(target) / math.log(_RATIO))


def _band_targets(band: int) -> tuple[float, float]:
    """Bounds on the targets of a band, widened well past ``_band``'s rounding."""
    return _RATIO ** band / 1.01, _RATIO ** (band + 1) * 1.01


class WaitingIndex:
    """The waiting sequences by class, each class in key order (``classes[c]``)."""

    def __init__(self) -> None:
        self.classes: list[list[Entry]] = [[], [], [], []]
        self._keys: dict[str, SortKey] = {}  # seq id -> the key it is listed under
        self._dirty: dict[str, Sequence] = {}  # waiting, not listed yet
        # class 0 without a first token: (excess, band of the TTFT target) ->
        # [(deadline, seq id, seq)] in deadline order
        self._edf: dict[tuple[int, int], list[tuple[float, str, Sequence]]] = {}
        self._streams: dict[str, tuple[int, Sequence]] = {}  # class 0 with a first token
        self._tokens: Counter[int] = Counter()  # num_tokens of the ``_edf`` sequences
        self._most_tokens = 0
        self._computed: set[str] = set()  # listed with computed tokens (see ``plain``)

    @classmethod
    def of(cls, waiting: Iterable[Sequence],
           key: Callable[[Sequence], SortKey]) -> WaitingIndex:
        index = cls()
        for seq in waiting:
            index.enter(seq)
        return index.sync(key)

    @property
    def plain(self) -> bool:
        """No listed sequence has computed tokens (a waiting one never keeps any: a failed
        admission and a preemption both reset them), so each one's fill mark is
        (excess, 0)."""
        return not self._computed

    # ---- membership -----------------------------------------------------------------------
    def enter(self, seq: Sequence) -> None:
        self._dirty[seq.seq_id] = seq

    def leave(self, seq: Sequence) -> None:
        if self._dirty.pop(seq.seq_id, None) is None:
            k = self._keys.pop(seq.seq_id, None)
            if k is not None:
                self._drop(k)

    def moved(self, seq_id: str | None = None) -> None:
        """The sequence's key changed (every key when ``seq_id`` is None): relist it."""
        if seq_id is None:
            for entries in self.classes:
                self._dirty.update((q.seq_id, q) for _, q in entries)
                entries.clear()
            self._keys.clear()
            self._edf.clear()
            self._streams.clear()
            self._tokens.clear()
            self._most_tokens = 0
            self._computed.clear()
            return
        k = self._keys.pop(seq_id, None)
        if k is not None:
            self._dirty[seq_id] = self._drop(k)

    def sync(self, key: Callable[[Sequence], SortKey]) -> WaitingIndex:
        """List the sequences that entered or moved since the last sync, under ``key``."""
        dirty = self._dirty
        if not dirty:
            return self
        bulk = len(dirty) > _BULK
        keys, classes, edf, tokens = self._keys, self.classes, self._edf, self._tokens
        most = self._most_tokens
        for seq in dirty.values():
            k = key(seq)
            sid = seq.seq_id
            keys[sid] = k
            if bulk:
                classes[k.cls].append((k, seq))
            else:
                insort(classes[k.cls], (k, seq))  # keys end with the id: unique
            if seq.num_computed_tokens:
                self._computed.add(sid)
            if k.cls is not _C_HOT:
                continue
            if seq.first_token_time is not None:
                self._streams[sid] = (k.excess, seq)
                continue
            band = (k.excess, _band(seq.targets.ttft_p99_s))
            entries = edf.get(band)
            if entries is None:
                entries = edf[band] = []
            if bulk:
                entries.append((k.when, sid, seq))
            else:
                insort(entries, (k.when, sid, seq))
            n = len(seq.prompt_token_ids) + len(seq.output_token_ids)  # num_tokens
            tokens[n] += 1
            if n > most:
                most = n
        self._most_tokens = most
        dirty.clear()
        if bulk:
            for listed in classes:
                listed.sort()
            for by_deadline in edf.values():
                by_deadline.sort()
        return self

    def _drop(self, k: SortKey) -> Sequence:
        entries = self.classes[k.cls]
        i = bisect_left(entries, (k,))
        seq = entries.pop(i)[1]
        self._computed.discard(seq.seq_id)
        if k.cls is _C_HOT and self._streams.pop(seq.seq_id, None) is None:
            band = (k.excess, _band(seq.targets.ttft_p99_s))
            edf = self._edf[band]
            del edf[bisect_left(edf, (k.when, k.seq_id))]
            if not edf:
                del self._edf[band]
            n = len(seq.prompt_token_ids) + len(seq.output_token_ids)  # num_tokens
            self._tokens[n] -= 1
            if not self._tokens[n]:
                del self._tokens[n]
                if n == self._most_tokens:
                    self._most_tokens = max(self._tokens, default=0)
        return seq

    # ---- reads ----------------------------------------------------------------------------
    def __contains__(self, seq: Sequence) -> bool:
        return seq.seq_id in self._keys or seq.seq_id in self._dirty

    def __len__(self) -> int:
        return len(self._keys) + len(self._dirty)

    def unranked(self, cls: SchedClass) -> list[Sequence]:
        """Every waiting sequence but those listed in class ``cls`` (a sequence not listed
        yet may be of any class)."""
        out = list(self._dirty.values())
        for c, entries in enumerate(self.classes):
            if c != cls:
                out += [q for _, q in entries]
        return out

    def has_in_contract_hot(self) -> bool:
        """Some sequence of class ``HOT`` is in contract (excess 0 sorts first)."""
        hot = self.classes[_C_HOT]
        return bool(hot) and not hot[0][0].excess

    def min_hot_slack(self, excess: int, now: float, sp: Speeds) -> float:
        """``min_hot_slack_frac`` over the class-0 sequences of this excess, the same float.

        Per band of TTFT targets in deadline order: a later one has arrived no earlier
        than its deadline less its target (the deadline is arrival plus the target), its
        target is within the band's bounds, and it has at most ``_most_tokens`` prompt
        tokens left; so once that bound, less a margin far above the sums' rounding, is
        above the least slack found, no later one in the band can be smaller."""
        if self._computed:  # prefill_left would not be num_tokens - 1: every one is asked
            return min_hot_slack_frac((q for k, q in self.classes[_C_HOT]
                                       if k.excess == excess), now, sp)
        low = min_hot_slack_frac((q for e, q in self._streams.values() if e == excess), now,
                                 sp)
        per_token, step = sp.per_token_s, sp.step_s
        reach = self._most_tokens * per_token + step  # >= left * per_token + step
        bands = [(band, entries) for (e, band), entries in self._edf.items() if e == excess]
        # each band's most urgent first: a low bound early ends the other scans sooner
        for start in (0, 1):
            for band, entries in bands:
                lo, hi = _band_targets(band) if band != _NO_BAND else (0.0, math.inf)
                for deadline, _, seq in entries if start else entries[:1]:
                    gap = deadline - now - reach - 1e-9 * (
                        1.0 + abs(now) + abs(deadline) + reach + hi)
                    if lo and gap / (lo if gap <= 0 else hi) > low:
                        break
                    frac = ttft_slack_frac(seq, now, per_token, step)
                    if frac < low:
                        low = frac
        return low

    def check(self, waiting: Iterable[Sequence]) -> None:
        """Assert that the index holds exactly ``waiting``, each listed one in key order
        under the key it was listed with (tests; changes nothing)."""
        listed = [(k, q.seq_id) for entries in self.classes for k, q in entries]
        assert listed == sorted(listed), "a class out of key order"
        assert all(self._keys[i] == k for k, i in listed)
        ids = [i for _, i in listed] + list(self._dirty)
        assert sorted(ids) == sorted(q.seq_id for q in waiting)
        edf = sorted(i for entries in self._edf.values() for _, i, _ in entries)
        assert edf == sorted(i for i in ids if i in self._keys
                             and self._keys[i].cls is SchedClass.HOT
                             and i not in self._streams)
