"""Tests of the clock offset and latency estimators (sim_real_bridge.core.timebase)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim_real_bridge.core.timebase import ClockOffsetEstimator, LatencyEstimator
from sim_real_bridge.errors import ConfigError

MS = 1_000_000
S = 1_000_000_000


def _feed_clock(
    est: ClockOffsetEstimator,
    rng: np.random.Generator,
    duration_s: float,
    offset_ns: int,
    drift_ppm: float = 0.0,
    start_ns: int = 0,
    min_delay_ns: int = 100_000,
    burst_fraction: float = 0.0,
) -> list[tuple[int, int]]:
    """Sim at 1 kHz stamped on a clock offset_ns (+ drift) ahead; real at 250 Hz on wall time.

    Returns (recv_ns, true offset ns) at each real message.
    """
    events = []
    for period, side in ((MS, "sim"), (4 * MS, "real")):
        wall = start_ns + np.arange(int(duration_s * S / period), dtype=np.int64) * period
        delay = min_delay_ns + rng.exponential(1.5 * MS, wall.size).astype(np.int64)
        burst = rng.random(wall.size) < burst_fraction
        delay[burst] += rng.integers(10 * MS, 50 * MS, int(burst.sum()))
        for w, d in zip(wall.tolist(), delay.tolist()):
            events.append((w + d, side, w))
    events.sort()
    truth = []
    for recv, side, wall in events:
        true_offset = offset_ns + int(drift_ppm * 1e-6 * (wall - start_ns))
        if side == "sim":
            est.update_sim(wall + true_offset, recv)
        else:
            est.update_real(wall, recv)
            truth.append((recv, offset_ns + int(drift_ppm * 1e-6 * (recv - start_ns))))
    return truth


def test_offset_is_invalid_until_both_sides_are_seen():
    est = ClockOffsetEstimator()
    first = est.estimate()
    assert not first.valid and first.offset_ns == 0 and math.isinf(first.offset_std_ns)
    est.update_sim(5 * S, 10)
    assert not est.valid
    est.update_real(0, 20)
    assert est.valid
    assert est.offset_ns() == 5 * S + 10


@pytest.mark.parametrize(("offset_s", "drift_ppm"), [(3.25, 0.0), (-7.5, 40.0), (1200.0, -60.0)])
def test_offset_and_drift_are_recovered(offset_s, drift_ppm):
    rng = np.random.default_rng(7)
    est = ClockOffsetEstimator()
    truth = _feed_clock(est, rng, 12.0, int(offset_s * S), drift_ppm)
    errors = np.array([est.offset_ns(recv) - off for recv, off in truth[-300:]])
    recv_last = truth[-1][0]
    assert est.offset_ns(recv_last) == est.estimate(recv_last).offset_ns
    # Same minimum transport delay on both sides: the offset is observable to ~the queuing floor.
    assert np.max(np.abs(errors)) < 0.2 * MS
    final = est.estimate()
    assert final.valid
    assert abs(final.drift_ppm - drift_ppm) < 5.0
    assert 0.0 < final.offset_std_ns < 0.2 * MS
    assert final.drift_std_ppm < 5.0


def test_offset_ignores_queuing_bursts():
    rng = np.random.default_rng(3)
    est = ClockOffsetEstimator()
    truth = _feed_clock(est, rng, 12.0, 2 * S, burst_fraction=0.2)
    recv, off = truth[-1]
    assert abs(est.offset_ns(recv) - off) < 0.2 * MS


@pytest.mark.parametrize(("known_floors", "expected_bias_ns"), [(False, 600_000), (True, 0)])
def test_unequal_minimum_transport_delay_biases_the_offset_unless_given(known_floors, expected_bias_ns):
    rng = np.random.default_rng(5)
    floors = {"sim_min_transport_ns": 100_000, "real_min_transport_ns": 700_000} if known_floors else {}
    est = ClockOffsetEstimator(**floors)
    # Real link 0.6 ms slower at best than the sim link: unobservable from stamps alone.
    events = []
    for period, side, floor in ((MS, "sim", 100_000), (4 * MS, "real", 700_000)):
        wall = np.arange(int(8 * S / period), dtype=np.int64) * period
        delay = floor + rng.exponential(MS, wall.size).astype(np.int64)
        events += [(int(w + d), side, int(w)) for w, d in zip(wall, delay)]
    for recv, side, wall in sorted(events):
        if side == "sim":
            est.update_sim(wall + 4 * S, recv)
        else:
            est.update_real(wall, recv)
    assert abs(est.offset_ns() - (4 * S + expected_bias_ns)) < 0.1 * MS


def test_clock_jump_backwards_restarts_that_side():
    rng = np.random.default_rng(11)
    est = ClockOffsetEstimator(reset_threshold_ns=200 * MS)
    _feed_clock(est, rng, 4.0, 10 * S)
    assert est.reset_count == 0
    # The sim restarts its clock: from now on sim time = wall - 100 s.
    truth = _feed_clock(est, rng, 4.0, -100 * S, start_ns=4 * S)
    assert est.reset_count == 1
    recv, off = truth[-1]
    assert abs(est.offset_ns(recv) - off) < 0.3 * MS


def test_clock_jump_forwards_restarts_that_side():
    rng = np.random.default_rng(12)
    est = ClockOffsetEstimator(reset_threshold_ns=200 * MS)
    _feed_clock(est, rng, 4.0, 10 * S)
    truth = _feed_clock(est, rng, 4.0, 60 * S, start_ns=4 * S)
    assert est.reset_count == 1
    recv, off = truth[-1]
    assert abs(est.offset_ns(recv) - off) < 0.3 * MS


def test_reset_forgets_both_sides():
    est = ClockOffsetEstimator()
    est.update_sim(100, 200)
    est.update_real(50, 300)
    est.reset()
    assert not est.valid and est.reset_count == 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"bucket_ns": 0}, "bucket_ns must be > 0"),
        ({"window_buckets": 1}, "window_buckets must be >= 2"),
        ({"reset_threshold_ns": -1}, "reset_threshold_ns must be > 0"),
    ],
)
def test_offset_estimator_rejects_bad_settings(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        ClockOffsetEstimator(**kwargs)


# -- latency ----------------------------------------------------------------------------


def _motion(t_s: np.ndarray) -> np.ndarray:
    """Three joints of smooth motion, shape (n, 3)."""
    return np.stack(
        [
            0.4 * np.sin(2 * np.pi * 0.7 * t_s),
            0.3 * np.sin(2 * np.pi * 0.31 * t_s + 1.0) + 0.1 * np.sin(2 * np.pi * 1.3 * t_s),
            0.2 * np.cos(2 * np.pi * 0.5 * t_s),
        ],
        axis=1,
    )


def _feed_latency(
    est: LatencyEstimator,
    latency_ns: int,
    duration_s: float = 8.0,
    joint_offset: np.ndarray | None = None,
    moving: bool = True,
    seed: int = 0,
) -> None:
    rng = np.random.default_rng(seed)
    sim_t = np.arange(int(duration_s * 1000), dtype=np.int64) * MS
    real_t = np.arange(int(duration_s * 250), dtype=np.int64) * 4 * MS + rng.integers(-300_000, 300_000, int(duration_s * 250))
    motion = _motion if moving else (lambda t: np.zeros((t.size, 3)) + 0.2)
    sim_q = motion(sim_t * 1e-9)
    real_q = motion((real_t - latency_ns) * 1e-9) + rng.normal(0, 1e-4, (real_t.size, 3))
    if joint_offset is not None:
        real_q = real_q + joint_offset
    k = 0
    for i, t in enumerate(sim_t.tolist()):
        est.add_sim(t, sim_q[i])
        while k < real_t.size and real_t[k] + 2 * MS <= t:
            est.add_real(int(real_t[k]), real_q[k])
            k += 1


@pytest.mark.parametrize("latency_ms", [5.0, 17.3, 50.0])
def test_latency_is_recovered_sub_millisecond(latency_ms):
    est = LatencyEstimator(3)
    _feed_latency(est, int(latency_ms * MS))
    result = est.estimate()
    assert result.valid and result.n_windows >= 5
    assert abs(result.latency_ns - latency_ms * MS) < 0.2 * MS
    assert 0.0 < result.std_ns < 0.5 * MS


def test_constant_joint_offset_does_not_bias_latency():
    est = LatencyEstimator(3)
    _feed_latency(est, 12 * MS, joint_offset=np.array([0.05, -0.1, 0.02]))
    assert abs(est.estimate().latency_ns - 12 * MS) < 0.2 * MS


def test_no_motion_gives_no_estimate():
    est = LatencyEstimator(3)
    _feed_latency(est, 12 * MS, moving=False, duration_s=5.0)
    result = est.estimate()
    assert not result.valid and math.isinf(result.std_ns)
    assert est.skipped_low_motion > 0


def test_joint_missing_on_one_side_is_ignored():
    est = LatencyEstimator(4)
    rng = np.random.default_rng(1)
    sim_t = np.arange(6000, dtype=np.int64) * MS
    real_t = np.arange(1500, dtype=np.int64) * 4 * MS
    sim_q = np.hstack([_motion(sim_t * 1e-9), rng.normal(size=(sim_t.size, 1))])
    real_q = np.hstack([_motion((real_t - 9 * MS) * 1e-9), np.full((real_t.size, 1), np.nan)])
    k = 0
    for i, t in enumerate(sim_t.tolist()):
        est.add_sim(t, sim_q[i])
        while k < real_t.size and real_t[k] + 2 * MS <= t:
            est.add_real(int(real_t[k]), real_q[k])
            k += 1
    assert abs(est.estimate().latency_ns - 9 * MS) < 0.2 * MS


def test_latency_reset_and_stale_samples():
    est = LatencyEstimator(3)
    _feed_latency(est, 20 * MS, duration_s=4.0)
    assert est.estimate().valid
    assert est.add_real(0, np.zeros(3)) is False  # older than the last real sample
    est.reset()
    assert not est.estimate().valid and est.n_windows == 0


def test_latency_resets_itself_when_stamps_jump_back():
    est = LatencyEstimator(3, reset_threshold_ns=500 * MS)
    _feed_latency(est, 10 * MS, duration_s=4.0)
    assert est.estimate().valid
    est.add_sim(0, np.zeros(3))  # sim restarted: stamps 4 s back
    assert est.reset_count == 1 and not est.estimate().valid
    _feed_latency(est, 25 * MS, duration_s=5.0, seed=3)  # new epoch from t = 0 again
    assert abs(est.estimate().latency_ns - 25 * MS) < 0.2 * MS


def test_latency_follows_a_change():
    est = LatencyEstimator(3, n_keep=4)
    _feed_latency(est, 10 * MS, duration_s=6.0)
    est.reset()
    _feed_latency(est, 30 * MS, duration_s=6.0, seed=1)
    assert abs(est.estimate().latency_ns - 30 * MS) < 0.2 * MS


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_joints": 0}, "n_joints must be >= 1"),
        ({"n_joints": 2, "min_latency_ns": 0, "max_latency_ns": 1 * MS}, "max_latency_ns > min_latency_ns"),
        ({"n_joints": 2, "window_ns": 0}, "must be > 0"),
        ({"n_joints": 2, "n_keep": 0}, "n_keep >= 1"),
        ({"n_joints": 2, "reset_threshold_ns": 0}, "reset_threshold_ns must be > 0"),
    ],
)
def test_latency_estimator_rejects_bad_settings(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        LatencyEstimator(**kwargs)
