"""LoadReversal: a person's load that turns against its first direction is a hold."""

from __future__ import annotations

import numpy as np
import pytest

from sim_real_bridge.core.attribution_config import AttributionConfig
from sim_real_bridge.core.load_reversal import LoadReversal

CFG = AttributionConfig()  # reference 0.2 s, against by cos <= -0.3 for 0.1 s, reset after 1 s idle
DT_S = 0.02


def feed(reversal: LoadReversal, efforts, active: bool = True) -> None:
    for effort in efforts:
        if active:
            reversal.add(np.asarray(effort, dtype=float), DT_S, CFG)
        else:
            reversal.idle(DT_S, CFG)


def test_a_push_whose_lever_arms_turn_with_the_pose_is_not_reversed() -> None:
    rng = np.random.default_rng(3)
    reversal = LoadReversal()
    base = np.array([4.0, -2.0, 1.0, 0.5])
    # the pose turns the push's joint torques by up to 80 degrees in the first two joints' plane
    for angle in np.linspace(0.0, np.radians(80.0), 300):
        rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
        effort = base.copy()
        effort[:2] = rot @ base[:2]
        feed(reversal, [effort + rng.normal(0.0, 0.3, 4)])
    assert not reversal.reversed


def test_a_load_that_turns_round_for_long_enough_is_a_hold() -> None:
    reversal = LoadReversal()
    out = np.array([3.0, 1.0, 0.0])
    feed(reversal, [out] * 20)  # the reference, then on along it
    feed(reversal, [-out] * 4)  # against it for 0.08 s
    feed(reversal, [out])
    assert not reversal.reversed
    feed(reversal, [-0.5 * out] * 5)  # 0.1 s
    assert reversal.reversed
    feed(reversal, [out] * 10)
    assert reversal.reversed  # (a hold from then on)


def test_the_reference_is_the_first_rows_mean_and_a_new_load_starts_after_an_idle_second() -> None:
    reversal = LoadReversal()
    feed(reversal, [[1.0, 0.0]] * 5 + [[0.0, 1.0]] * 5)  # the mean points between the two
    feed(reversal, [[1.0, -0.2]] * 10)  # cos 0.55 with it: not against
    assert not reversal.reversed
    feed(reversal, [[-1.0, -1.0]] * 5)
    assert reversal.reversed
    feed(reversal, [[0.0, 0.0]] * 49, active=False)  # 0.98 s idle: the same load
    assert reversal.reversed
    feed(reversal, [[0.0, 0.0]], active=False)
    assert not reversal.reversed and reversal.reference is None
    feed(reversal, [[-1.0, -1.0]] * 10 + [[-1.0, -1.0]] * 10)  # a new load, in its own direction
    assert not reversal.reversed


def test_rows_with_an_unknown_effort_are_skipped() -> None:
    reversal = LoadReversal()
    feed(reversal, [[2.0, 0.0]] * 10 + [[np.nan, 0.0]] * 20)
    assert reversal.reference_s == pytest.approx(10 * DT_S) and np.allclose(reversal.reference, [20.0, 0.0])
    feed(reversal, [[-2.0, np.inf]] * 10)
    assert not reversal.reversed
