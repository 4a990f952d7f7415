"""Tests of the streaming and batch aligners (sim_real_bridge.core.align)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim_real_bridge.core.align import (
    COUNTER_NAMES,
    ChannelLayout,
    StreamAligner,
    align_batch,
    slerp,
)
from sim_real_bridge.errors import AlignmentError, ConfigError

MS = 1_000_000


def feed(aligner: StreamAligner, events: list[tuple[int, str, int, np.ndarray]]) -> list:
    """Push (arrival, side, stamp, values) events in arrival order; return every pair."""
    out = []
    for _, side, stamp, values in sorted(events, key=lambda e: (e[0], e[1])):
        if side == "sim":
            out += aligner.push_sim(stamp, values)
        else:
            out += aligner.push_real(stamp, values)
    return out


def linear_sim(stamps_ns: np.ndarray, slope: np.ndarray, intercept: np.ndarray) -> np.ndarray:
    return intercept[None, :] + np.outer(stamps_ns * 1e-9, slope)


# -- layout and slerp -------------------------------------------------------------------


def test_layout_splits_linear_and_quaternion_columns():
    layout = ChannelLayout(10, quat_starts=[3])
    assert layout.quat_cols.tolist() == [[3, 4, 5, 6]]
    assert layout.linear_cols.tolist() == [0, 1, 2, 7, 8, 9]
    assert layout.has_quaternions


@pytest.mark.parametrize(
    ("n_values", "starts", "match"),
    [
        (0, (), "n_values must be >= 1"),
        (6, (3,), "does not fit"),
        (8, (0, 2), "overlaps"),
        (4, (-1,), "does not fit"),
    ],
)
def test_layout_rejects_bad_blocks(n_values, starts, match):
    with pytest.raises(ConfigError, match=match):
        ChannelLayout(n_values, starts)


def _axis_angle_quat(axis: np.ndarray, angle: float) -> np.ndarray:
    axis = axis / np.linalg.norm(axis)
    return np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * axis])


def test_slerp_follows_the_great_circle_and_extrapolates():
    axis = np.array([0.3, -0.5, 0.8])
    q0 = _axis_angle_quat(axis, 0.2)
    q1 = _axis_angle_quat(axis, 1.0)
    for frac in (0.0, 0.25, 0.5, 1.0, 1.5, -0.5):
        expected = _axis_angle_quat(axis, 0.2 + 0.8 * frac)
        np.testing.assert_allclose(slerp(q0, q1, frac), expected, atol=1e-12)


def test_slerp_takes_the_short_way_for_opposite_signs():
    axis = np.array([0.0, 0.0, 1.0])
    q0 = _axis_angle_quat(axis, 0.1)
    q1 = -_axis_angle_quat(axis, 0.3)  # same rotation as +q, other hemisphere
    mid = slerp(q0, q1, 0.5)
    expected = _axis_angle_quat(axis, 0.2)
    assert min(np.abs(mid - expected).max(), np.abs(mid + expected).max()) < 1e-12


def test_slerp_of_identical_quaternions_is_that_quaternion():
    q = _axis_angle_quat(np.array([1.0, 2.0, 3.0]), 0.7)
    np.testing.assert_allclose(slerp(q, q, 0.3), q, atol=1e-12)


# -- configuration ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"horizon_ns": -1}, "horizon_ns must be >= 0"),
        ({"max_buffer": 1}, "max_buffer must be >= 2"),
        ({"max_gap_ns": 0}, "max_gap_ns must be > 0"),
        ({"reset_threshold_ns": 0}, "reset_threshold_ns must be > 0"),
        ({"max_pending": 0}, "max_pending must be >= 1"),
        ({"real_max_gap_ns": 0}, "real_max_gap_ns must be > 0"),
        ({"reorder_window_ns": -5}, "reorder_window_ns must be >= 0"),
    ],
)
def test_aligner_rejects_bad_settings(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        StreamAligner(3, **kwargs)


def test_aligner_rejects_a_layout_of_the_wrong_type():
    with pytest.raises(ConfigError, match="layout must be a ChannelLayout or int"):
        StreamAligner("three")  # type: ignore[arg-type]


def test_counters_start_at_zero_with_every_reason():
    aligner = StreamAligner(2)
    assert aligner.counters == dict.fromkeys(COUNTER_NAMES, 0)


# -- basic pairing ----------------------------------------------------------------------


def test_real_sample_is_paired_with_interpolated_sim_not_nearest():
    aligner = StreamAligner(1)
    aligner.push_sim(0, np.array([0.0]))
    aligner.push_sim(10 * MS, np.array([10.0]))
    pairs = aligner.push_real(3 * MS, np.array([42.0]))
    assert len(pairs) == 1
    pair = pairs[0]
    assert pair.stamp_ns == 3 * MS and pair.real_stamp_ns == 3 * MS
    np.testing.assert_allclose(pair.sim, [3.0])
    np.testing.assert_allclose(pair.real, [42.0])
    assert pair.extrapolated_ns == 0


def test_real_sample_waits_until_sim_brackets_it():
    aligner = StreamAligner(1)
    aligner.push_sim(0, np.array([0.0]))
    assert aligner.push_real(5 * MS, np.array([1.0])) == []
    assert aligner.pending_real == 1
    pairs = aligner.push_sim(20 * MS, np.array([20.0]))
    np.testing.assert_allclose([p.sim[0] for p in pairs], [5.0])
    assert aligner.pending_real == 0


def test_real_stamp_on_a_sim_stamp_takes_that_sample():
    aligner = StreamAligner(1)
    aligner.push_sim(0, np.array([1.0]))
    aligner.push_sim(MS, np.array([7.0]))
    (pair,) = aligner.push_real(MS, np.array([0.0]))
    np.testing.assert_allclose(pair.sim, [7.0])


def test_offset_maps_real_stamps_to_sim_time():
    aligner = StreamAligner(1)
    aligner.set_offset_ns(3_000_000_000)
    aligner.push_sim(3_000 * MS, np.array([0.0]))
    aligner.push_sim(3_010 * MS, np.array([10.0]))
    (pair,) = aligner.push_real(4 * MS, np.array([0.0]))
    assert pair.stamp_ns == 3_004 * MS and pair.real_stamp_ns == 4 * MS
    np.testing.assert_allclose(pair.sim, [4.0])
    assert aligner.offset_ns == 3_000_000_000


@pytest.mark.parametrize(("compensate", "expected_sim"), [(False, 8.0), (True, 6.0)])
def test_latency_shifts_the_pairing_only_when_compensated(compensate, expected_sim):
    aligner = StreamAligner(1, compensate_latency=compensate)
    aligner.set_latency_ns(2 * MS)
    aligner.push_sim(0, np.array([0.0]))
    aligner.push_sim(10 * MS, np.array([10.0]))
    (pair,) = aligner.push_real(8 * MS, np.array([0.0]))
    np.testing.assert_allclose(pair.sim, [expected_sim])
    assert aligner.latency_ns == 2 * MS


def test_latency_compensation_can_be_switched_at_run_time():
    aligner = StreamAligner(1)
    aligner.set_latency_ns(2 * MS)
    for k in range(11):
        aligner.push_sim(k * MS, np.array([float(k)]))
    (kept,) = aligner.push_real(5 * MS, np.array([0.0]))
    aligner.compensate_latency = True
    (compensated,) = aligner.push_real(9 * MS, np.array([0.0]))
    assert aligner.compensate_latency
    np.testing.assert_allclose([kept.sim[0], compensated.sim[0]], [5.0, 7.0])


def test_quaternion_block_is_slerped_and_linear_columns_are_not():
    layout = ChannelLayout(5, quat_starts=[1])
    axis = np.array([0.0, 1.0, 0.0])
    v0 = np.concatenate([[0.0], _axis_angle_quat(axis, 0.0)])
    v1 = np.concatenate([[1.0], _axis_angle_quat(axis, 1.2)])
    aligner = StreamAligner(layout)
    aligner.push_sim(0, v0)
    aligner.push_sim(10 * MS, v1)
    (pair,) = aligner.push_real(2_500_000, np.zeros(3))
    np.testing.assert_allclose(pair.sim[0], 0.25)
    np.testing.assert_allclose(pair.sim[1:], _axis_angle_quat(axis, 0.3), atol=1e-12)


# -- edge cases -------------------------------------------------------------------------


def test_duplicate_stamps_are_dropped_and_counted():
    aligner = StreamAligner(1)
    aligner.push_sim(0, np.array([0.0]))
    aligner.push_sim(0, np.array([5.0]))
    aligner.push_sim(MS, np.array([1.0]))
    aligner.push_real(MS // 2, np.array([0.0]))
    aligner.push_real(MS // 2, np.array([0.0]))
    counters = aligner.counters
    assert counters["sim_duplicate"] == 1
    assert counters["real_duplicate"] == 1
    assert counters["pairs"] == 1


def test_late_sim_sample_is_inserted_and_used():
    aligner = StreamAligner(1)
    aligner.push_sim(0, np.array([0.0]))
    aligner.push_sim(10 * MS, np.array([10.0]))
    aligner.push_sim(5 * MS, np.array([100.0]))  # late, between the two
    (pair,) = aligner.push_real(5 * MS, np.array([0.0]))
    np.testing.assert_allclose(pair.sim, [100.0])
    assert aligner.counters["sim_out_of_order"] == 1


def test_sim_sample_older_than_the_buffer_is_dropped():
    aligner = StreamAligner(1, max_buffer=3)
    for k in range(5):
        aligner.push_sim(k * MS, np.array([float(k)]))
    aligner.push_sim(MS // 2, np.array([0.0]))
    assert aligner.counters["sim_too_old"] == 1
    assert aligner.buffered_sim == 3


def test_late_real_sample_is_inserted_while_pending():
    aligner = StreamAligner(1)
    aligner.push_sim(0, np.array([0.0]))
    aligner.push_real(8 * MS, np.array([8.0]))
    aligner.push_real(4 * MS, np.array([4.0]))  # out of order, both still waiting
    pairs = aligner.push_sim(10 * MS, np.array([10.0]))
    assert [p.real_stamp_ns for p in pairs] == [4 * MS, 8 * MS]
    np.testing.assert_allclose([p.sim[0] for p in pairs], [4.0, 8.0])
    assert aligner.counters["real_out_of_order"] == 1


def test_late_real_sample_behind_an_emitted_pair_is_dropped():
    aligner = StreamAligner(1)
    aligner.push_sim(0, np.array([0.0]))
    aligner.push_sim(10 * MS, np.array([10.0]))
    assert len(aligner.push_real(8 * MS, np.array([0.0]))) == 1
    assert aligner.push_real(4 * MS, np.array([0.0])) == []
    assert aligner.counters["real_too_late"] == 1


def test_reorder_window_keeps_late_real_samples():
    aligner = StreamAligner(1, reorder_window_ns=5 * MS)
    aligner.push_sim(0, np.array([0.0]))
    aligner.push_sim(10 * MS, np.array([10.0]))
    assert aligner.push_real(8 * MS, np.array([0.0])) == []  # sim is only 2 ms past it
    pairs = aligner.push_real(4 * MS, np.array([0.0]))  # late, but 6 ms behind the sim
    pairs += aligner.push_sim(14 * MS, np.array([14.0]))
    assert [p.real_stamp_ns for p in pairs] == [4 * MS, 8 * MS]
    assert aligner.counters["real_too_late"] == 0


def test_offset_lowered_behind_an_emitted_pair_drops_and_counts():
    aligner = StreamAligner(1)
    aligner.push_sim(0, np.array([0.0]))
    aligner.push_sim(10 * MS, np.array([10.0]))
    aligner.push_real(5 * MS, np.array([0.0]))
    aligner.set_offset_ns(-2 * MS)
    assert aligner.push_real(6 * MS, np.array([0.0])) == []
    assert aligner.counters["real_offset_step_back"] == 1


def test_no_interpolation_across_a_sim_gap():
    aligner = StreamAligner(1, max_gap_ns=5 * MS, horizon_ns=0)
    aligner.push_sim(0, np.array([0.0]))
    aligner.push_sim(MS, np.array([1.0]))
    aligner.push_real(20 * MS, np.array([0.0]))
    assert aligner.push_sim(50 * MS, np.array([50.0])) == []
    counters = aligner.counters
    assert counters["sim_gap"] == 1
    assert counters["real_in_sim_gap"] == 1
    assert counters["pairs"] == 0


def test_extrapolation_within_the_horizon_at_both_edges_of_a_gap():
    aligner = StreamAligner(1, max_gap_ns=5 * MS, horizon_ns=2 * MS)
    aligner.push_sim(0, np.array([0.0]))
    aligner.push_sim(MS, np.array([1.0]))
    aligner.push_real(2 * MS, np.array([0.0]))  # 1 ms after the gap opens
    aligner.push_real(20 * MS, np.array([0.0]))  # middle of the gap: beyond the horizon
    aligner.push_real(49 * MS, np.array([0.0]))  # 1 ms before the gap closes
    pairs = aligner.push_sim(50 * MS, np.array([50.0]))
    pairs += aligner.push_sim(51 * MS, np.array([52.0]))
    assert [p.real_stamp_ns for p in pairs] == [2 * MS, 49 * MS]
    np.testing.assert_allclose([p.sim[0] for p in pairs], [2.0, 48.0])
    assert [p.extrapolated_ns for p in pairs] == [MS, MS]
    counters = aligner.counters
    assert counters["pairs_extrapolated"] == 2
    assert counters["real_in_sim_gap"] == 1


def test_real_before_the_first_sim_sample_is_extrapolated_only_within_horizon():
    aligner = StreamAligner(1, horizon_ns=MS)
    aligner.push_real(0, np.array([0.0]))  # 10 ms before: beyond the horizon
    aligner.push_real(9_500_000, np.array([0.0]))  # 0.5 ms before
    aligner.push_sim(10 * MS, np.array([10.0]))
    pairs = aligner.push_sim(11 * MS, np.array([11.0]))
    assert [p.real_stamp_ns for p in pairs] == [9_500_000]
    np.testing.assert_allclose(pairs[0].sim, [9.5])
    assert aligner.counters["real_before_sim_buffer"] == 1


def test_real_older_than_the_sim_buffer_is_dropped():
    aligner = StreamAligner(1, max_buffer=4, horizon_ns=10 * MS)
    for k in range(10):
        aligner.push_sim(k * MS, np.array([float(k)]))
    assert aligner.push_real(2 * MS, np.array([0.0])) == []
    assert aligner.counters["real_before_sim_buffer"] == 1


def test_sim_reset_clears_buffers_and_starts_a_new_epoch():
    aligner = StreamAligner(1, reset_threshold_ns=100 * MS)
    aligner.push_sim(1_000 * MS, np.array([0.0]))
    aligner.push_sim(1_010 * MS, np.array([1.0]))
    (first,) = aligner.push_real(1_005 * MS, np.array([0.0]))
    aligner.push_real(1_020 * MS, np.array([0.0]))  # pending, lost with the reset
    aligner.push_sim(0, np.array([5.0]))  # sim restarted at t = 0
    assert aligner.reset_count == 1
    assert aligner.buffered_sim == 1 and aligner.pending_real == 0
    aligner.push_sim(10 * MS, np.array([6.0]))
    aligner.set_offset_ns(-1_025 * MS)  # the caller re-estimates the offset
    (second,) = aligner.push_real(1_030 * MS, np.array([0.0]))
    assert aligner.counters["sim_reset"] == 1
    assert (first.epoch, second.epoch) == (0, 1)
    assert second.stamp_ns == 5 * MS
    np.testing.assert_allclose(second.sim, [5.5])


def test_real_reset_keeps_the_sim_buffer_and_starts_a_new_epoch():
    aligner = StreamAligner(1, reset_threshold_ns=100 * MS)
    aligner.push_sim(1_000 * MS, np.array([0.0]))
    aligner.push_sim(1_010 * MS, np.array([10.0]))
    (first,) = aligner.push_real(1_008 * MS, np.array([0.0]))
    aligner.set_offset_ns(1_500 * MS)
    (second,) = aligner.push_real(-495 * MS, np.array([0.0]))  # real clock stepped back 1.5 s
    assert aligner.counters["real_reset"] == 1
    assert aligner.buffered_sim == 2
    assert (first.epoch, second.epoch) == (0, 1)
    np.testing.assert_allclose(second.sim, [5.0])


def test_bad_shapes_are_counted_not_raised():
    aligner = StreamAligner(2)
    assert aligner.push_sim(0, np.zeros(3)) == []
    assert aligner.push_real(0, np.zeros((2, 2))) == []
    counters = aligner.counters
    assert counters["sim_bad_shape"] == 1 and counters["real_bad_shape"] == 1


def test_non_finite_sim_values_never_reach_a_pair():
    aligner = StreamAligner(2)
    aligner.push_sim(0, np.array([0.0, 0.0]))
    aligner.push_sim(MS, np.array([np.nan, 1.0]))
    aligner.push_sim(2 * MS, np.array([2.0, 2.0]))
    assert aligner.push_real(MS // 2, np.zeros(2)) == []
    assert aligner.counters["sim_non_finite"] == 1


def test_memory_is_bounded_on_both_sides():
    aligner = StreamAligner(1, max_buffer=16, max_pending=8)
    for k in range(100):
        aligner.push_sim(k * MS, np.array([0.0]))
    for k in range(50):
        aligner.push_real(1_000 * MS + k * MS, np.array([0.0]))  # sim never catches up
    assert aligner.buffered_sim == 16
    assert aligner.pending_real == 8
    assert aligner.counters["pending_overflow"] == 42


def test_flush_extrapolates_within_horizon_and_drops_the_rest():
    aligner = StreamAligner(1, horizon_ns=2 * MS)
    aligner.push_sim(0, np.array([0.0]))
    aligner.push_sim(MS, np.array([1.0]))
    aligner.push_real(2 * MS, np.array([0.0]))
    aligner.push_real(10 * MS, np.array([0.0]))
    pairs = aligner.flush()
    np.testing.assert_allclose([p.sim[0] for p in pairs], [2.0])
    assert aligner.counters["flushed_unpaired"] == 1
    assert aligner.pending_real == 0


def test_explicit_reset_clears_everything_but_the_time_base():
    aligner = StreamAligner(1)
    aligner.set_offset_ns(7)
    aligner.push_sim(0, np.array([0.0]))
    aligner.push_real(5, np.array([0.0]))
    aligner.reset()
    assert aligner.buffered_sim == 0 and aligner.pending_real == 0
    assert aligner.reset_count == 1 and aligner.offset_ns == 7


# -- batch ------------------------------------------------------------------------------


def test_batch_interpolates_and_marks_gaps_invalid():
    sim_t = np.array([0, MS, 2 * MS, 50 * MS, 51 * MS])
    sim_v = np.array([[0.0], [1.0], [2.0], [50.0], [51.0]])
    real_t = np.array([500_000, 20 * MS, 50_500_000, 60 * MS])
    out = align_batch(sim_t, sim_v, real_t, np.zeros((4, 1)), horizon_ns=0, max_gap_ns=5 * MS)
    assert out.valid.tolist() == [True, False, True, False]
    np.testing.assert_allclose(out.sim_values[[0, 2], 0], [0.5, 50.5])
    assert np.isnan(out.sim_values[[1, 3], 0]).all()


def test_batch_sorts_and_deduplicates_sim():
    sim_t = np.array([0, 2 * MS, MS, 2 * MS])
    sim_v = np.array([[0.0], [2.0], [1.0], [9.0]])
    out = align_batch(sim_t, sim_v, np.array([1_500_000]), np.zeros((1, 1)))
    assert out.sim_dropped == 1
    np.testing.assert_allclose(out.sim_values[:, 0], [1.5])


def test_batch_applies_offset_array_and_latency():
    sim_t = np.arange(0, 100 * MS, MS)
    sim_v = (sim_t * 1e-6)[:, None]
    real_t = np.array([10 * MS, 20 * MS])
    out = align_batch(sim_t, sim_v, real_t, np.zeros((2, 1)), offset_ns=np.array([5 * MS, 6 * MS]), latency_ns=MS)
    np.testing.assert_allclose(out.sim_values[:, 0], [14.0, 25.0])
    assert out.stamp_ns.tolist() == [14 * MS, 25 * MS]


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((np.zeros(3), np.zeros((2, 1)), np.zeros(1), np.zeros((1, 1))), "sim shapes disagree"),
        ((np.zeros(3), np.zeros((3, 1)), np.zeros(2), np.zeros((1, 1))), "real shapes disagree"),
    ],
)
def test_batch_rejects_mismatched_shapes(args, match):
    with pytest.raises(AlignmentError, match=match):
        align_batch(*args)


def test_batch_rejects_bad_settings_and_layouts():
    sim_t, sim_v = np.arange(3), np.zeros((3, 2))
    real_t, real_v = np.arange(2), np.zeros((2, 1))
    with pytest.raises(AlignmentError, match="horizon_ns >= 0"):
        align_batch(sim_t, sim_v, real_t, real_v, horizon_ns=-1)
    with pytest.raises(AlignmentError, match="layout has 5 values"):
        align_batch(sim_t, sim_v, real_t, real_v, layout=ChannelLayout(5))
    with pytest.raises(AlignmentError, match="offset_ns must be scalar"):
        align_batch(sim_t, sim_v, real_t, real_v, offset_ns=np.zeros(5, dtype=np.int64))


def test_batch_with_no_sim_samples_is_all_invalid():
    out = align_batch(np.zeros(0, dtype=np.int64), np.zeros((0, 2)), np.arange(3), np.zeros((3, 1)))
    assert not out.valid.any() and out.sim_values.shape == (3, 2)


def test_batch_slerps_quaternion_blocks():
    axis = np.array([1.0, 1.0, 0.0])
    sim_v = np.stack([_axis_angle_quat(axis, 0.0), _axis_angle_quat(axis, 1.0)])
    out = align_batch(np.array([0, 10 * MS]), sim_v, np.array([4 * MS]), np.zeros((1, 1)), layout=ChannelLayout(4, [0]))
    np.testing.assert_allclose(out.sim_values[0], _axis_angle_quat(axis, 0.4), atol=1e-12)


# -- properties -------------------------------------------------------------------------

increments = st.lists(
    st.one_of(st.integers(200_000, 3 * MS), st.integers(8 * MS, 30 * MS)), min_size=2, max_size=60
)


@st.composite
def two_streams(draw):
    sim_inc = draw(increments)
    real_inc = draw(st.lists(st.integers(1 * MS, 9 * MS), min_size=1, max_size=25))
    sim_t = np.cumsum(sim_inc).astype(np.int64)
    real_t = np.cumsum(real_inc).astype(np.int64) + draw(st.integers(-5 * MS, 5 * MS))
    sim_delay = draw(st.lists(st.integers(0, 2 * MS), min_size=len(sim_t), max_size=len(sim_t)))
    real_delay = draw(st.lists(st.integers(0, 6 * MS), min_size=len(real_t), max_size=len(real_t)))
    horizon = draw(st.sampled_from([0, MS // 2, 2 * MS]))
    return sim_t, real_t, np.array(sim_delay), np.array(real_delay), horizon


def _events(sim_t, sim_v, real_t, real_v, sim_delay, real_delay):
    events = [(int(t + d), "sim", int(t), v) for t, d, v in zip(sim_t, sim_delay, sim_v)]
    events += [(int(t + d), "real", int(t), v) for t, d, v in zip(real_t, real_delay, real_v)]
    return events


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(two_streams())
def test_property_monotone_stamps_and_no_extrapolation_past_horizon(streams):
    sim_t, real_t, sim_delay, real_delay, horizon = streams
    max_gap = 5 * MS
    sim_v = np.ones((sim_t.size, 1))
    real_v = np.zeros((real_t.size, 1))
    aligner = StreamAligner(1, horizon_ns=horizon, max_gap_ns=max_gap, max_buffer=64)
    pairs = feed(aligner, _events(sim_t, sim_v, real_t, real_v, sim_delay, real_delay))
    pairs += aligner.flush()
    stamps = [p.stamp_ns for p in pairs]
    assert all(a < b for a, b in zip(stamps, stamps[1:]))
    for p in pairs:
        assert 0 <= p.extrapolated_ns <= horizon
        after = sim_t[sim_t >= p.stamp_ns]
        before = sim_t[sim_t <= p.stamp_ns]
        bracketed = after.size and before.size and after[0] - before[-1] <= max_gap
        nearest = np.min(np.abs(sim_t - p.stamp_ns))
        assert bracketed or nearest <= horizon
    counters = aligner.counters
    assert counters["pairs"] == len(pairs)
    assert counters["real_samples"] + counters["real_duplicate"] + counters["real_too_late"] >= len(pairs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(two_streams(), st.lists(st.floats(-5, 5), min_size=60, max_size=60))
def test_property_exact_on_piecewise_linear_signals(streams, knots):
    sim_t, real_t, _, real_delay, _ = streams
    # The sim signal is piecewise linear with its knots at the sim stamps.
    sim_v = np.array(knots[: sim_t.size])[:, None] * np.array([[1.0, -2.0]])
    real_v = np.zeros((real_t.size, 1))
    aligner = StreamAligner(2, horizon_ns=0, max_gap_ns=10**12, max_buffer=128)
    # Sim in order (a late knot would change the signal after pairs used it); real in any order.
    events = _events(sim_t, sim_v, real_t, real_v, np.zeros(sim_t.size), real_delay)
    pairs = feed(aligner, events)
    for p in pairs:
        expected = [np.interp(p.stamp_ns, sim_t, sim_v[:, c]) for c in range(2)]
        np.testing.assert_allclose(p.sim, expected, rtol=1e-9, atol=1e-9)
    # Every real sample inside the sim span was paired, unless it arrived behind a later one.
    inside = int(np.sum((real_t >= sim_t[0]) & (real_t <= sim_t[-1])))
    assert inside - aligner.counters["real_too_late"] <= len(pairs) <= inside


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(two_streams(), st.floats(-3, 3), st.floats(-3, 3))
def test_property_extrapolation_is_exact_on_linear_signals(streams, slope, intercept):
    sim_t, real_t, sim_delay, real_delay, horizon = streams
    sim_v = linear_sim(sim_t, np.array([slope]), np.array([intercept]))
    real_v = np.zeros((real_t.size, 1))
    aligner = StreamAligner(1, horizon_ns=horizon, max_gap_ns=5 * MS, max_buffer=128)
    pairs = feed(aligner, _events(sim_t, sim_v, real_t, real_v, sim_delay, real_delay)) + aligner.flush()
    for p in pairs:
        np.testing.assert_allclose(p.sim[0], intercept + slope * p.stamp_ns * 1e-9, rtol=1e-9, atol=1e-9)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(two_streams(), st.lists(st.floats(-5, 5), min_size=60, max_size=60))
def test_property_streaming_in_order_matches_batch(streams, knots):
    sim_t, real_t, _, _, horizon = streams
    sim_v = np.array(knots[: sim_t.size])[:, None]
    real_v = np.arange(real_t.size, dtype=float)[:, None]
    aligner = StreamAligner(1, horizon_ns=horizon, max_gap_ns=5 * MS, max_buffer=128)
    # Each stream in stamp order, sim delivered 1 ms after real for the same stamp.
    events = _events(sim_t, sim_v, real_t, real_v, np.full(sim_t.size, MS), np.zeros(real_t.size))
    pairs = feed(aligner, events) + aligner.flush()
    batch = align_batch(sim_t, sim_v, real_t, real_v, horizon, max_gap_ns=5 * MS)
    streamed = {p.real_stamp_ns: p for p in pairs}
    assert sorted(streamed) == sorted(real_t[batch.valid].tolist())
    for k in np.flatnonzero(batch.valid):
        p = streamed[int(real_t[k])]
        np.testing.assert_allclose(p.sim, batch.sim_values[k], rtol=1e-12, atol=1e-12)
        assert p.extrapolated_ns == batch.extrapolated_ns[k]
