"""Tests of the free-space delay/gain/offset fit (sim_real_bridge.core.calibration)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_real_bridge.core.calibration import fit_joint_calibration
from sim_real_bridge.errors import AlignmentError, ConfigError

MS = 1_000_000


def _signals(delay_s: float, gains, offsets, noise: float = 0.0, seed: int = 0, duration_s: float = 8.0):
    rng = np.random.default_rng(seed)
    t = np.arange(0, int(duration_s * 1e9), 4 * MS, dtype=np.int64)
    ts = t * 1e-9

    def motion(x):
        return np.stack([0.5 * np.sin(2 * np.pi * 0.4 * x), 0.3 * np.cos(2 * np.pi * 0.9 * x) + 0.1 * np.sin(3.1 * x)], 1)

    q_sim = motion(ts)
    q_real = np.asarray(gains) * motion(ts - delay_s) + np.asarray(offsets) + rng.normal(0, noise, q_sim.shape)
    return t, q_sim, q_real


def test_recovers_delay_gain_and_offset_per_joint():
    t, q_sim, q_real = _signals(0.0234, [1.1, 0.85], [0.05, -0.02])
    fits = fit_joint_calibration(t, q_sim, q_real, np.ones(t.size, bool), 60 * MS, joint_names=["shoulder", "elbow"])
    assert [f.name for f in fits] == ["shoulder", "elbow"]
    for fit, gain, offset in zip(fits, [1.1, 0.85], [0.05, -0.02]):
        assert fit.delay_s == pytest.approx(0.0234, abs=2e-4)
        assert fit.gain == pytest.approx(gain, rel=1e-3)
        assert fit.offset_rad == pytest.approx(offset, abs=1e-3)
        assert fit.rms_after_rad < 0.01 * fit.rms_before_rad
        assert fit.n_samples > 1000


def test_residual_before_is_plain_difference_and_after_reaches_the_noise():
    t, q_sim, q_real = _signals(0.01, [1.0, 1.0], [0.0, 0.0], noise=1e-3, seed=2)
    mask = np.ones(t.size, bool)
    fits = fit_joint_calibration(t, q_sim, q_real, mask, 30 * MS)
    usable = (t - t[0]) >= 30 * MS
    for j, fit in enumerate(fits):
        assert fit.rms_before_rad == pytest.approx(np.sqrt(np.mean((q_real[usable, j] - q_sim[usable, j]) ** 2)))
        assert fit.rms_after_rad == pytest.approx(1e-3, rel=0.1)
        assert fit.name == f"joint_{j}"


def test_only_free_space_samples_are_fitted():
    t, q_sim, q_real = _signals(0.015, [1.0, 1.0], [0.0, 0.0])
    contact = (t > 3_000 * MS) & (t < 5_000 * MS)
    q_real[contact] += 0.3  # contact pushes the real arm away: must not enter the fit
    fits = fit_joint_calibration(t, q_sim, q_real, ~contact, 40 * MS)
    for fit in fits:
        assert fit.delay_s == pytest.approx(0.015, abs=2e-4)
        assert fit.offset_rad == pytest.approx(0.0, abs=1e-3)
        assert fit.n_samples == int(np.sum(~contact & ((t - t[0]) >= 40 * MS)))


def test_too_few_free_space_samples_give_nan():
    t, q_sim, q_real = _signals(0.01, [1.0, 1.0], [0.0, 0.0])
    mask = np.zeros(t.size, bool)
    mask[100:105] = True
    fits = fit_joint_calibration(t, q_sim, q_real, mask, 20 * MS)
    assert all(math.isnan(f.delay_s) and math.isnan(f.rms_after_rad) and f.n_samples == 5 for f in fits)


def test_motionless_joint_gets_unit_gain_and_the_offset():
    t = np.arange(0, 2_000 * MS, 4 * MS, dtype=np.int64)
    q_sim = np.full((t.size, 1), 0.3)
    q_real = np.full((t.size, 1), 0.32)
    (fit,) = fit_joint_calibration(t, q_sim, q_real, np.ones(t.size, bool), 10 * MS)
    assert fit.gain == 1.0
    assert fit.offset_rad == pytest.approx(0.02)
    assert fit.rms_after_rad == pytest.approx(0.0, abs=1e-12)


def test_nan_samples_are_skipped():
    t, q_sim, q_real = _signals(0.02, [1.0, 1.0], [0.0, 0.0])
    q_real[::7, 0] = np.nan
    fits = fit_joint_calibration(t, q_sim, q_real, np.ones(t.size, bool), 50 * MS)
    assert fits[0].delay_s == pytest.approx(0.02, abs=2e-4)
    assert fits[0].n_samples < fits[1].n_samples


@settings(max_examples=25, deadline=None)
@given(st.floats(0.0, 0.045), st.floats(0.7, 1.3), st.floats(-0.1, 0.1))
def test_property_fit_never_worse_than_before_and_recovers_truth(delay_s, gain, offset):
    t, q_sim, q_real = _signals(delay_s, [gain, gain], [offset, offset], duration_s=4.0)
    fits = fit_joint_calibration(t, q_sim, q_real, np.ones(t.size, bool), 50 * MS)
    for fit in fits:
        assert fit.rms_after_rad <= fit.rms_before_rad + 1e-12
        assert fit.delay_s == pytest.approx(delay_s, abs=3e-4)
        assert fit.gain == pytest.approx(gain, rel=5e-3)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"q_real": np.zeros((5, 3))}, AlignmentError, "shapes disagree"),
        ({"free_space_mask": np.ones(4, bool)}, AlignmentError, "shapes disagree"),
        ({"stamp_ns": np.array([0, 2, 1, 3, 4])}, AlignmentError, "strictly increasing"),
        ({"max_delay_ns": -1}, ConfigError, "max_delay_ns >= 0"),
        ({"delay_step_ns": 0}, ConfigError, "delay_step_ns > 0"),
        ({"joint_names": ["a"]}, AlignmentError, "got 1 names for 2 joints"),
    ],
)
def test_fit_errors(kwargs, error, match):
    args = {
        "stamp_ns": np.arange(5) * MS,
        "q_sim": np.zeros((5, 2)),
        "q_real": np.zeros((5, 2)),
        "free_space_mask": np.ones(5, bool),
        "max_delay_ns": 2 * MS,
    }
    args.update(kwargs)
    with pytest.raises(error, match=match):
        fit_joint_calibration(**args)


@pytest.mark.parametrize("delay_s", [0.0, 0.00047933695039347753, 0.0003, 0.0497])
def test_delays_near_either_end_of_the_grid_are_refined(delay_s):
    # Found by the property above: under half a grid step the best grid point is the
    # grid's end, which has only one neighbour.
    t, q_sim, q_real = _signals(delay_s, [1.0, 1.0], [0.0, 0.0], duration_s=4.0)
    fits = fit_joint_calibration(t, q_sim, q_real, np.ones(t.size, bool), 50 * MS)
    for fit in fits:
        assert fit.delay_s == pytest.approx(delay_s, abs=3e-4)


def _fit_gain_offset_rows(x, y):
    """The fit as first written: y broadcast to every row of x, its sums taken row by row."""
    y = np.broadcast_to(y, x.shape)
    n = x.shape[-1]
    xm = x.mean(axis=-1, keepdims=True)
    ym = y.mean(axis=-1, keepdims=True)
    dx, dy = x - xm, y - ym
    sxx = np.einsum("...i,...i->...", dx, dx)
    sxy = np.einsum("...i,...i->...", dx, dy)
    syy = np.einsum("...i,...i->...", dy, dy)
    flat = sxx <= 1e-18 * max(n, 1)
    gain = np.where(flat, 1.0, sxy / np.where(flat, 1.0, sxx))
    offset = ym[..., 0] - gain * xm[..., 0]
    sse = np.where(flat, np.einsum("...i,...i->...", dy - dx, dy - dx), syy - gain * sxy)
    return gain, offset, np.maximum(sse, 0.0)


@pytest.mark.parametrize("n", [3, 17, 1917, 8193, 20_011])
@pytest.mark.parametrize("rows", [1, 2, 51])
def test_gain_offset_fit_with_one_shared_y_equals_the_row_by_row_form_bit_for_bit(n, rows):
    from sim_real_bridge.core.calibration import _fit_gain_offset

    rng = np.random.default_rng(n + rows)
    x = rng.normal(size=(rows, n)) * rng.uniform(0.1, 3.0, (rows, 1))
    x[0] = 0.25  # a motionless row: offset only
    y = rng.normal(size=n)
    for got, want in zip(_fit_gain_offset(x, y), _fit_gain_offset_rows(x, y), strict=True):
        assert got.shape == want.shape and np.array_equal(got, want)


def test_joints_with_their_own_missing_samples_fit_as_alone():
    t, q_sim, q_real = _signals(0.02, [1.05, 0.9], [0.01, 0.0], noise=1e-3)
    q_sim = np.concatenate([q_sim, q_sim[:, ::-1], q_sim], axis=1)
    q_real = np.concatenate([q_real, q_real[:, ::-1], q_real], axis=1)
    q_real[::11, 1] = np.nan
    q_sim[5::13, 3] = np.nan
    mask = np.ones(t.size, bool)
    mask[300:400] = False
    fits = fit_joint_calibration(t, q_sim, q_real, mask, 50 * MS)
    for j, fit in enumerate(fits):
        (alone,) = fit_joint_calibration(t, q_sim[:, j], q_real[:, j], mask, 50 * MS, joint_names=[fit.name])
        assert fit == alone
