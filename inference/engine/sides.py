"""Which packs run a step under ``matmul_dtype=auto``: the quantized blocks or the bfloat16
packs, learned per kind and width from the machine's own step times (``SideChooser``, the
bands of the runner's ``kernels.KernelTable``)."""

from __future__ import annotations

from dataclasses import dataclass

from kernels.choice import Side

QUANT_SIDE, BF16_SIDE = Side.QUANT, Side.BF16


class SideChooser:
    """Which packs (quantized blocks or bfloat16) run a step of ``n`` tokens, learned from the
    machine's own step times: which side is faster at which width differs between CPUs with
    the same vector units, so no fixed crossover suits every machine (docs/engine.md,
    "Which kernels").

    Steps are grouped by kind (decode only, or with prompt tokens: these run other packs, the
    two-part ones, and the sides' order can differ between the kinds at one width; one try of
    the slower side in a prompt step can hold hot streams' tokens past their TBT target) and
    by width (each count up to 8 tokens, then four groups per doubling); each side's time per
    token in a group is a moving average. A new group takes the verdict of the nearest group
    of its kind that has one when that one is clear (one side ``clear`` times faster), else
    it tries each side once. The faster side runs; now and then a step runs the other side
    again, so that a change of load is followed: first after ``explore_every`` steps of the
    group, then twice as many after each such step that was slower again (up to
    ``explore_max``), and ``explore_every`` again after one that was faster. A step on the
    slower side is a slow step for every stream in it, so the schedule backs off where the
    verdict is steady. A try of the other side replaces that side's time: blending it into a
    time many steps old kept a slow first try, one that paid a warm-up, for dozens of tries.
    Only whole forwards teach it (``observe``: a forward split around other steps is not
    timed whole)."""

    def __init__(self, explore_every: int = 64, explore_max: int = 4096, weight: float = 0.25,
                 clear: float = 1.2) -> None:
        self.explore_every, self.explore_max = explore_every, explore_max
        self.weight, self.clear = weight, clear
        self._groups: dict[tuple[bool, int], _Group] = {}

    @staticmethod
    def group(n: int) -> int:
        """Groups in order of width: 1-8 each their own, then four per doubling by the top
        three bits (9, 10-11, 12-13, 14-15, 16-19, ...)."""
        if n <= 8:
            return n
        bits = n.bit_length()
        return 4 * bits - 8 + (n >> (bits - 3))

    def choose(self, n: int, prompt: bool = False, explore: bool = True) -> Side:
        """The side to run a step of ``n`` tokens on. Without ``explore`` (a step that
        carries hot streams, whose TBT a slow try would break) no side is tried: the group's
        verdict, else its nearest timed neighbour's, else its one timed side, else the
        quantized blocks."""
        k = (prompt, self.group(n))
        g = self._groups.get(k)
        if g is None:
            g = self._groups[k] = self._new_group(self._prior(k))
        times = _timed(g.per_token)
        if times is None:
            if not explore:
                return self._guess(k, g)
            return QUANT_SIDE if g.per_token[QUANT_SIDE] is None else BF16_SIDE
        faster = _winner(times)
        if not explore:
            return faster
        if g.left:
            g.left -= 1
            return faster
        g.left = g.interval - 1
        return _other(faster)

    def observe(self, n: int, side: Side, seconds: float, prompt: bool = False) -> None:
        """A whole step of ``n`` tokens on ``side`` took ``seconds``."""
        k = (prompt, self.group(n))
        g = self._groups.get(k)
        if g is None:
            g = self._groups[k] = self._new_group([None, None])
        times, per_token = g.per_token, seconds / max(1, n)
        old, timed = times[side], _timed(times)
        if timed is not None and side != _winner(timed):
            # an exploration: slower than the verdict's side again, or worth a second look soon
            held = per_token >= timed[_other(side)]
            g.interval = min(self.explore_max, 2 * g.interval) if held else self.explore_every
            # it replaces the side's time: that one is many steps old (a first try may even
            # have paid a warm-up), the verdict side's average is as recent as this step
            old = None
        times[side] = per_token if old is None else old + self.weight * (per_token - old)

    def faster(self, n: int, prompt: bool = False) -> Side | None:
        """The side that is faster at ``n`` tokens so far; None before both were timed."""
        g = self._groups.get((prompt, self.group(n)))
        times = _timed(g.per_token) if g is not None else None
        return None if times is None else _winner(times)

    def _guess(self, k: tuple[bool, int], g: _Group) -> Side:
        """A side for a group without a verdict, untried (``choose`` without ``explore``)."""
        times = self._nearest(k)
        if times is not None:
            return _winner(times)
        if g.per_token[QUANT_SIDE] is None and g.per_token[BF16_SIDE] is not None:
            return BF16_SIDE
        return QUANT_SIDE

    def _nearest(self, k: tuple[bool, int]) -> tuple[float, float] | None:
        """Both sides' times in the nearest group of ``k``'s kind that has them."""
        timed = [(abs(o[1] - k[1]), o) for o, g in self._groups.items()
                 if o[0] == k[0] and _timed(g.per_token) is not None]
        return _timed(self._groups[min(timed)[1]].per_token) if timed else None

    def _new_group(self, per_token: list[float | None]) -> _Group:
        return _Group(per_token, self.explore_every, self.explore_every - 1)

    def _prior(self, k: tuple[bool, int]) -> list[float | None]:
        """A new group's times: the nearest timed group's of its kind where its verdict is
        clear."""
        times = self._nearest(k)
        if times is None:
            return [None, None]
        slow, fast = max(times), min(times)
        return list(times) if slow >= self.clear * fast else [None, None]


@dataclass(slots=True)
class _Group:
    """A width group's state in ``SideChooser``: each side's moving time per token, the steps
    between tries of the slower side, and the steps left until the next one."""

    per_token: list[float | None]
    interval: int
    left: int


def _timed(per_token: list[float | None]) -> tuple[float, float] | None:
    """Both sides' times, or None while a side has none."""
    quant, bf16 = per_token
    return None if quant is None or bf16 is None else (quant, bf16)


def _winner(times: tuple[float, float]) -> Side:
    return QUANT_SIDE if times[QUANT_SIDE] <= times[BF16_SIDE] else BF16_SIDE


def _other(side: Side) -> Side:
    return BF16_SIDE if side == QUANT_SIDE else QUANT_SIDE
