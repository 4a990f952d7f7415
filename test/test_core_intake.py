"""Intake checks on whole columns: rows refused or flagged, each counted by its reason."""

from __future__ import annotations

import numpy as np

from sim_real_bridge.core import validation
from sim_real_bridge.core.intake import IntakeConfig, check_rows, joint_order, nonfinite_rows

S = 1_000_000_000
FRAMES = IntakeConfig(expected_frames={"wrench": "tool0", "pose": "world"})


def _stamps(n: int) -> tuple[np.ndarray, np.ndarray]:
    stamp = 10 * S + np.arange(n, dtype=np.int64) * 10_000_000
    return stamp, stamp + 2_000_000


def test_clean_rows_are_kept_and_count_nothing() -> None:
    stamp, recv = _stamps(5)
    checked = check_rows(FRAMES, "wrench", stamp, recv, np.zeros(5, dtype=bool), "tool0")
    assert checked.keep.all() and checked.counts() == {}


def test_zero_and_negative_stamps_are_refused() -> None:
    stamp, recv = _stamps(4)
    stamp[[1, 2]] = [0, -5]
    checked = check_rows(IntakeConfig(), "joint_states", stamp, recv, np.zeros(4, dtype=bool))
    assert checked.keep.tolist() == [True, False, False, True]
    assert checked.counts() == {validation.ZERO_STAMP: 2}


def test_future_stamps_are_refused_only_when_stamps_are_on_the_node_clock() -> None:
    stamp, recv = _stamps(3)
    stamp[2] = recv[2] + 6 * S  # beyond max_future_s (5 s)
    stamp[1] = recv[1] + 4 * S  # within it
    on_clock = check_rows(IntakeConfig(), "wrench", stamp, recv, np.zeros(3, dtype=bool))
    assert on_clock.keep.tolist() == [True, True, False]
    assert on_clock.counts() == {validation.FUTURE_STAMP: 1}
    other_clock = check_rows(IntakeConfig(stamps_on_node_clock=False), "wrench", stamp, recv, np.zeros(3, dtype=bool))
    assert other_clock.keep.all()


def test_frames_other_than_the_expected_one_are_refused_per_row() -> None:
    stamp, recv = _stamps(3)
    nothing = np.zeros(3, dtype=bool)
    per_row = check_rows(FRAMES, "wrench", stamp, recv, nothing, ["tool0", "flange", "tool0"])
    assert per_row.keep.tolist() == [True, False, True]
    assert per_row.counts() == {validation.FRAME_MISMATCH: 1}
    one_for_all = check_rows(FRAMES, "ee_pose", stamp, recv, nothing, "map")
    assert not one_for_all.keep.any() and one_for_all.counts() == {validation.FRAME_MISMATCH: 3}
    assert check_rows(FRAMES, "object_pose", stamp, recv, nothing, "world").keep.all()
    # No expected frame configured: any frame is accepted.
    assert check_rows(IntakeConfig(), "wrench", stamp, recv, nothing, "anything").keep.all()


def test_non_finite_rows_are_kept_and_flagged() -> None:
    stamp, recv = _stamps(4)
    nonfinite = np.array([False, True, False, True])
    for stream in ("joint_states", "wrench", "ee_pose", "object_pose"):
        checked = check_rows(IntakeConfig(), stream, stamp, recv, nonfinite)
        assert checked.keep.all(), stream  # the evidence of the sensor category (a pose's are never drawn)
        assert checked.counts() == {validation.NON_FINITE: 2}


def test_a_row_refused_for_its_stamp_is_not_also_counted_non_finite() -> None:
    stamp, recv = _stamps(2)
    stamp[0] = 0
    checked = check_rows(FRAMES, "wrench", stamp, recv, np.array([True, True]), ["flange", "tool0"])
    assert checked.keep.tolist() == [False, True]
    assert checked.counts() == {validation.ZERO_STAMP: 1, validation.NON_FINITE: 1}


def test_a_joint_names_problem_refuses_every_row_of_the_batch() -> None:
    stamp, recv = _stamps(6)
    checked = check_rows(IntakeConfig(), "joint_states", stamp, recv, np.zeros(6, dtype=bool),
                         names_reason=validation.MISSING_JOINT)
    assert not checked.keep.any() and checked.counts() == {validation.MISSING_JOINT: 6}


def test_an_unsent_velocity_or_effort_block_is_not_non_finite() -> None:
    rows = np.zeros((4, 6))  # two joints: q, qd, effort
    rows[0, 2:4] = np.nan  # velocity not sent (JointState allows empty arrays)
    rows[1, 2] = np.nan  # one velocity NaN: sent and bad
    rows[2, 0] = np.inf  # a position infinite
    rows[3, 2:6] = np.nan  # neither velocity nor effort sent
    assert nonfinite_rows(rows, joint_blocks=True).tolist() == [False, True, True, False]
    assert nonfinite_rows(rows).tolist() == [True, True, True, True]


def test_joint_columns_follow_the_layout_fixed_by_the_first_batch() -> None:
    limits = validation.InputLimits()
    order, reason = joint_order(("a", "b", "c"), None, limits)
    assert reason is None and order.tolist() == [0, 1, 2]
    order, reason = joint_order(("c", "a", "b"), ("a", "b", "c"), limits)
    assert reason is None and order.tolist() == [1, 2, 0]
    names = ("c", "a", "b")
    assert [names[i] for i in order] == ["a", "b", "c"]


def test_joint_name_problems_are_named() -> None:
    limits = validation.InputLimits(max_joints=4)
    layout = ("a", "b", "c")
    assert joint_order((), layout, limits) == (None, validation.EMPTY)
    assert joint_order(tuple("abcde"), None, limits) == (None, validation.OVERSIZED)
    assert joint_order(("a", "a", "b"), None, limits) == (None, validation.DUPLICATE_NAMES)
    assert joint_order(("a", "b"), layout, limits) == (None, validation.MISSING_JOINT)
    # A joint outside the side's layout is unknown (its values would otherwise vanish unseen).
    assert joint_order(("a", "b", "c", "x"), layout, limits) == (None, validation.UNKNOWN_JOINT)
    assert joint_order(("x", "y", "z"), layout, limits) == (None, validation.UNKNOWN_JOINT)
    expected = validation.InputLimits(expected_joints=("a", "b"))
    assert joint_order(("a",), None, expected) == (None, validation.MISSING_JOINT)
    assert joint_order(("a", "b", "x"), None, expected) == (None, validation.UNKNOWN_JOINT)
