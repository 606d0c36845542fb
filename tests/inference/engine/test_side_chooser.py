"""``SideChooser``: which packs run a step of a given width under ``matmul_dtype=auto``,
learned from the step times it is told of."""

from __future__ import annotations

from inference.engine.sides import BF16_SIDE, QUANT_SIDE, SideChooser


def drive(chooser: SideChooser, n: int, steps: int, seconds) -> list[int]:
    """``steps`` steps of ``n`` tokens, each timed by ``seconds(side)``; the sides run."""
    sides = []
    for _ in range(steps):
        side = chooser.choose(n)
        chooser.observe(n, side, seconds(side))
        sides.append(side)
    return sides


def test_groups_follow_the_width_exactly_up_to_8_then_four_per_doubling():
    groups = [SideChooser.group(n) for n in range(1, 300)]
    assert groups == sorted(groups)
    assert len({SideChooser.group(n) for n in range(1, 9)}) == 8
    assert len({SideChooser.group(n) for n in range(64, 128)}) == 4
    assert SideChooser.group(64) == SideChooser.group(79) != SideChooser.group(80)


def test_each_side_is_tried_first_then_the_faster_one_runs():
    chooser = SideChooser(explore_every=1000)
    sides = drive(chooser, 16, 10, lambda side: 0.03 if side == QUANT_SIDE else 0.04)
    assert sides == [QUANT_SIDE, BF16_SIDE] + [QUANT_SIDE] * 8
    assert chooser.faster(16) == chooser.faster(17) == QUANT_SIDE
    assert chooser.faster(64) is None


def test_the_other_side_is_tried_again_less_often_while_the_verdict_holds():
    chooser = SideChooser(explore_every=4, explore_max=16)
    sides = drive(chooser, 32, 2 + 60, lambda side: 0.05 if side == QUANT_SIDE else 0.08)
    explored = [i - 2 + 1 for i, s in enumerate(sides) if i >= 2 and s == BF16_SIDE]
    # at its 4th step, then 4, 8, 16 and 16 steps later: the interval doubles up to the cap
    assert explored == [4, 8, 16, 32, 48]


def test_a_change_of_machine_speed_flips_the_verdict_and_resets_the_interval():
    chooser = SideChooser(explore_every=4, explore_max=64)
    slow_bf16 = {QUANT_SIDE: 0.05, BF16_SIDE: 0.08}
    drive(chooser, 32, 40, slow_bf16.get)
    assert chooser.faster(32) == QUANT_SIDE
    fast_bf16 = {QUANT_SIDE: 0.05, BF16_SIDE: 0.02}  # e.g. the load on the machine changed
    sides = drive(chooser, 32, 200, fast_bf16.get)
    assert chooser.faster(32) == BF16_SIDE and sides[-50:].count(BF16_SIDE) >= 45


def test_a_new_width_takes_a_clear_verdict_of_the_nearest_timed_one_without_trials():
    chooser = SideChooser(explore_every=1000)
    drive(chooser, 16, 4, lambda side: 0.02 if side == QUANT_SIDE else 0.04)  # 2x: clear
    assert drive(chooser, 20, 3, lambda side: 0.03) == [QUANT_SIDE] * 3
    close = SideChooser(explore_every=1000)
    drive(close, 16, 4, lambda side: 0.030 if side == QUANT_SIDE else 0.033)  # 1.1x: not clear
    assert drive(close, 20, 2, lambda side: 0.03) == [QUANT_SIDE, BF16_SIDE]


def test_times_compare_per_token_so_wider_steps_in_a_group_do_not_count_against_a_side():
    chooser = SideChooser(explore_every=1000)
    chooser.observe(64, QUANT_SIDE, 0.064)  # 1 ms a token
    chooser.observe(79, BF16_SIDE, 0.0711)  # 0.9 ms a token: faster, though the step was longer
    assert chooser.faster(70) == BF16_SIDE


def test_a_slow_first_try_is_replaced_by_the_next_try_of_that_side():
    chooser = SideChooser(explore_every=8, explore_max=64)
    first = iter([0.5])  # the bfloat16 packs' first step pays a warm-up
    sides = drive(chooser, 64, 2 + 20, lambda side: 0.08 if side == QUANT_SIDE
                  else next(first, 0.06))
    assert sides[:2] == [QUANT_SIDE, BF16_SIDE]
    assert chooser.faster(64) == BF16_SIDE  # after its first second look, not dozens later
    assert sides[-8:].count(BF16_SIDE) >= 7


def test_steps_with_prompt_tokens_learn_apart_from_decode_steps_of_the_same_width():
    chooser = SideChooser(explore_every=1000)
    decode = {QUANT_SIDE: 0.06, BF16_SIDE: 0.04}  # the bfloat16 packs win decode steps
    prompt = {QUANT_SIDE: 0.06, BF16_SIDE: 0.16}  # their two-part prompt steps lose
    for _ in range(6):
        for is_prompt, times in ((False, decode), (True, prompt)):
            side = chooser.choose(66, is_prompt)
            chooser.observe(66, side, times[side], is_prompt)
    assert chooser.faster(66) == BF16_SIDE
    assert chooser.faster(66, prompt=True) == QUANT_SIDE
    # a new width takes the verdict of the nearest group of its own kind
    assert chooser.choose(90, True) == QUANT_SIDE and chooser.choose(90) == BF16_SIDE


def test_a_step_with_hot_streams_tries_no_side():
    chooser = SideChooser(explore_every=4)
    drive(chooser, 40, 2, lambda side: 0.05 if side == QUANT_SIDE else 0.08)  # a verdict
    # a new width: hot steps take the nearest timed group's verdict, untried
    assert [chooser.choose(100, explore=False) for _ in range(10)] == [QUANT_SIDE] * 10
    # a timed width: the verdict, and the steps do not count towards the next try
    before = chooser._groups[(False, SideChooser.group(40))].left
    assert {chooser.choose(40, explore=False) for _ in range(20)} == {QUANT_SIDE}
    assert chooser._groups[(False, SideChooser.group(40))].left == before
    assert BF16_SIDE in drive(chooser, 40, 8, lambda side: 0.05)  # others still try it
    # prompt steps with nothing timed of their kind: the quantized blocks, or the one side
    # this width has a time for
    assert chooser.choose(30, prompt=True, explore=False) == QUANT_SIDE
    chooser.observe(30, BF16_SIDE, 0.03, prompt=True)
    assert chooser.choose(30, prompt=True, explore=False) == BF16_SIDE
